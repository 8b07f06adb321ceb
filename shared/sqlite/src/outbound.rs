//! Outbound email (docs/API.md §16): contacts with their codes, and sends with their delivery
//! state. Each operation is one transaction of the single writer, so tries and daily counts are
//! counted exactly however many requests race.

use rusqlite::{params, Connection, OptionalExtension};

use crate::append::{append_in_tx, append_over_quota, check_quota};
use crate::domain::outbound::{
    code_hashes_equal, code_mails_from_scope, code_mails_to_scope, seconds_to_next_day, utc_day,
    ContactStatus, SendStatus, CODE_MAILS_PER_DAY, CODE_TRIES,
};
use crate::domain::{Limits, Millis};
use crate::rows::*;
use crate::store::{
    CodeCheck, CodeIssued, CodeMailCap, ContactRecord, EventRef, NewCode, NewSend, OutboundMessage,
    SendOutcome, SendRecord, SendRecorded, StoreError, StoreResult,
};
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
fn daily_count(conn: &Connection, scope: &str, day: i64) -> StoreResult<u64> {
    let count: Option<i64> = conn
        .prepare_cached("SELECT count FROM daily_counts WHERE scope = ?1 AND day = ?2")
        .map_err(sql_err)?
        .query_row(params![scope, day], |r| r.get(0))
        .optional()
        .map_err(sql_err)?;
    Ok(count.map_or(0, u))
}

fn count_up(conn: &Connection, scope: &str, day: i64) -> StoreResult<()> {
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
    conn: &Connection,
    code: &NewCode,
    limits: &Limits,
    now: Millis,
) -> StoreResult<()> {
    let day = utc_day(now);
    let to = code_mails_to_scope(&code.email);
    let from = code_mails_from_scope(&code.client);
    for (scope, cap, max) in [
        (
            &to,
            CodeMailCap::Recipient,
            limits.code_mails_per_recipient_per_day,
        ),
        (
            &from,
            CodeMailCap::Client,
            limits.code_mails_per_client_per_day,
        ),
    ] {
        if daily_count(conn, scope, day)? >= max {
            return Err(StoreError::CodeMailCap {
                cap,
                retry_after_seconds: seconds_to_next_day(now),
            });
        }
    }
    count_up(conn, &to, day)?;
    count_up(conn, &from, day)
}

fn load_contact(conn: &Connection, id: &str, email: &str) -> StoreResult<Option<ContactRecord>> {
    conn.prepare_cached(&format!(
        "SELECT {CONTACT_COLUMNS} FROM contacts WHERE address_id = ?1 AND email = ?2"
    ))
    .map_err(sql_err)?
    .query_row(params![id, email], contact_row)
    .optional()
    .map_err(sql_err)
}

const SEND_COLUMNS: &str = "id, address_id, seq, event_id, recipient, reply_to, subject, text, \
     message_id, in_reply_to, refs, status, attempts, next_attempt_at, last_error, lease_until";

fn send_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SendRecord> {
    let refs: String = r.get(10)?;
    let status: String = r.get(11)?;
    Ok(SendRecord {
        id: r.get(0)?,
        address_id: r.get(1)?,
        event: EventRef {
            sequence: u(r.get(2)?),
            id: r.get(3)?,
        },
        message: OutboundMessage {
            to: r.get(4)?,
            reply_to: r.get(5)?,
            subject: r.get(6)?,
            text: r.get(7)?,
            message_id: r.get(8)?,
            in_reply_to: r.get(9)?,
            references: serde_json::from_str(&refs).unwrap_or_default(),
        },
        status: SendStatus::parse(&status).unwrap_or(SendStatus::Failed),
        attempts: u32::try_from(r.get::<_, i64>(12)?).unwrap_or(u32::MAX),
        next_attempt_at: r.get(13)?,
        last_error: r.get(14)?,
        lease_until: r.get(15)?,
    })
}

fn load_send(conn: &Connection, id: &str, send_id: &str) -> StoreResult<Option<SendRecord>> {
    conn.prepare_cached(&format!(
        "SELECT {SEND_COLUMNS} FROM sends WHERE id = ?1 AND address_id = ?2"
    ))
    .map_err(sql_err)?
    .query_row(params![send_id, id], send_row)
    .optional()
    .map_err(sql_err)
}

impl SqliteStore {
    /// `Store::list_contacts` (the trait impl in lib.rs delegates here).
    pub(crate) async fn list_contacts_impl(
        &self,
        id: &str,
        now: Millis,
    ) -> StoreResult<Vec<ContactRecord>> {
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

    /// `Store::issue_contact_code` (the trait impl in lib.rs delegates here).
    pub(crate) async fn issue_contact_code_impl(
        &self,
        id: &str,
        code: NewCode,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<CodeIssued> {
        let id = id.to_owned();
        let limits = limits.clone();
        let max_contacts = limits.max_contacts;
        self.write(move |conn| {
            live_address(conn, &id, now)?;
            let day = utc_day(now);
            match load_contact(conn, &id, &code.email)? {
                Some(c) if c.status == ContactStatus::Confirmed => {
                    return Ok(CodeIssued::AlreadyConfirmed(c))
                }
                Some(c) => {
                    let mails = if c.code_day == day { c.code_mails } else { 0 };
                    if mails >= CODE_MAILS_PER_DAY {
                        return Err(StoreError::DailyLimit {
                            retry_after_seconds: seconds_to_next_day(now),
                        });
                    }
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
                    if u(count) >= max_contacts {
                        return Err(StoreError::QuotaExceeded);
                    }
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

    /// `Store::check_contact_code` (the trait impl in lib.rs delegates here).
    pub(crate) async fn check_contact_code_impl(
        &self,
        id: &str,
        email: &str,
        code_hash: &str,
        now: Millis,
    ) -> StoreResult<CodeCheck> {
        let (id, email, code_hash) = (id.to_owned(), email.to_owned(), code_hash.to_owned());
        self.write(move |conn| {
            live_address(conn, &id, now)?;
            let Some(c) = load_contact(conn, &id, &email)? else {
                return Err(StoreError::NotFound);
            };
            if c.status == ContactStatus::Confirmed {
                return Ok(CodeCheck::AlreadyConfirmed(c));
            }
            let (Some(stored), Some(expires_at)) = (&c.code_hash, c.code_expires_at) else {
                return Ok(CodeCheck::Expired);
            };
            if expires_at <= now {
                return Ok(CodeCheck::Expired);
            }
            if c.code_tries >= CODE_TRIES {
                return Ok(CodeCheck::Spent);
            }
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
            Ok(CodeCheck::Wrong {
                tries_left: CODE_TRIES - c.code_tries - 1,
            })
        })
        .await
    }

    /// `Store::record_send` (the trait impl in lib.rs delegates here).
    pub(crate) async fn record_send_impl(
        &self,
        id: &str,
        send: NewSend,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<SendRecorded> {
        let owned = id.to_owned();
        let limits = limits.clone();
        let recorded = self
            .write(move |conn| {
                let id = owned;
                let address = live_address(conn, &id, now)?;
                let earlier: Option<(String, String, i64, String, String)> = conn
                    .prepare_cached(
                        "SELECT id, body_hash, seq, event_id, status FROM sends \
                         WHERE address_id = ?1 AND key_hash = ?2",
                    )
                    .map_err(sql_err)?
                    .query_row(params![id, send.claim.key_hash], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                    })
                    .optional()
                    .map_err(sql_err)?;
                if let Some((send_id, body_hash, seq, event_id, status)) = earlier {
                    if body_hash != send.claim.body_hash {
                        return Err(StoreError::IdempotencyKeyReused);
                    }
                    return Ok(SendRecorded {
                        send_id,
                        event: EventRef {
                            id: event_id,
                            sequence: u(seq),
                        },
                        duplicate: true,
                        status: SendStatus::parse(&status).unwrap_or(SendStatus::Failed),
                    });
                }
                let confirmed = load_contact(conn, &id, &send.message.to)?
                    .is_some_and(|c| c.status == ContactStatus::Confirmed);
                if !confirmed {
                    return Err(StoreError::ContactNotConfirmed);
                }
                let day = utc_day(now);
                let today: i64 = conn
                    .prepare_cached("SELECT count(*) FROM sends WHERE address_id = ?1 AND day = ?2")
                    .map_err(sql_err)?
                    .query_row(params![id, day], |r| r.get(0))
                    .map_err(sql_err)?;
                if u(today) >= limits.sends_per_day {
                    return Err(StoreError::DailyLimit {
                        retry_after_seconds: seconds_to_next_day(now),
                    });
                }
                // Room for the send and its answer.
                check_quota(conn, &id, address.last_sequence + 2, &limits, now)?;
                let event = append_in_tx(conn, &address, &send.event, &limits, now)?;
                let m = &send.message;
                let refs = serde_json::to_string(&m.references)
                    .map_err(|e| StoreError::Internal(e.to_string()))?;
                let expires_at = limits
                    .event_expiry(now, address.expires_at)
                    .max((day + 2) * 86_400_000);
                conn.prepare_cached(
                    "INSERT INTO sends (id, address_id, key_hash, body_hash, seq, event_id, day, \
                     recipient, reply_to, subject, text, message_id, in_reply_to, refs, status, \
                     attempts, next_attempt_at, created_at, expires_at) VALUES (?1, ?2, ?3, ?4, \
                     ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, 'pending', 0, ?15, ?15, ?16)",
                )
                .map_err(sql_err)?
                .execute(params![
                    send.id,
                    id,
                    send.claim.key_hash,
                    send.claim.body_hash,
                    i(event.sequence),
                    event.id,
                    day,
                    m.to,
                    m.reply_to,
                    m.subject,
                    m.text,
                    m.message_id,
                    m.in_reply_to,
                    refs,
                    now,
                    expires_at,
                ])
                .map_err(sql_err)?;
                Ok(SendRecorded {
                    send_id: send.id,
                    event,
                    duplicate: false,
                    status: SendStatus::Pending,
                })
            })
            .await?;
        if !recorded.duplicate {
            self.inner.signal.notify(id, recorded.event.sequence);
        }
        Ok(recorded)
    }

    /// `Store::claim_send` (the trait impl in lib.rs delegates here).
    pub(crate) async fn claim_send_impl(
        &self,
        id: &str,
        send_id: &str,
        lease_until: Millis,
        now: Millis,
    ) -> StoreResult<Option<SendRecord>> {
        let (id, send_id) = (id.to_owned(), send_id.to_owned());
        self.write(move |conn| {
            live_address(conn, &id, now)?;
            let claimed = conn
                .prepare_cached(
                    "UPDATE sends SET attempts = attempts + 1, lease_until = ?3 \
                     WHERE id = ?1 AND address_id = ?2 AND status = 'pending' \
                     AND coalesce(next_attempt_at, 0) <= ?4 AND coalesce(lease_until, 0) <= ?4",
                )
                .map_err(sql_err)?
                .execute(params![send_id, id, lease_until, now])
                .map_err(sql_err)?;
            if claimed == 0 {
                return Ok(None);
            }
            load_send(conn, &id, &send_id)
        })
        .await
    }

    /// `Store::get_send` (the trait impl in lib.rs delegates here).
    pub(crate) async fn get_send_impl(
        &self,
        id: &str,
        send_id: &str,
        now: Millis,
    ) -> StoreResult<Option<SendRecord>> {
        let (id, send_id) = (id.to_owned(), send_id.to_owned());
        self.read(move |conn| {
            live_address(conn, &id, now)?;
            load_send(conn, &id, &send_id)
        })
        .await
    }

    /// `Store::finish_send` (the trait impl in lib.rs delegates here).
    pub(crate) async fn finish_send_impl(
        &self,
        id: &str,
        send_id: &str,
        outcome: SendOutcome,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<()> {
        let (owned, send_id) = (id.to_owned(), send_id.to_owned());
        let limits = limits.clone();
        let appended = self
            .write(move |conn| {
                let id = owned;
                let address = live_address(conn, &id, now)?;
                let pending = load_send(conn, &id, &send_id)?
                    .is_some_and(|s| s.status == SendStatus::Pending);
                if !pending {
                    return Ok(None);
                }
                let update = |status: &str, next: Option<Millis>, error: Option<&str>| {
                    conn.prepare_cached(
                        "UPDATE sends SET status = ?3, next_attempt_at = ?4, lease_until = NULL, \
                         last_error = coalesce(?5, last_error) WHERE id = ?1 AND address_id = ?2",
                    )
                    .map_err(sql_err)?
                    .execute(params![send_id, id, status, next, error])
                    .map_err(sql_err)
                };
                match outcome {
                    SendOutcome::Sent => {
                        update("sent", None, None)?;
                        Ok(None)
                    }
                    SendOutcome::Retry {
                        next_attempt_at,
                        error,
                    } => {
                        update("pending", Some(next_attempt_at), Some(&error))?;
                        Ok(None)
                    }
                    SendOutcome::Failed { error, event } => {
                        update("failed", None, Some(&error))?;
                        let e = append_over_quota(conn, &address, &event, &limits, now)?;
                        Ok(Some(e.sequence))
                    }
                }
            })
            .await?;
        if let Some(seq) = appended {
            self.inner.signal.notify(id, seq);
        }
        Ok(())
    }

    /// `Store::due_sends` (the trait impl in lib.rs delegates here).
    pub(crate) async fn due_sends_impl(
        &self,
        now: Millis,
        limit: usize,
    ) -> StoreResult<Vec<(String, String)>> {
        self.read(move |conn| {
            conn.prepare_cached(
                "SELECT s.address_id, s.id FROM sends s JOIN addresses a ON a.id = s.address_id \
                 WHERE s.status = 'pending' AND s.next_attempt_at <= ?1 \
                 AND coalesce(s.lease_until, 0) <= ?1 AND a.deleted_at IS NULL \
                 AND (a.expires_at IS NULL OR a.expires_at > ?1) \
                 ORDER BY s.next_attempt_at LIMIT ?2",
            )
            .map_err(sql_err)?
            .query_map(
                params![now, i64::try_from(limit).unwrap_or(i64::MAX)],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(sql_err)?
            .collect::<Result<_, _>>()
            .map_err(sql_err)
        })
        .await
    }
}
