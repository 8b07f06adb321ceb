//! Purging: a deleted address's data goes at once; the sweep removes expired events and
//! idempotency records, purges expired addresses, and forgets old tombstones.

use rusqlite::{params, Connection};

use crate::domain::{Limits, Millis};
use crate::requests::expire_in_tx;
use crate::rows::{load_address, sql_err};
use crate::store::rules::rate_window;
use crate::store::{StoreResult, SweepReport};
use crate::SqliteStore;

pub(crate) fn purge_data(conn: &Connection, address_id: &str) -> StoreResult<u64> {
    let mut removed = 0;
    for sql in [
        "DELETE FROM events WHERE address_id = ?1",
        "DELETE FROM state WHERE address_id = ?1",
        "DELETE FROM idempotency WHERE address_id = ?1",
        "DELETE FROM emails WHERE address_id = ?1",
        "DELETE FROM requests WHERE address_id = ?1",
        "DELETE FROM contacts WHERE address_id = ?1",
        "DELETE FROM sends WHERE address_id = ?1",
        "DELETE FROM viewer_codes WHERE address_id = ?1",
        "DELETE FROM hooks WHERE address_id = ?1",
        "DELETE FROM timers WHERE address_id = ?1",
    ] {
        removed += conn.execute(sql, [address_id]).map_err(sql_err)? as u64;
    }
    Ok(removed)
}

impl SqliteStore {
    /// `Backend::sweep` (the trait impl in lib.rs delegates here).
    pub(crate) async fn sweep_impl(
        &self, limits: &Limits, now: Millis,
    ) -> StoreResult<SweepReport> {
        let tombstone_ms = limits.tombstone_ms();
        let limits = limits.clone();
        let report = self
            .write(move |conn| {
                let events = conn
                    .execute("DELETE FROM events WHERE expires_at <= ?1", [now])
                    .map_err(sql_err)? as u64;
                conn.execute("DELETE FROM idempotency WHERE expires_at <= ?1", [now])
                    .map_err(sql_err)?;
                conn.execute("DELETE FROM emails WHERE expires_at <= ?1", [now])
                    .map_err(sql_err)?;
                conn.execute("DELETE FROM viewer_codes WHERE expires_at <= ?1", [now])
                    .map_err(sql_err)?;
                // Daily counts of days gone (yesterday's is kept: a clock a little behind).
                conn.execute(
                    "DELETE FROM daily_counts WHERE day < ?1",
                    [crate::domain::mail_out::utc_day(now) - 1],
                )
                .map_err(sql_err)?;
                // A send in delivery stays until it is sent or failed.
                conn.execute(
                    "DELETE FROM sends WHERE expires_at <= ?1 AND status != 'pending'",
                    [now],
                )
                .map_err(sql_err)?;
                // Requests for a person: due expiries of idle addresses get their event now
                // (a feed read would append them first anyway), and a request is forgotten a
                // retention period after its expiry.
                let due: Vec<String> = conn
                    .prepare(
                        "SELECT id FROM addresses WHERE next_request_expiry <= ?1 \
                         AND deleted_at IS NULL AND (expires_at IS NULL OR expires_at > ?1) \
                         LIMIT 1000",
                    )
                    .map_err(sql_err)?
                    .query_map([now], |r| r.get(0))
                    .map_err(sql_err)?
                    .collect::<Result<_, _>>()
                    .map_err(sql_err)?;
                for id in &due {
                    if let Some(address) = load_address(conn, id)? {
                        expire_in_tx(conn, &address, &limits, now)?;
                    }
                }
                // Timers: due ones of idle addresses fire now (the scheduler's safety net),
                // and a closed timer is forgotten a retention period after it closed.
                crate::timers::fire_due_in_tx(conn, &limits, now, 1000)?;
                conn.execute(
                    "DELETE FROM timers WHERE closed_at <= ?1",
                    [now.saturating_sub(limits.retention_ms())],
                )
                .map_err(sql_err)?;
                conn.execute(
                    "DELETE FROM requests WHERE expires_at <= ?1",
                    [now.saturating_sub(limits.retention_ms())],
                )
                .map_err(sql_err)?;
                let expired: Vec<String> = conn
                    .prepare(
                        "SELECT id FROM addresses WHERE purged_at IS NULL \
                         AND expires_at IS NOT NULL AND expires_at <= ?1",
                    )
                    .map_err(sql_err)?
                    .query_map([now], |r| r.get(0))
                    .map_err(sql_err)?
                    .collect::<Result<_, _>>()
                    .map_err(sql_err)?;
                for id in &expired {
                    purge_data(conn, id)?;
                    conn.execute(
                        "UPDATE addresses SET purged_at = ?2 WHERE id = ?1",
                        params![id, now],
                    )
                    .map_err(sql_err)?;
                }
                let tombstones = conn
                    .execute(
                        "DELETE FROM addresses WHERE purged_at IS NOT NULL \
                         AND coalesce(deleted_at, expires_at) <= ?1",
                        [now.saturating_sub(tombstone_ms)],
                    )
                    .map_err(sql_err)? as u64;
                Ok(SweepReport {
                    events,
                    addresses_purged: expired.len() as u64,
                    tombstones,
                })
            })
            .await?;
        self.inner.signal.prune();
        {
            let (window, _) = rate_window(now);
            self.inner
                .rate
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .retain(|_, (w, _)| *w >= window);
        }
        Ok(report)
    }
}
