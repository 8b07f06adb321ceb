//! The feed: appending a delivery (with its idempotency key), reading pages of events, one
//! event by id, acknowledging, and the last sequence.

use crate::store::Feed;
use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};

use crate::append::append_in_tx;
use crate::domain::{ids, Limits, Millis};
use crate::rows::*;
use crate::store::rules;
use crate::store::{
    Acked, Appended, Event, EventPage, EventRef, IdempotencyClaim, MatchingPage, NewEvent,
    StoreError, StoreResult, TypeFilter,
};
use crate::SqliteStore;

#[async_trait]
impl Feed for SqliteStore {
    async fn append_event(
        &self, id: &str, event: NewEvent, claim: Option<IdempotencyClaim>, limits: &Limits,
        now: Millis,
    ) -> StoreResult<Appended> {
        let id = id.to_owned();
        let limits = limits.clone();
        let appended = self
            .write(move |conn| {
                let address = live_address(conn, &id, now)?;
                if let Some(claim) = &claim {
                    let seen: Option<(i64, String, String)> = conn
                        .prepare_cached(
                            "SELECT seq, event_id, body_hash FROM idempotency \
                             WHERE address_id = ?1 AND key_hash = ?2 AND expires_at > ?3",
                        )
                        .map_err(sql_err)?
                        .query_row(params![id, claim.key_hash, now], |r| {
                            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                        })
                        .optional()
                        .map_err(sql_err)?;
                    if let Some((seq, event_id, body_hash)) = seen {
                        let original = EventRef {
                            id: event_id,
                            sequence: u(seq),
                        };
                        return rules::repeated_delivery(original, &body_hash, claim);
                    }
                }
                let event_ref = append_in_tx(conn, &address, &event, &limits, now)?;
                if let Some(claim) = &claim {
                    conn.prepare_cached(
                        "INSERT OR REPLACE INTO idempotency (address_id, key_hash, seq, event_id, \
                         body_hash, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    )
                    .map_err(sql_err)?
                    .execute(params![
                        id,
                        claim.key_hash,
                        i(event_ref.sequence),
                        event_ref.id,
                        claim.body_hash,
                        limits.event_expiry(now, address.expires_at)
                    ])
                    .map_err(sql_err)?;
                }
                Ok(Appended {
                    event: event_ref,
                    duplicate: false,
                })
            })
            .await?;
        Ok(appended)
    }

    async fn read_events(
        &self, id: &str, after: u64, limit: usize, max_bytes: u64, now: Millis,
    ) -> StoreResult<EventPage> {
        let id = id.to_owned();
        self.read(move |conn| {
            live_address(conn, &id, now)?;
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT {EVENT_COLUMNS} FROM events WHERE address_id = ?1 AND seq > ?2 \
                     AND expires_at > ?3 ORDER BY seq LIMIT ?4"
                ))
                .map_err(sql_err)?;
            let rows = stmt
                .query_map(
                    params![id, i(after), now, (limit as i64).saturating_add(1)],
                    event_row,
                )
                .map_err(sql_err)?;
            let mut events = Vec::new();
            let mut bytes = 0u64;
            let mut has_more = false;
            for row in rows {
                let event = row.map_err(sql_err)?;
                if events.len() == limit
                    || (!events.is_empty() && bytes + event.page_bytes() > max_bytes)
                {
                    has_more = true;
                    break;
                }
                bytes += event.page_bytes();
                events.push(event);
            }
            Ok(EventPage { events, has_more })
        })
        .await
    }

    async fn read_matching(
        &self, id: &str, after: u64, filter: &TypeFilter, limit: usize, max_bytes: u64, now: Millis,
    ) -> StoreResult<MatchingPage> {
        let id = id.to_owned();
        let filter = filter.clone();
        self.read(move |conn| {
            live_address(conn, &id, now)?;
            // The types of the events to examine (and one more: whether any lie beyond), then
            // the matching ones whole, one at a time.
            let mut heads: Vec<(u64, String)> = conn
                .prepare_cached(
                    "SELECT seq, type FROM events WHERE address_id = ?1 AND seq > ?2 \
                     AND expires_at > ?3 ORDER BY seq LIMIT ?4",
                )
                .map_err(sql_err)?
                .query_map(
                    params![id, i(after), now, (filter.examine as i64).saturating_add(1)],
                    |r| Ok((u(r.get::<_, i64>(0)?), r.get::<_, String>(1)?)),
                )
                .map_err(sql_err)?
                .collect::<Result<_, _>>()
                .map_err(sql_err)?;
            let beyond = heads.len() > filter.examine;
            heads.truncate(filter.examine);
            let mut one = conn
                .prepare_cached(&format!(
                    "SELECT {EVENT_COLUMNS} FROM events WHERE address_id = ?1 AND seq = ?2"
                ))
                .map_err(sql_err)?;
            let mut events: Vec<Event> = Vec::new();
            let mut bytes = 0u64;
            let mut examined_through = after;
            for (seq, event_type) in heads {
                if !filter.types.matches(&event_type) {
                    examined_through = seq;
                    continue;
                }
                let event = one
                    .query_row(params![id, i(seq)], event_row)
                    .map_err(sql_err)?;
                if events.len() == limit
                    || (!events.is_empty() && bytes + event.page_bytes() > max_bytes)
                {
                    let page = EventPage {
                        events,
                        has_more: true,
                    };
                    return Ok(MatchingPage {
                        page,
                        examined_through,
                    });
                }
                bytes += event.page_bytes();
                examined_through = seq;
                events.push(event);
            }
            let page = EventPage {
                events,
                has_more: beyond,
            };
            Ok(MatchingPage {
                page,
                examined_through,
            })
        })
        .await
    }

    async fn get_event(&self, id: &str, event_id: &str, now: Millis) -> StoreResult<Event> {
        let id = id.to_owned();
        let event_id = event_id.to_owned();
        self.read(move |conn| {
            live_address(conn, &id, now)?;
            let Some(seq) = ids::event_sequence(&event_id) else {
                return Err(StoreError::NotFound);
            };
            conn.prepare_cached(&format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE address_id = ?1 AND seq = ?2 \
                 AND id = ?3 AND expires_at > ?4"
            ))
            .map_err(sql_err)?
            .query_row(params![id, i(seq), event_id, now], event_row)
            .optional()
            .map_err(sql_err)?
            .ok_or(StoreError::NotFound)
        })
        .await
    }

    async fn ack_event(&self, id: &str, event_id: &str, now: Millis) -> StoreResult<Acked> {
        let id = id.to_owned();
        let event_id = event_id.to_owned();
        self.write(move |conn| {
            live_address(conn, &id, now)?;
            let Some(seq) = ids::event_sequence(&event_id) else {
                return Err(StoreError::NotFound);
            };
            let acked: Option<i64> = conn
                .prepare_cached(
                    "UPDATE events SET acked_at = coalesce(acked_at, ?4) WHERE address_id = ?1 \
                     AND seq = ?2 AND id = ?3 AND expires_at > ?4 RETURNING acked_at",
                )
                .map_err(sql_err)?
                .query_row(params![id, i(seq), event_id, now], |r| r.get(0))
                .optional()
                .map_err(sql_err)?;
            match acked {
                Some(at) => Ok(Acked {
                    event: EventRef {
                        id: event_id,
                        sequence: seq,
                    },
                    acknowledged_at: at,
                }),
                None => Err(StoreError::NotFound),
            }
        })
        .await
    }

    async fn last_sequence(&self, id: &str, now: Millis) -> StoreResult<u64> {
        let id = id.to_owned();
        self.read(move |conn| Ok(live_address(conn, &id, now)?.last_sequence))
            .await
    }
}
