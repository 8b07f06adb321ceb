//! The wake-up socket (docs/API.md §17): its wire format is the domain's
//! ([`crate::domain::socket`], re-exported here); this adds the read-token check of a
//! subscribe, which reads the store. `serve` holds the sockets itself (`/api/v1/ws`); on AWS,
//! API Gateway holds them and the `ws` function answers their frames.

pub use crate::domain::socket::*;

use crate::domain::{ids, Millis};
use crate::store::{AddressRecord, StoreError};
use crate::AppState;
use serde_json::Value;

/// Why a subscribe is not taken: the frame to answer.
pub type Refusal = Value;

/// Checks a subscribe's read token: the address, live, or the frame to answer (`unauthorized`
/// for a wrong token and an unknown address alike, `gone` for a deleted or expired address
/// with the right token, `unavailable` when the store cannot answer).
pub async fn authorize(
    state: &AppState, address_id: &str, read_token: &str, now: Millis,
) -> Result<AddressRecord, Refusal> {
    if !ids::is_valid_id(address_id) {
        return Err(unauthorized());
    }
    // Every refusal of a token looks the same: nothing about the address is revealed.
    let record = match state.store.get_address(address_id, now).await {
        Ok(Some(a)) if ids::verify_secret(read_token, &a.token_hash) => a,
        Ok(Some(_)) => return Err(unauthorized()),
        Ok(None) | Err(StoreError::AddressNotFound) => {
            ids::verify_secret(read_token, crate::extract::DUMMY_HASH);
            return Err(unauthorized());
        }
        Err(e) => {
            tracing::warn!(error = %e, "a socket could not read an address");
            return Err(unavailable());
        }
    };
    if record.is_gone(now) {
        return Err(gone(address_id));
    }
    Ok(record)
}
