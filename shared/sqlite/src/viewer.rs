//! The inbox viewer's sign-in codes (docs/API.md §13, "Sign-in links"): one row per code,
//! keyed by the code's hash, holding the read token sealed under a key only the code gives.
//! A redeem deletes the row it answers (in the writer's one transaction, so of concurrent
//! redeems one finds it); the sweep removes codes past their expiry, and deleting or purging
//! the address removes its codes.

use crate::store::ViewerCodes;
use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};

use crate::domain::Millis;
use crate::rows::{live_address, sql_err};
use crate::store::{NewViewerCode, RedeemedViewerCode, StoreError, StoreResult};
use crate::SqliteStore;

#[async_trait]
impl ViewerCodes for SqliteStore {
    async fn create_viewer_code(
        &self, id: &str, code: NewViewerCode, now: Millis,
    ) -> StoreResult<()> {
        let id = id.to_owned();
        self.write(move |conn| {
            live_address(conn, &id, now)?;
            let inserted = conn
                .prepare_cached(
                    "INSERT INTO viewer_codes (code_hash, address_id, sealed, created_at, \
                     expires_at) VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (code_hash) DO NOTHING",
                )
                .map_err(sql_err)?
                .execute(params![
                    code.code_hash,
                    id,
                    code.sealed_token,
                    code.created_at,
                    code.expires_at
                ])
                .map_err(sql_err)?;
            if inserted == 0 {
                // 256 random bits never collide; a second insert of one code is a bug.
                return Err(StoreError::Internal(
                    "a viewer code was stored twice".into(),
                ));
            }
            Ok(())
        })
        .await
    }

    async fn redeem_viewer_code(
        &self, code_hash: &str, now: Millis,
    ) -> StoreResult<Option<RedeemedViewerCode>> {
        let code_hash = code_hash.to_owned();
        self.write(move |conn| {
            conn.prepare_cached(
                "DELETE FROM viewer_codes WHERE code_hash = ?1 AND expires_at > ?2 \
                 RETURNING address_id, sealed, expires_at",
            )
            .map_err(sql_err)?
            .query_row(params![code_hash, now], |r| {
                Ok(RedeemedViewerCode {
                    address_id: r.get(0)?,
                    sealed_token: r.get(1)?,
                    expires_at: r.get(2)?,
                })
            })
            .optional()
            .map_err(sql_err)
        })
        .await
    }
}
