//! Appending an event inside the writer's transaction (deliveries and state writes alike), and
//! the feed quota checked before it.

use rusqlite::{params, Connection, OptionalExtension};

use crate::connections::Tx;
use crate::domain::hooks::wakes_for;
use crate::domain::{ids, Limits, Millis};
use crate::rows::{i, sql_err};
use crate::store::rules::{self, Quota};
use crate::store::{AddressRecord, EventRef, NewEvent, StoreError, StoreResult};

/// Appends the next event of `address` (already checked live in this transaction); its waiters
/// are told once the write commits.
pub(crate) fn append_in_tx(
    conn: &Tx<'_>, address: &AddressRecord, event: &NewEvent, limits: &Limits, now: Millis,
) -> StoreResult<EventRef> {
    let seq = address.last_sequence + 1;
    check_quota(conn, &address.id, seq, limits, now)?;
    append_over_quota(conn, address, event, limits, now)
}

/// Appends the next event of `address` without the feed quota: only for the one report a
/// send's earlier append left room for (docs/API.md §16, `email.send_failed`).
pub(crate) fn append_over_quota(
    conn: &Tx<'_>, address: &AddressRecord, event: &NewEvent, limits: &Limits, now: Millis,
) -> StoreResult<EventRef> {
    let seq = address.last_sequence + 1;
    let id = ids::new_event_id(seq);
    let expires_at = limits.event_expiry(now, address.expires_at);
    conn.prepare_cached(
        "INSERT INTO events (address_id, seq, id, type, source, ingress, received_at, expires_at, \
         data, http) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )
    .map_err(sql_err)?
    .execute(params![
        address.id,
        i(seq),
        id,
        event.event_type,
        event.source,
        event.ingress.as_str(),
        now,
        expires_at,
        event.data,
        event.http,
    ])
    .map_err(sql_err)?;
    conn.prepare_cached("UPDATE addresses SET last_seq = ?2 WHERE id = ?1")
        .map_err(sql_err)?
        .execute(params![address.id, i(seq)])
        .map_err(sql_err)?;
    conn.tell(&address.id, seq);
    if wakes_for(&address.hook_types, &event.event_type) {
        crate::hooks::hooks_woken(conn, &address.id, seq)?;
    }
    Ok(EventRef { id, sequence: seq })
}

/// The feed quota of `rules::quota` for appending `seq`.
pub(crate) fn check_quota(
    conn: &Connection, address_id: &str, seq: u64, limits: &Limits, now: Millis,
) -> StoreResult<()> {
    let deciding = match rules::quota(seq, limits) {
        Quota::Allows => return Ok(()),
        Quota::Full => return Err(StoreError::QuotaExceeded),
        Quota::DecidedBy(deciding) => deciding,
    };
    let expires_at: Option<i64> = conn
        .prepare_cached("SELECT expires_at FROM events WHERE address_id = ?1 AND seq = ?2")
        .map_err(sql_err)?
        .query_row(params![address_id, i(deciding)], |r| r.get(0))
        .optional()
        .map_err(sql_err)?;
    if rules::quota_allows(expires_at, now) {
        Ok(())
    } else {
        Err(StoreError::QuotaExceeded)
    }
}
