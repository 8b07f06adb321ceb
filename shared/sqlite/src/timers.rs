//! Timers (docs/API.md §20): a row per timer; firing appends its event in the same transaction
//! that marks it fired, and every change keeps the address's `next_timer_at` (the earliest
//! pending `fire_at`) current and wakes the scheduler, which sleeps until the earliest of all.

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};

use crate::append::append_in_tx;
use crate::connections::Tx;
use crate::domain::{Limits, Millis};
use crate::rows::*;
use crate::store::rules;
use crate::store::{
    AddressRecord, CancelOutcome, CreatedTimer, EventRef, NewTimer, StoreError, StoreResult,
    TimerRecord, TimerStatus, Timers,
};
use crate::SqliteStore;

const TIMER_COLUMNS: &str =
    "id, fire_at, type, data, created_at, status, closed_at, event_id, event_seq";

fn timer_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TimerRecord> {
    let status: String = r.get(5)?;
    let event = match (r.get::<_, Option<String>>(7)?, r.get::<_, Option<i64>>(8)?) {
        (Some(id), Some(seq)) => Some(EventRef {
            id,
            sequence: u(seq),
        }),
        _ => None,
    };
    Ok(TimerRecord {
        id: r.get(0)?,
        fire_at: r.get(1)?,
        event_type: r.get(2)?,
        data: r.get(3)?,
        created_at: r.get(4)?,
        status: TimerStatus::parse(&status).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                5,
                rusqlite::types::Type::Text,
                format!("unknown timer status {status:?}").into(),
            )
        })?,
        closed_at: r.get(6)?,
        event,
    })
}

/// Timer `timer_id` of address `address_id`, if it has one.
fn load_timer(
    conn: &Connection, address_id: &str, timer_id: &str,
) -> StoreResult<Option<TimerRecord>> {
    conn.prepare_cached(&format!(
        "SELECT {TIMER_COLUMNS} FROM timers WHERE id = ?1 AND address_id = ?2"
    ))
    .map_err(sql_err)?
    .query_row([timer_id, address_id], timer_row)
    .optional()
    .map_err(sql_err)
}

fn vanished(timer_id: &str) -> StoreError {
    StoreError::Internal(format!("timer {timer_id} vanished"))
}

/// Sets the address's `next_timer_at` to its earliest pending timer's `fire_at`, and wakes the
/// scheduler once the write commits.
fn refresh_next_timer(conn: &Tx<'_>, address_id: &str) -> StoreResult<()> {
    conn.prepare_cached(
        "UPDATE addresses SET next_timer_at = (SELECT min(fire_at) FROM timers \
         WHERE address_id = ?1 AND status = 'pending') WHERE id = ?1",
    )
    .map_err(sql_err)?
    .execute([address_id])
    .map_err(sql_err)?;
    conn.tell_timers();
    Ok(())
}

/// Fires the address's pending timers due at `now`, each with its event, inside the caller's
/// transaction; returns how many. Stops at a full feed (the rest stay pending).
pub(crate) fn fire_in_tx(
    conn: &Tx<'_>, address: &AddressRecord, limits: &Limits, now: Millis,
) -> StoreResult<u64> {
    let due: Vec<TimerRecord> = conn
        .prepare_cached(&format!(
            "SELECT {TIMER_COLUMNS} FROM timers WHERE address_id = ?1 AND status = 'pending' \
             AND fire_at <= ?2 ORDER BY fire_at, id"
        ))
        .map_err(sql_err)?
        .query_map(params![address.id, now], timer_row)
        .map_err(sql_err)?
        .collect::<Result<_, _>>()
        .map_err(sql_err)?;
    let mut address = address.clone();
    let mut fired = 0;
    for timer in due {
        let event = match append_in_tx(conn, &address, &timer.fired_event(), limits, now) {
            Ok(e) => e,
            Err(StoreError::QuotaExceeded) => break,
            Err(e) => return Err(e),
        };
        address.last_sequence = event.sequence;
        conn.prepare_cached(
            "UPDATE timers SET status = 'fired', closed_at = ?2, event_id = ?3, event_seq = ?4 \
             WHERE id = ?1",
        )
        .map_err(sql_err)?
        .execute(params![timer.id, now, event.id, i(event.sequence)])
        .map_err(sql_err)?;
        fired += 1;
    }
    if fired > 0 {
        refresh_next_timer(conn, &address.id)?;
    }
    Ok(fired)
}

/// Fires the due timers of up to `addresses` live addresses whose earliest pending timer is due
/// at `now`, inside the caller's transaction (the scheduler's step, and the sweep's).
pub(crate) fn fire_due_in_tx(
    conn: &Tx<'_>, limits: &Limits, now: Millis, addresses: usize,
) -> StoreResult<u64> {
    let due: Vec<String> = conn
        .prepare_cached(
            "SELECT id FROM addresses WHERE next_timer_at <= ?1 AND deleted_at IS NULL \
             AND (expires_at IS NULL OR expires_at > ?1) ORDER BY next_timer_at LIMIT ?2",
        )
        .map_err(sql_err)?
        .query_map(
            params![now, i64::try_from(addresses).unwrap_or(i64::MAX)],
            |r| r.get(0),
        )
        .map_err(sql_err)?
        .collect::<Result<_, _>>()
        .map_err(sql_err)?;
    let mut fired = 0;
    for id in &due {
        if let Some(address) = load_address(conn, id)? {
            fired += fire_in_tx(conn, &address, limits, now)?;
        }
    }
    Ok(fired)
}

#[async_trait]
impl Timers for SqliteStore {
    async fn create_timer(
        &self, id: &str, t: NewTimer, _limits: &Limits, now: Millis,
    ) -> StoreResult<CreatedTimer> {
        let id = id.to_owned();
        self.write(move |conn| {
            live_address(conn, &id, now)?;
            if let Some(claim) = &t.claim {
                let earlier: Option<(String, String)> = conn
                    .prepare_cached(
                        "SELECT id, body_hash FROM timers WHERE address_id = ?1 AND key_hash = ?2",
                    )
                    .map_err(sql_err)?
                    .query_row(params![id, claim.key_hash], |row| {
                        Ok((row.get(0)?, row.get(1)?))
                    })
                    .optional()
                    .map_err(sql_err)?;
                if let Some((timer_id, body_hash)) = earlier {
                    rules::repeated_claim(&body_hash, &claim.body_hash)?;
                    let timer =
                        load_timer(conn, &id, &timer_id)?.ok_or_else(|| vanished(&timer_id))?;
                    return Ok(CreatedTimer {
                        timer,
                        duplicate: true,
                    });
                }
            }
            let pending: i64 = conn
                .prepare_cached(
                    "SELECT count(*) FROM timers WHERE address_id = ?1 AND status = 'pending'",
                )
                .map_err(sql_err)?
                .query_row([&id], |row| row.get(0))
                .map_err(sql_err)?;
            rules::pending_timer_quota(u(pending))?;
            conn.prepare_cached(
                "INSERT INTO timers (id, address_id, fire_at, type, data, created_at, status, \
                 key_hash, body_hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', ?7, ?8)",
            )
            .map_err(sql_err)?
            .execute(params![
                t.id,
                id,
                t.fire_at,
                t.event_type,
                t.data,
                t.created_at,
                t.claim.as_ref().map(|c| c.key_hash.as_str()),
                t.claim.as_ref().map(|c| c.body_hash.as_str()),
            ])
            .map_err(sql_err)?;
            refresh_next_timer(conn, &id)?;
            Ok(CreatedTimer {
                timer: TimerRecord::new(&t),
                duplicate: false,
            })
        })
        .await
    }

    async fn list_timers(&self, id: &str, now: Millis) -> StoreResult<Vec<TimerRecord>> {
        let id = id.to_owned();
        self.read(move |conn| {
            live_address(conn, &id, now)?;
            let mut timers: Vec<TimerRecord> = conn
                .prepare_cached(&format!(
                    "SELECT {TIMER_COLUMNS} FROM timers WHERE address_id = ?1 \
                     AND status = 'pending' ORDER BY fire_at, id"
                ))
                .map_err(sql_err)?
                .query_map([&id], timer_row)
                .map_err(sql_err)?
                .collect::<Result<_, _>>()
                .map_err(sql_err)?;
            let closed = conn
                .prepare_cached(&format!(
                    "SELECT {TIMER_COLUMNS} FROM timers WHERE address_id = ?1 \
                     AND closed_at IS NOT NULL ORDER BY closed_at DESC, id DESC LIMIT ?2"
                ))
                .map_err(sql_err)?
                .query_map(
                    params![id, crate::domain::timer::KEPT_CLOSED_TIMERS as i64],
                    timer_row,
                )
                .map_err(sql_err)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sql_err)?;
            timers.extend(closed);
            Ok(timers)
        })
        .await
    }

    /// serialises with firing: the first finds the timer pending, the other finds it closed.
    async fn cancel_timer(
        &self, id: &str, timer_id: &str, now: Millis,
    ) -> StoreResult<CancelOutcome> {
        let (id, timer_id) = (id.to_owned(), timer_id.to_owned());
        self.write(move |conn| {
            live_address(conn, &id, now)?;
            let timer = load_timer(conn, &id, &timer_id)?.ok_or(StoreError::NotFound)?;
            match timer.status {
                TimerStatus::Fired => return Ok(CancelOutcome::Fired(timer)),
                TimerStatus::Cancelled => return Ok(CancelOutcome::Cancelled(timer)),
                TimerStatus::Pending => {}
            }
            conn.prepare_cached(
                "UPDATE timers SET status = 'cancelled', closed_at = ?2 WHERE id = ?1",
            )
            .map_err(sql_err)?
            .execute(params![timer_id, now])
            .map_err(sql_err)?;
            refresh_next_timer(conn, &id)?;
            Ok(CancelOutcome::Cancelled(TimerRecord {
                status: TimerStatus::Cancelled,
                closed_at: Some(now),
                ..timer
            }))
        })
        .await
    }

    async fn fire_timers(&self, id: &str, limits: &Limits, now: Millis) -> StoreResult<u64> {
        let id = id.to_owned();
        let limits = limits.clone();
        self.write(move |conn| {
            let address = live_address(conn, &id, now)?;
            fire_in_tx(conn, &address, &limits, now)
        })
        .await
    }

    async fn next_timer_due(&self, now: Millis) -> StoreResult<Option<Millis>> {
        self.read(move |conn| {
            conn.prepare_cached(
                "SELECT next_timer_at FROM addresses WHERE next_timer_at IS NOT NULL \
                 AND deleted_at IS NULL AND (expires_at IS NULL OR expires_at > ?1) \
                 ORDER BY next_timer_at LIMIT 1",
            )
            .map_err(sql_err)?
            .query_row([now], |r| r.get(0))
            .optional()
            .map_err(sql_err)
        })
        .await
    }

    async fn fire_due_timers(
        &self, limits: &Limits, now: Millis, addresses: usize,
    ) -> StoreResult<u64> {
        let limits = limits.clone();
        self.write(move |conn| fire_due_in_tx(conn, &limits, now, addresses))
            .await
    }
}
