//! Wake hooks (docs/API.md §19): each operation one transaction of the single writer, so the
//! cap, the compare-and-set on a hook's revision and the reports appended with it are exact.
//! An append that an active hook's types wake for sets the hooks' `woken_through`
//! ([`hooks_woken`], in the append's transaction) and tells the wake loop after the commit.

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};

use crate::append::append_over_quota;
use crate::connections::Tx;
use crate::domain::hooks::HookFormat;
use crate::domain::{Limits, Millis};
use crate::rows::*;
use crate::store::{
    hook_types, DueHooks, HookDelivery, HookRecord, HookStatus, Hooks, NewEvent, NewHook,
    StoreError, StoreResult,
};
use crate::SqliteStore;

const HOOK_COLUMNS: &str = "id, address_id, url, types, format, headers, secret, \
     debounce_seconds, status, created_at, delivered_through, pending_to, attempts, not_before, \
     lease_until, last_wake_at, failed_ranges, last_error, revision";

/// A stored text that does not read back: the row is damaged, which is an internal error.
fn unreadable(column: usize, what: &str) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        column,
        rusqlite::types::Type::Text,
        format!("unreadable hook {what}").into(),
    )
}

fn hook_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<HookRecord> {
    let types: String = r.get(3)?;
    let format: String = r.get(4)?;
    let headers: String = r.get(5)?;
    let status: String = r.get(8)?;
    Ok(HookRecord {
        id: r.get(0)?,
        address_id: r.get(1)?,
        url: r.get(2)?,
        types: serde_json::from_str(&types).map_err(|_| unreadable(3, "types"))?,
        format: HookFormat::parse(&format).ok_or_else(|| unreadable(4, "format"))?,
        headers: serde_json::from_str(&headers).map_err(|_| unreadable(5, "headers"))?,
        secret: r.get(6)?,
        debounce_seconds: u(r.get(7)?),
        status: HookStatus::parse(&status).ok_or_else(|| unreadable(8, "status"))?,
        created_at: r.get(9)?,
        delivery: HookDelivery {
            delivered_through: u(r.get(10)?),
            pending_to: r.get::<_, Option<i64>>(11)?.map(u),
            attempts: u32::try_from(r.get::<_, i64>(12)?).unwrap_or(u32::MAX),
            not_before: r.get(13)?,
            lease_until: r.get(14)?,
            last_wake_at: r.get(15)?,
            failed_ranges: u32::try_from(r.get::<_, i64>(16)?).unwrap_or(u32::MAX),
            last_error: r.get(17)?,
        },
        revision: u(r.get(18)?),
    })
}

fn load_hooks(conn: &Connection, id: &str) -> StoreResult<Vec<HookRecord>> {
    conn.prepare_cached(&format!(
        "SELECT {HOOK_COLUMNS} FROM hooks WHERE address_id = ?1 ORDER BY rowid"
    ))
    .map_err(sql_err)?
    .query_map([id], hook_row)
    .map_err(sql_err)?
    .collect::<Result<Vec<_>, _>>()
    .map_err(sql_err)
}

fn load_hook(conn: &Connection, id: &str, hook_id: &str) -> StoreResult<HookRecord> {
    conn.prepare_cached(&format!(
        "SELECT {HOOK_COLUMNS} FROM hooks WHERE id = ?1 AND address_id = ?2"
    ))
    .map_err(sql_err)?
    .query_row(params![hook_id, id], hook_row)
    .optional()
    .map_err(sql_err)?
    .ok_or(StoreError::NotFound)
}

fn json<T: serde::Serialize + ?Sized>(value: &T) -> StoreResult<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Internal(e.to_string()))
}

/// Writes the address's `hook_types` from its hooks as they now stand.
fn keep_hook_types(conn: &Connection, id: &str) -> StoreResult<()> {
    let types = hook_types(&load_hooks(conn, id)?);
    let stored = if types.is_empty() {
        None
    } else {
        Some(json(&types)?)
    };
    conn.prepare_cached("UPDATE addresses SET hook_types = ?2 WHERE id = ?1")
        .map_err(sql_err)?
        .execute(params![id, stored])
        .map_err(sql_err)?;
    Ok(())
}

/// Inserts new hooks of address `id`, active with their cursor at `head`, and keeps the
/// address's hook types (also in the transaction that creates the address).
pub(crate) fn insert_hooks(
    conn: &Connection, id: &str, hooks: Vec<NewHook>, head: u64, now: Millis,
) -> StoreResult<Vec<HookRecord>> {
    if hooks.is_empty() {
        return Ok(Vec::new());
    }
    let mut added = Vec::with_capacity(hooks.len());
    for hook in hooks {
        let record = HookRecord::new(id, hook, head, now);
        conn.prepare_cached(
            "INSERT INTO hooks (id, address_id, url, types, format, headers, secret, \
             debounce_seconds, status, created_at, delivered_through, woken_through, revision) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, ?12)",
        )
        .map_err(sql_err)?
        .execute(params![
            record.id,
            id,
            record.url,
            json(&record.types)?,
            record.format.as_str(),
            json(&record.headers)?,
            record.secret,
            i(record.debounce_seconds),
            record.status.as_str(),
            now,
            i(head),
            i(record.revision),
        ])
        .map_err(sql_err)?;
        added.push(record);
    }
    keep_hook_types(conn, id)?;
    Ok(added)
}

/// In an append's transaction: the active hooks of `address_id` have an event at `sequence`
/// their types wake for; the wake loop is told once the append commits.
pub(crate) fn hooks_woken(conn: &Tx<'_>, address_id: &str, sequence: u64) -> StoreResult<()> {
    conn.prepare_cached(
        "UPDATE hooks SET woken_through = ?2 WHERE address_id = ?1 AND status = 'active'",
    )
    .map_err(sql_err)?
    .execute(params![address_id, i(sequence)])
    .map_err(sql_err)?;
    conn.tell_hooks();
    Ok(())
}

#[async_trait]
impl Hooks for SqliteStore {
    async fn add_hooks(
        &self, id: &str, hooks: Vec<NewHook>, max: usize, now: Millis,
    ) -> StoreResult<Vec<HookRecord>> {
        let id = id.to_owned();
        self.write(move |conn| {
            let address = live_address(conn, &id, now)?;
            let held: i64 = conn
                .prepare_cached("SELECT count(*) FROM hooks WHERE address_id = ?1")
                .map_err(sql_err)?
                .query_row([&id], |r| r.get(0))
                .map_err(sql_err)?;
            if u(held) as usize + hooks.len() > max {
                return Err(StoreError::QuotaExceeded);
            }
            insert_hooks(conn, &id, hooks, address.last_sequence, now)
        })
        .await
    }

    async fn list_hooks(&self, id: &str, now: Millis) -> StoreResult<Vec<HookRecord>> {
        let id = id.to_owned();
        self.read(move |conn| {
            live_address(conn, &id, now)?;
            load_hooks(conn, &id)
        })
        .await
    }

    async fn get_hook(&self, id: &str, hook_id: &str, now: Millis) -> StoreResult<HookRecord> {
        let (id, hook_id) = (id.to_owned(), hook_id.to_owned());
        self.read(move |conn| {
            live_address(conn, &id, now)?;
            load_hook(conn, &id, &hook_id)
        })
        .await
    }

    async fn save_hook(
        &self, id: &str, hook: HookRecord, events: Vec<NewEvent>, limits: &Limits, now: Millis,
    ) -> StoreResult<Option<HookRecord>> {
        let id = id.to_owned();
        let limits = limits.clone();
        self.write(move |conn| {
            let mut address = live_address(conn, &id, now)?;
            let stored = load_hook(conn, &id, &hook.id)?;
            if stored.revision != hook.revision {
                return Ok(None);
            }
            let d = &hook.delivery;
            let reactivated =
                hook.status == HookStatus::Active && stored.status != HookStatus::Active;
            conn.prepare_cached(
                "UPDATE hooks SET status = ?3, delivered_through = ?4, pending_to = ?5, \
                 attempts = ?6, not_before = ?7, lease_until = ?8, last_wake_at = ?9, \
                 failed_ranges = ?10, last_error = ?11, revision = revision + 1, \
                 woken_through = CASE WHEN ?12 THEN ?13 ELSE woken_through END \
                 WHERE id = ?1 AND address_id = ?2",
            )
            .map_err(sql_err)?
            .execute(params![
                hook.id,
                id,
                hook.status.as_str(),
                i(d.delivered_through),
                d.pending_to.map(i),
                i64::from(d.attempts),
                d.not_before,
                d.lease_until,
                d.last_wake_at,
                i64::from(d.failed_ranges),
                d.last_error,
                reactivated,
                i(address.last_sequence),
            ])
            .map_err(sql_err)?;
            if hook.status != stored.status {
                keep_hook_types(conn, &id)?;
            }
            if reactivated {
                // Events that arrived while it was paused or disabled are its to wake for.
                conn.tell_hooks();
            }
            for event in &events {
                let appended = append_over_quota(conn, &address, event, &limits, now)?;
                address.last_sequence = appended.sequence;
            }
            load_hook(conn, &id, &hook.id).map(Some)
        })
        .await
    }

    async fn delete_hook(&self, id: &str, hook_id: &str, now: Millis) -> StoreResult<()> {
        let (id, hook_id) = (id.to_owned(), hook_id.to_owned());
        self.write(move |conn| {
            live_address(conn, &id, now)?;
            let n = conn
                .prepare_cached("DELETE FROM hooks WHERE id = ?1 AND address_id = ?2")
                .map_err(sql_err)?
                .execute(params![hook_id, id])
                .map_err(sql_err)?;
            if n == 0 {
                return Err(StoreError::NotFound);
            }
            keep_hook_types(conn, &id)
        })
        .await
    }

    async fn due_hooks(&self, now: Millis, limit: usize) -> StoreResult<DueHooks> {
        self.read(move |conn| {
            // A hook wants a wake when a range is pending or an append woke it beyond its
            // cursor (the partial index `hooks_wanting` holds exactly those); it is due when
            // neither a retry, a debounce nor a lease holds it back.
            let due = conn
                .prepare_cached(
                    "SELECT h.address_id, h.id FROM hooks h JOIN addresses a ON a.id = h.address_id \
                     WHERE h.status = 'active' \
                       AND (h.pending_to IS NOT NULL OR h.woken_through > h.delivered_through) \
                       AND COALESCE(h.not_before, 0) <= ?1 AND COALESCE(h.lease_until, 0) <= ?1 \
                       AND a.deleted_at IS NULL AND (a.expires_at IS NULL OR a.expires_at > ?1) \
                     ORDER BY COALESCE(h.not_before, 0) LIMIT ?2",
                )
                .map_err(sql_err)?
                .query_map(params![now, i64::try_from(limit).unwrap_or(i64::MAX)], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .map_err(sql_err)?
                .collect::<Result<Vec<(String, String)>, _>>()
                .map_err(sql_err)?;
            let next_at: Option<Millis> = conn
                .prepare_cached(
                    "SELECT MIN(MAX(COALESCE(not_before, 0), COALESCE(lease_until, 0))) FROM hooks \
                     WHERE status = 'active' \
                       AND (pending_to IS NOT NULL OR woken_through > delivered_through) \
                       AND MAX(COALESCE(not_before, 0), COALESCE(lease_until, 0)) > ?1",
                )
                .map_err(sql_err)?
                .query_row([now], |r| r.get(0))
                .map_err(sql_err)?;
            Ok(DueHooks { due, next_at })
        })
        .await
    }
}
