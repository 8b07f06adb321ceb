//! Contacts with their confirmation codes (docs/API.md §16). Each operation is one transaction
//! of the single writer, so tries and daily counts are counted exactly however many requests
//! race.

use crate::store::Contacts;
use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};

use crate::domain::mail_out::{code_hashes_equal, utc_day, ContactStatus};
use crate::domain::{Limits, Millis};
use crate::rows::*;
use crate::store::rules::mail::{self, CodeTry};
use crate::store::{CodeCheck, CodeIssued, ContactRecord, NewCode, StoreError, StoreResult};
use crate::SqliteStore;

const CONTACT_COLUMNS: &str = "email, status, created_at, confirmed_at, code_hash, \
     code_expires_at, code_tries, code_day, code_mails";

fn contact_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ContactRecord> {
    let status: String = r.get(1)?;
    Ok(ContactRecord {
        email: r.get(0)?,
        status: ContactStatus::parse(&status).unwrap_or(ContactStatus::Pending),
        created_at: r.get(2)?,
        confirmed_at: r.get(3)?,
        code_hash: r.get(4)?,
        code_expires_at: r.get(5)?,
        code_tries: u32::try_from(r.get::<_, i64>(6)?).unwrap_or(u32::MAX),
        code_day: r.get(7)?,
        code_mails: u32::try_from(r.get::<_, i64>(8)?).unwrap_or(u32::MAX),
    })
}

/// The count of `scope` on UTC day `day` (docs/API.md §16's server-wide daily caps).
pub(crate) fn daily_count(conn: &Connection, scope: &str, day: i64) -> StoreResult<u64> {
    let count: Option<i64> = conn
        .prepare_cached("SELECT count FROM daily_counts WHERE scope = ?1 AND day = ?2")
        .map_err(sql_err)?
        .query_row(params![scope, day], |r| r.get(0))
        .optional()
        .map_err(sql_err)?;
    Ok(count.map_or(0, u))
}

pub(crate) fn count_up(conn: &Connection, scope: &str, day: i64) -> StoreResult<()> {
    conn.prepare_cached(
        "INSERT INTO daily_counts (scope, day, count) VALUES (?1, ?2, 1) \
         ON CONFLICT (scope, day) DO UPDATE SET count = count + 1",
    )
    .map_err(sql_err)?
    .execute(params![scope, day])
    .map_err(sql_err)?;
    Ok(())
}

/// Refuses a code mail past the recipient mailbox's or the client's daily cap, in that order;
/// else counts it against both. In the transaction that issues the code.
fn count_code_mail(
    conn: &Connection, code: &NewCode, limits: &Limits, now: Millis,
) -> StoreResult<()> {
    let day = utc_day(now);
    let counts = mail::code_mail_counts(code, limits);
    for count in &counts {
        mail::code_mail_allowed(count, daily_count(conn, &count.scope, day)?, now)?;
    }
    for count in &counts {
        count_up(conn, &count.scope, day)?;
    }
    Ok(())
}

pub(crate) fn load_contact(
    conn: &Connection, id: &str, email: &str,
) -> StoreResult<Option<ContactRecord>> {
    conn.prepare_cached(&format!(
        "SELECT {CONTACT_COLUMNS} FROM contacts WHERE address_id = ?1 AND email = ?2"
    ))
    .map_err(sql_err)?
    .query_row(params![id, email], contact_row)
    .optional()
    .map_err(sql_err)
}

#[async_trait]
impl Contacts for SqliteStore {
    async fn list_contacts(&self, id: &str, now: Millis) -> StoreResult<Vec<ContactRecord>> {
        let id = id.to_owned();
        self.read(move |conn| {
            live_address(conn, &id, now)?;
            conn.prepare_cached(&format!(
                "SELECT {CONTACT_COLUMNS} FROM contacts WHERE address_id = ?1 ORDER BY email"
            ))
            .map_err(sql_err)?
            .query_map([&id], contact_row)
            .map_err(sql_err)?
            .collect::<Result<_, _>>()
            .map_err(sql_err)
        })
        .await
    }

    async fn issue_contact_code(
        &self, id: &str, code: NewCode, limits: &Limits, now: Millis,
    ) -> StoreResult<CodeIssued> {
        let id = id.to_owned();
        let limits = limits.clone();
        self.write(move |conn| {
            live_address(conn, &id, now)?;
            let day = utc_day(now);
            match load_contact(conn, &id, &code.email)? {
                Some(c) if c.status == ContactStatus::Confirmed => {
                    return Ok(CodeIssued::AlreadyConfirmed(c))
                }
                Some(c) => {
                    let mails = mail::contact_code_mails(&c, now)?;
                    count_code_mail(conn, &code, &limits, now)?;
                    conn.prepare_cached(
                        "UPDATE contacts SET code_hash = ?3, code_expires_at = ?4, \
                         code_tries = 0, code_day = ?5, code_mails = ?6 \
                         WHERE address_id = ?1 AND email = ?2",
                    )
                    .map_err(sql_err)?
                    .execute(params![
                        id,
                        code.email,
                        code.code_hash,
                        code.expires_at,
                        day,
                        i64::from(mails + 1)
                    ])
                    .map_err(sql_err)?;
                }
                None => {
                    let count: i64 = conn
                        .prepare_cached("SELECT count(*) FROM contacts WHERE address_id = ?1")
                        .map_err(sql_err)?
                        .query_row([&id], |r| r.get(0))
                        .map_err(sql_err)?;
                    mail::contact_quota(u(count), &limits)?;
                    count_code_mail(conn, &code, &limits, now)?;
                    conn.prepare_cached(
                        "INSERT INTO contacts (address_id, email, status, created_at, code_hash, \
                         code_expires_at, code_tries, code_day, code_mails) \
                         VALUES (?1, ?2, 'pending', ?3, ?4, ?5, 0, ?6, 1)",
                    )
                    .map_err(sql_err)?
                    .execute(params![
                        id,
                        code.email,
                        now,
                        code.code_hash,
                        code.expires_at,
                        day
                    ])
                    .map_err(sql_err)?;
                }
            }
            let c = load_contact(conn, &id, &code.email)?
                .ok_or_else(|| StoreError::Internal("a contact vanished".into()))?;
            Ok(CodeIssued::Issued(c))
        })
        .await
    }

    async fn check_contact_code(
        &self, id: &str, email: &str, code_hash: &str, now: Millis,
    ) -> StoreResult<CodeCheck> {
        let (id, email, code_hash) = (id.to_owned(), email.to_owned(), code_hash.to_owned());
        self.write(move |conn| {
            live_address(conn, &id, now)?;
            let Some(c) = load_contact(conn, &id, &email)? else {
                return Err(StoreError::NotFound);
            };
            if let CodeTry::Decided(check) = mail::code_try(&c, now) {
                return Ok(check);
            }
            let stored = c.code_hash.as_deref().unwrap_or_default();
            if code_hashes_equal(stored, &code_hash) {
                conn.prepare_cached(
                    "UPDATE contacts SET status = 'confirmed', confirmed_at = ?3, \
                     code_hash = NULL, code_expires_at = NULL, code_tries = code_tries + 1 \
                     WHERE address_id = ?1 AND email = ?2",
                )
                .map_err(sql_err)?
                .execute(params![id, email, now])
                .map_err(sql_err)?;
                let c = load_contact(conn, &id, &email)?
                    .ok_or_else(|| StoreError::Internal("a contact vanished".into()))?;
                return Ok(CodeCheck::Confirmed(c));
            }
            conn.prepare_cached(
                "UPDATE contacts SET code_tries = code_tries + 1 \
                 WHERE address_id = ?1 AND email = ?2",
            )
            .map_err(sql_err)?
            .execute(params![id, email])
            .map_err(sql_err)?;
            Ok(mail::wrong_code(c.code_tries + 1))
        })
        .await
    }
}
