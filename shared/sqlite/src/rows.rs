//! Rows and records: column lists, mapping rows to addresses and events, loading an address
//! (and checking it is live), integer conversions, and SQLite errors mapped to store errors.

use rusqlite::{Connection, OptionalExtension};

use crate::domain::email_policy::EmailPolicy;
use crate::domain::verification::VerificationConfig;
use crate::domain::{Ingress, Millis};
use crate::store::{AddressRecord, Event, StoreError, StoreResult};

pub(crate) fn sql_err(e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy) | Some(rusqlite::ErrorCode::DatabaseLocked) => {
            StoreError::Unavailable(e.to_string())
        }
        // Out of file descriptors (or memory): a passing condition of the process, not a bug,
        // so 503 with Retry-After rather than 500.
        Some(rusqlite::ErrorCode::CannotOpen) | Some(rusqlite::ErrorCode::OutOfMemory) => {
            StoreError::Unavailable(e.to_string())
        }
        _ => StoreError::Internal(e.to_string()),
    }
}

pub(crate) fn u(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

pub(crate) fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub(crate) const ADDRESS_COLUMNS: &str =
    "id, name, task_id, email, created_at, expires_at, deleted_at, \
     token_hash, inbox_hash, last_seq, state_keys, state_bytes, next_request_expiry, \
     verification, hook_types, next_timer_at, email_policy, email_refused";

pub(crate) fn address_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AddressRecord> {
    Ok(AddressRecord {
        id: r.get(0)?,
        name: r.get(1)?,
        task_id: r.get(2)?,
        email: r.get(3)?,
        created_at: r.get(4)?,
        expires_at: r.get(5)?,
        deleted_at: r.get(6)?,
        token_hash: r.get(7)?,
        inbox_hash: r.get(8)?,
        last_sequence: u(r.get(9)?),
        state_keys: u(r.get(10)?),
        state_bytes: u(r.get(11)?),
        next_request_expiry: r.get(12)?,
        next_timer_at: r.get(15)?,
        verification: match r.get::<_, Option<String>>(13)? {
            None => None,
            Some(stored) => Some(VerificationConfig::from_stored(&stored).ok_or_else(|| {
                rusqlite::Error::FromSqlConversionFailure(
                    13,
                    rusqlite::types::Type::Text,
                    "unreadable verification".into(),
                )
            })?),
        },
        email_policy: match r.get::<_, Option<String>>(16)? {
            None => None,
            Some(stored) => Some(EmailPolicy::from_stored(&stored).ok_or_else(|| {
                rusqlite::Error::FromSqlConversionFailure(
                    16,
                    rusqlite::types::Type::Text,
                    "unreadable email policy".into(),
                )
            })?),
        },
        email_refused: u(r.get(17)?),
        hook_types: match r.get::<_, Option<String>>(14)? {
            None => Vec::new(),
            Some(stored) => serde_json::from_str(&stored).map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(14, rusqlite::types::Type::Text, e.into())
            })?,
        },
    })
}

pub(crate) fn load_address(conn: &Connection, id: &str) -> StoreResult<Option<AddressRecord>> {
    conn.prepare_cached(&format!(
        "SELECT {ADDRESS_COLUMNS} FROM addresses WHERE id = ?1"
    ))
    .map_err(sql_err)?
    .query_row([id], address_row)
    .optional()
    .map_err(sql_err)
}

pub(crate) fn live_address(conn: &Connection, id: &str, now: Millis) -> StoreResult<AddressRecord> {
    match load_address(conn, id)? {
        None => Err(StoreError::AddressNotFound),
        Some(a) if a.is_gone(now) => Err(StoreError::AddressGone),
        Some(a) => Ok(a),
    }
}

pub(crate) const EVENT_COLUMNS: &str =
    "id, seq, type, source, ingress, received_at, acked_at, data, http";

pub(crate) fn event_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Event> {
    let ingress: String = r.get(4)?;
    Ok(Event {
        id: r.get(0)?,
        sequence: u(r.get(1)?),
        event_type: r.get(2)?,
        source: r.get(3)?,
        ingress: Ingress::parse(&ingress).unwrap_or(Ingress::Http),
        received_at: r.get(5)?,
        acknowledged_at: r.get(6)?,
        data: r.get(7)?,
        http: r.get(8)?,
    })
}
