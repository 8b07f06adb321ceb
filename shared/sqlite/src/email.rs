//! Inbound email: the raw message stored in the `emails` table, in the same transaction as its
//! `email.received` event, and read back by event or by `email_id` (docs/API.md §10–§11).
//!
//! A message row carries its event's sequence and expiry: the sweep removes both at retention,
//! and purging an address removes its messages with its events.

use crate::store::Emails;
use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};

use crate::append::append_in_tx;
use crate::domain::{ids, Limits, Millis};
use crate::rows::*;
use crate::store::{Appended, EventRef, NewEmail, StoreError, StoreResult, StoredEmail};
use crate::SqliteStore;

/// The retained event that `email_id` produced for this address, if any.
fn retained_email_event(
    conn: &Connection, address_id: &str, email_id: &str, now: Millis,
) -> StoreResult<Option<EventRef>> {
    conn.prepare_cached(
        "SELECT seq, event_id FROM emails WHERE address_id = ?1 AND email_id = ?2 \
         AND expires_at > ?3",
    )
    .map_err(sql_err)?
    .query_row(params![address_id, email_id, now], |r| {
        Ok(EventRef {
            sequence: u(r.get(0)?),
            id: r.get(1)?,
        })
    })
    .optional()
    .map_err(sql_err)
}

#[async_trait]
impl Emails for SqliteStore {
    async fn append_email(
        &self, id: &str, email: NewEmail, limits: &Limits, now: Millis,
    ) -> StoreResult<Appended> {
        let id = id.to_owned();
        let limits = limits.clone();
        let appended = self
            .write(move |conn| {
                let address = live_address(conn, &id, now)?;
                if let Some(event) = retained_email_event(conn, &id, &email.email_id, now)? {
                    return Ok(Appended {
                        event,
                        duplicate: true,
                    });
                }
                let stored: i64 = conn
                    .prepare_cached(
                        "SELECT coalesce(sum(size), 0) FROM emails \
                         WHERE address_id = ?1 AND expires_at > ?2",
                    )
                    .map_err(sql_err)?
                    .query_row(params![id, now], |r| r.get(0))
                    .map_err(sql_err)?;
                let size = email.raw.len() as u64;
                if u(stored).saturating_add(size) > limits.max_stored_email_bytes {
                    return Err(StoreError::EmailStorageFull);
                }
                let event = append_in_tx(conn, &address, &email.event, &limits, now)?;
                // A row of the same email_id whose event expired but is not swept yet is replaced.
                conn.prepare_cached(
                    "INSERT OR REPLACE INTO emails (address_id, email_id, seq, event_id, size, \
                     expires_at, raw) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(sql_err)?
                .execute(params![
                    id,
                    email.email_id,
                    i(event.sequence),
                    event.id,
                    i(size),
                    limits.event_expiry(now, address.expires_at),
                    email.raw,
                ])
                .map_err(sql_err)?;
                Ok(Appended {
                    event,
                    duplicate: false,
                })
            })
            .await?;
        Ok(appended)
    }

    async fn email_of_event(
        &self, id: &str, event_id: &str, now: Millis,
    ) -> StoreResult<StoredEmail> {
        let id = id.to_owned();
        let event_id = event_id.to_owned();
        self.read(move |conn| {
            live_address(conn, &id, now)?;
            let Some(seq) = ids::event_sequence(&event_id) else {
                return Err(StoreError::NotFound);
            };
            let retained: bool = conn
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM events WHERE address_id = ?1 AND seq = ?2 \
                     AND id = ?3 AND expires_at > ?4)",
                )
                .map_err(sql_err)?
                .query_row(params![id, i(seq), event_id, now], |r| r.get(0))
                .map_err(sql_err)?;
            if !retained {
                return Err(StoreError::NotFound);
            }
            conn.prepare_cached(
                "SELECT email_id, raw FROM emails WHERE address_id = ?1 AND seq = ?2 \
                 AND expires_at > ?3",
            )
            .map_err(sql_err)?
            .query_row(params![id, i(seq), now], |r| {
                Ok(StoredEmail {
                    email_id: r.get(0)?,
                    event: EventRef {
                        id: event_id.clone(),
                        sequence: seq,
                    },
                    raw: r.get(1)?,
                })
            })
            .optional()
            .map_err(sql_err)?
            .ok_or(StoreError::EmailUnavailable)
        })
        .await
    }

    async fn email_by_id(&self, id: &str, email_id: &str, now: Millis) -> StoreResult<StoredEmail> {
        let id = id.to_owned();
        let email_id = email_id.to_owned();
        self.read(move |conn| {
            live_address(conn, &id, now)?;
            conn.prepare_cached(
                "SELECT seq, event_id, raw FROM emails WHERE address_id = ?1 AND email_id = ?2 \
                 AND expires_at > ?3",
            )
            .map_err(sql_err)?
            .query_row(params![id, email_id, now], |r| {
                Ok(StoredEmail {
                    email_id: email_id.clone(),
                    event: EventRef {
                        sequence: u(r.get(0)?),
                        id: r.get(1)?,
                    },
                    raw: r.get(2)?,
                })
            })
            .optional()
            .map_err(sql_err)?
            .ok_or(StoreError::NotFound)
        })
        .await
    }
}
