//! Sends with their delivery state (docs/API.md §16): recorded with their `email.sent` event,
//! claimed, finished. Each operation is one transaction of the single writer, so the daily
//! count is exact however many requests race.

use crate::store::Sends;
use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};

use crate::append::{append_in_tx, append_over_quota, check_quota};
use crate::contacts::load_contact;
use crate::domain::mail_out::{utc_day, SendStatus};
use crate::domain::{Limits, Millis};
use crate::rows::*;
use crate::store::rules::{self, mail};
use crate::store::{
    EventRef, NewSend, OutboundMessage, SendOutcome, SendRecord, SendRecorded, StoreError,
    StoreResult,
};
use crate::SqliteStore;

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

#[async_trait]
impl Sends for SqliteStore {
    async fn record_send(
        &self, id: &str, send: NewSend, limits: &Limits, now: Millis,
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
                    rules::repeated_claim(&body_hash, &send.claim.body_hash)?;
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
                mail::send_recipient(load_contact(conn, &id, &send.message.to)?.as_ref())?;
                let day = utc_day(now);
                let today: i64 = conn
                    .prepare_cached("SELECT count(*) FROM sends WHERE address_id = ?1 AND day = ?2")
                    .map_err(sql_err)?
                    .query_row(params![id, day], |r| r.get(0))
                    .map_err(sql_err)?;
                mail::daily_sends(u(today), &limits, now)?;
                // Room for the send and its answer.
                check_quota(conn, &id, address.last_sequence + 2, &limits, now)?;
                let event = append_in_tx(conn, &address, &send.event, &limits, now)?;
                let m = &send.message;
                let refs = serde_json::to_string(&m.references)
                    .map_err(|e| StoreError::Internal(e.to_string()))?;
                let expires_at = mail::send_expires_at(&limits, now, address.expires_at);
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
        Ok(recorded)
    }

    async fn claim_send(
        &self, id: &str, send_id: &str, lease_until: Millis, now: Millis,
    ) -> StoreResult<Option<SendRecord>> {
        let (id, send_id) = (id.to_owned(), send_id.to_owned());
        self.write(move |conn| {
            live_address(conn, &id, now)?;
            let Some(send) = load_send(conn, &id, &send_id)? else {
                return Ok(None);
            };
            if !mail::claimable(&send, now) {
                return Ok(None);
            }
            conn.prepare_cached(
                "UPDATE sends SET attempts = attempts + 1, lease_until = ?3 \
                 WHERE id = ?1 AND address_id = ?2",
            )
            .map_err(sql_err)?
            .execute(params![send_id, id, lease_until])
            .map_err(sql_err)?;
            Ok(Some(SendRecord {
                attempts: send.attempts.saturating_add(1),
                lease_until: Some(lease_until),
                ..send
            }))
        })
        .await
    }

    async fn get_send(
        &self, id: &str, send_id: &str, now: Millis,
    ) -> StoreResult<Option<SendRecord>> {
        let (id, send_id) = (id.to_owned(), send_id.to_owned());
        self.read(move |conn| {
            live_address(conn, &id, now)?;
            load_send(conn, &id, &send_id)
        })
        .await
    }

    async fn finish_send(
        &self, id: &str, send_id: &str, outcome: SendOutcome, limits: &Limits, now: Millis,
    ) -> StoreResult<()> {
        let (owned, send_id) = (id.to_owned(), send_id.to_owned());
        let limits = limits.clone();
        self.write(move |conn| {
            let id = owned;
            let address = live_address(conn, &id, now)?;
            let pending =
                load_send(conn, &id, &send_id)?.is_some_and(|s| s.status == SendStatus::Pending);
            if !pending {
                return Ok(());
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
                    Ok(())
                }
                SendOutcome::Retry {
                    next_attempt_at,
                    error,
                } => {
                    update("pending", Some(next_attempt_at), Some(&error))?;
                    Ok(())
                }
                SendOutcome::Failed { error, event } => {
                    update("failed", None, Some(&error))?;
                    append_over_quota(conn, &address, &event, &limits, now)?;
                    Ok(())
                }
            }
        })
        .await
    }

    async fn due_sends(&self, now: Millis, limit: usize) -> StoreResult<Vec<(String, String)>> {
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
