//! Addresses: creating one, reading it (by id or by email key), its usage, and deleting it (a tombstone; its data is
//! purged at once).

use rusqlite::{params, OptionalExtension};

use crate::domain::verification::VerificationConfig;
use crate::domain::{ids, Limits, Millis};
use crate::purge::purge_data;
use crate::rows::*;
use crate::store::{AddressRecord, NewAddress, StoreError, StoreResult, Usage};
use crate::SqliteStore;

impl SqliteStore {
    /// `Store::create_address` (the trait impl in lib.rs delegates here).
    pub(crate) async fn create_address_impl(&self, a: NewAddress) -> StoreResult<()> {
        self.write(move |conn| {
            let n = conn
                .prepare_cached(
                    // Either unique key taken (the id, or the email key of an id differing
                    // only by case) inserts nothing: `AddressExists`.
                    "INSERT INTO addresses (id, name, task_id, email, email_key, created_at, \
                     expires_at, token_hash, inbox_hash, verification) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT DO NOTHING",
                )
                .map_err(sql_err)?
                .execute(params![
                    a.id,
                    a.name,
                    a.task_id,
                    a.email,
                    ids::email_key(&a.email),
                    a.created_at,
                    a.expires_at,
                    a.token_hash,
                    a.inbox_hash,
                    a.verification.as_ref().map(VerificationConfig::to_stored)
                ])
                .map_err(sql_err)?;
            if n == 0 {
                return Err(StoreError::AddressExists);
            }
            Ok(())
        })
        .await
    }

    /// `Store::get_address` (the trait impl in lib.rs delegates here).
    pub(crate) async fn get_address_impl(
        &self,
        id: &str,
        _now: Millis,
    ) -> StoreResult<Option<AddressRecord>> {
        let id = id.to_owned();
        self.read(move |conn| load_address(conn, &id)).await
    }

    /// `Store::address_by_email` (the trait impl in lib.rs delegates here): the row holding
    /// the email key, tombstones included, like `get_address`. Rows from before migration 2
    /// were backfilled with their key, so every address has one.
    pub(crate) async fn address_by_email_impl(
        &self,
        email: &str,
        _now: Millis,
    ) -> StoreResult<Option<AddressRecord>> {
        let email_key = ids::email_key(email);
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {ADDRESS_COLUMNS} FROM addresses WHERE email_key = ?1"
            ))
            .map_err(sql_err)?
            .query_row([email_key], address_row)
            .optional()
            .map_err(sql_err)
        })
        .await
    }

    /// `Store::set_verification` (the trait impl in lib.rs delegates here): one UPDATE of the
    /// live address's row.
    pub(crate) async fn set_verification_impl(
        &self,
        id: &str,
        verification: Option<VerificationConfig>,
        now: Millis,
    ) -> StoreResult<()> {
        let id = id.to_owned();
        let stored = verification.as_ref().map(VerificationConfig::to_stored);
        self.write(move |conn| {
            live_address(conn, &id, now)?;
            conn.prepare_cached("UPDATE addresses SET verification = ?2 WHERE id = ?1")
                .map_err(sql_err)?
                .execute(params![id, stored])
                .map_err(sql_err)?;
            Ok(())
        })
        .await
    }

    /// `Store::usage` (the trait impl in lib.rs delegates here).
    pub(crate) async fn usage_impl(
        &self,
        id: &str,
        _limits: &Limits,
        now: Millis,
    ) -> StoreResult<Usage> {
        let id = id.to_owned();
        self.read(move |conn| {
            let a = live_address(conn, &id, now)?;
            let retained: i64 = conn
                .prepare_cached(
                    "SELECT count(*) FROM events WHERE address_id = ?1 AND expires_at > ?2",
                )
                .map_err(sql_err)?
                .query_row(params![id, now], |r| r.get(0))
                .map_err(sql_err)?;
            Ok(Usage {
                last_sequence: a.last_sequence,
                retained_events: u(retained),
                state_keys: a.state_keys,
                state_bytes: a.state_bytes,
            })
        })
        .await
    }

    /// `Store::delete_address` (the trait impl in lib.rs delegates here).
    pub(crate) async fn delete_address_impl(&self, id: &str, now: Millis) -> StoreResult<()> {
        let id = id.to_owned();
        let result = {
            let id = id.clone();
            self.write(move |conn| {
                live_address(conn, &id, now)?;
                conn.execute(
                    "UPDATE addresses SET deleted_at = ?2, purged_at = ?2, state_keys = 0, \
                     state_bytes = 0 WHERE id = ?1",
                    params![id, now],
                )
                .map_err(sql_err)?;
                purge_data(conn, &id)?;
                Ok(())
            })
            .await
        };
        if result.is_ok() {
            self.inner.signal.notify(&id, 0);
        }
        result
    }
}
