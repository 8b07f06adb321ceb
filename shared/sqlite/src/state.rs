//! Durable state: listing, reading, writing and deleting keys. Writes and deletes append their
//! feed event in the same transaction.

use crate::store::States;
use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};

use crate::append::append_in_tx;
use crate::domain::{state::entry_size, Limits, Millis};
use crate::rows::*;
use crate::store::rules::{self, check_expected, StateTotals};
use crate::store::{
    StateDeleted, StateEntry, StateListing, StateMeta, StateWritten, StoreError, StoreResult,
};
use crate::SqliteStore;

fn current_state(
    conn: &Connection, address_id: &str, key: &str,
) -> StoreResult<Option<(u64, u64)>> {
    conn.prepare_cached("SELECT revision, size FROM state WHERE address_id = ?1 AND key = ?2")
        .map_err(sql_err)?
        .query_row(params![address_id, key], |r| {
            Ok((u(r.get(0)?), u(r.get(1)?)))
        })
        .optional()
        .map_err(sql_err)
}

#[async_trait]
impl States for SqliteStore {
    async fn list_state(&self, id: &str, now: Millis) -> StoreResult<StateListing> {
        let id = id.to_owned();
        self.read(move |conn| {
            let a = live_address(conn, &id, now)?;
            let mut stmt = conn
                .prepare_cached(
                    "SELECT key, revision, size, updated_at FROM state WHERE address_id = ?1 \
                     ORDER BY key",
                )
                .map_err(sql_err)?;
            let keys = stmt
                .query_map([&id], |r| {
                    Ok(StateMeta {
                        key: r.get(0)?,
                        revision: u(r.get(1)?),
                        size: u(r.get(2)?),
                        updated_at: r.get(3)?,
                    })
                })
                .map_err(sql_err)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sql_err)?;
            Ok(StateListing {
                keys,
                state_keys: a.state_keys,
                state_bytes: a.state_bytes,
            })
        })
        .await
    }

    async fn get_state(&self, id: &str, key: &str, now: Millis) -> StoreResult<StateEntry> {
        let id = id.to_owned();
        let key = key.to_owned();
        self.read(move |conn| {
            live_address(conn, &id, now)?;
            conn.prepare_cached(
                "SELECT key, value, revision, updated_at FROM state \
                 WHERE address_id = ?1 AND key = ?2",
            )
            .map_err(sql_err)?
            .query_row(params![id, key], |r| {
                Ok(StateEntry {
                    key: r.get(0)?,
                    value: r.get(1)?,
                    revision: u(r.get(2)?),
                    updated_at: r.get(3)?,
                })
            })
            .optional()
            .map_err(sql_err)?
            .ok_or(StoreError::NotFound)
        })
        .await
    }

    async fn put_state(
        &self, id: &str, key: &str, value: String, expected: Option<u64>, limits: &Limits,
        now: Millis,
    ) -> StoreResult<StateWritten> {
        let id = id.to_owned();
        let key = key.to_owned();
        let limits = limits.clone();
        let written = self
            .write(move |conn| {
                let address = live_address(conn, &id, now)?;
                let current = current_state(conn, &id, &key)?;
                check_expected(expected, current.map(|c| c.0))?;
                let size = entry_size(&key, &value);
                let totals = rules::state_after_put(
                    StateTotals::of(&address),
                    current.map(|c| c.1),
                    size,
                    &limits,
                )?;
                let revision = address.last_sequence + 1;
                let event = rules::state_updated_event(&key, revision, &value);
                let event_ref = append_in_tx(conn, &address, &event, &limits, now)?;
                conn.prepare_cached(
                    "INSERT INTO state (address_id, key, value, revision, size, updated_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(address_id, key) DO UPDATE SET \
                     value = excluded.value, revision = excluded.revision, size = excluded.size, \
                     updated_at = excluded.updated_at",
                )
                .map_err(sql_err)?
                .execute(params![id, key, value, i(revision), i(size), now])
                .map_err(sql_err)?;
                conn.prepare_cached(
                    "UPDATE addresses SET state_keys = ?2, state_bytes = ?3 WHERE id = ?1",
                )
                .map_err(sql_err)?
                .execute(params![id, i(totals.keys), i(totals.bytes)])
                .map_err(sql_err)?;
                Ok(StateWritten {
                    entry: StateEntry {
                        key,
                        value,
                        revision,
                        updated_at: now,
                    },
                    event: event_ref,
                })
            })
            .await?;
        Ok(written)
    }

    async fn delete_state(
        &self, id: &str, key: &str, expected: Option<u64>, limits: &Limits, now: Millis,
    ) -> StoreResult<StateDeleted> {
        let id = id.to_owned();
        let key = key.to_owned();
        let limits = limits.clone();
        let deleted = self
            .write(move |conn| {
                let address = live_address(conn, &id, now)?;
                let Some((revision, size)) = current_state(conn, &id, &key)? else {
                    return Err(StoreError::NotFound);
                };
                check_expected(expected, Some(revision))?;
                let new_revision = address.last_sequence + 1;
                let event = rules::state_deleted_event(&key, new_revision);
                let totals = rules::state_after_delete(StateTotals::of(&address), size);
                let event_ref = append_in_tx(conn, &address, &event, &limits, now)?;
                conn.prepare_cached("DELETE FROM state WHERE address_id = ?1 AND key = ?2")
                    .map_err(sql_err)?
                    .execute(params![id, key])
                    .map_err(sql_err)?;
                conn.prepare_cached(
                    "UPDATE addresses SET state_keys = ?2, state_bytes = ?3 WHERE id = ?1",
                )
                .map_err(sql_err)?
                .execute(params![id, i(totals.keys), i(totals.bytes)])
                .map_err(sql_err)?;
                Ok(StateDeleted {
                    key,
                    revision: new_revision,
                    event: event_ref,
                })
            })
            .await?;
        Ok(deleted)
    }
}
