//! Addresses: creating one, reading it (by id or by email key), its usage, and deleting it (a tombstone; its data is
//! purged at once).

use crate::store::Addresses;
use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};

use crate::domain::email_policy::EmailPolicy;
use crate::domain::verification::VerificationConfig;
use crate::domain::{ids, Limits, Millis};
use crate::purge::purge_data;
use crate::rows::*;
use crate::store::{AddressRecord, NewAddress, StoreError, StoreResult, Usage};
use crate::SqliteStore;

#[async_trait]
impl Addresses for SqliteStore {
    async fn create_address(&self, a: NewAddress) -> StoreResult<()> {
        self.write(move |conn| {
            let n = conn
                .prepare_cached(
                    // Either unique key taken (the id, or the email key of an id differing
                    // only by case) inserts nothing: `AddressExists`.
                    "INSERT INTO addresses (id, name, task_id, email, email_key, created_at, \
                     expires_at, token_hash, inbox_hash, verification, email_policy) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) ON CONFLICT DO NOTHING",
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
                    a.verification.as_ref().map(VerificationConfig::to_stored),
                    a.email_policy.as_ref().map(EmailPolicy::to_stored)
                ])
                .map_err(sql_err)?;
            if n == 0 {
                return Err(StoreError::AddressExists);
            }
            let created_at = a.created_at;
            crate::hooks::insert_hooks(conn, &a.id, a.hooks, 0, created_at).map(|_| ())
        })
        .await
    }

    async fn get_address(&self, id: &str, _now: Millis) -> StoreResult<Option<AddressRecord>> {
        let id = id.to_owned();
        self.read(move |conn| load_address(conn, &id)).await
    }

    /// the email key, tombstones included, like `get_address`. Rows from before migration 2
    /// were backfilled with their key, so every address has one.
    async fn address_by_email(
        &self, email: &str, _now: Millis,
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

    /// live address's row.
    async fn set_verification(
        &self, id: &str, verification: Option<VerificationConfig>, now: Millis,
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

    /// One `UPDATE` of the live address's row; its refusal count stays.
    async fn set_email_policy(
        &self, id: &str, policy: Option<EmailPolicy>, now: Millis,
    ) -> StoreResult<()> {
        let id = id.to_owned();
        let stored = policy.as_ref().map(EmailPolicy::to_stored);
        self.write(move |conn| {
            live_address(conn, &id, now)?;
            conn.prepare_cached("UPDATE addresses SET email_policy = ?2 WHERE id = ?1")
                .map_err(sql_err)?
                .execute(params![id, stored])
                .map_err(sql_err)?;
            Ok(())
        })
        .await
    }

    /// One `UPDATE` adding 1 to the live address's count (writes are serialised).
    async fn count_email_refusal(&self, id: &str, now: Millis) -> StoreResult<()> {
        let id = id.to_owned();
        self.write(move |conn| {
            live_address(conn, &id, now)?;
            conn.prepare_cached(
                "UPDATE addresses SET email_refused = email_refused + 1 WHERE id = ?1",
            )
            .map_err(sql_err)?
            .execute([id])
            .map_err(sql_err)?;
            Ok(())
        })
        .await
    }

    async fn usage(&self, id: &str, _limits: &Limits, now: Millis) -> StoreResult<Usage> {
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

    async fn delete_address(&self, id: &str, now: Millis) -> StoreResult<()> {
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
                conn.tell(&id, 0);
                Ok(())
            })
            .await
        };
        result
    }
}
