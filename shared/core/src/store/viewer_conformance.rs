//! The Store conformance cases of the inbox viewer's sign-in codes (docs/API.md §13, "Sign-in
//! links"): a code is stored for a live address only, answered once while unexpired, and of
//! concurrent redeems exactly one gets it. A backend runs them with
//! [`crate::store_viewer_conformance_tests!`].

use super::conformance::{new_address, T0};
use super::{NewViewerCode, RedeemedViewerCode, Store, StoreError};
use crate::domain::viewer::{code_hash, new_viewer_code, seal_token, VIEWER_CODE_VALID_MS};
use crate::domain::{ids, Millis};

/// Generates one `#[tokio::test]` per viewer-code case, as [`crate::store_conformance_tests!`]
/// does.
#[macro_export]
macro_rules! store_viewer_conformance_tests {
    ($make:expr) => {
        $crate::__viewer_conformance_cases!($make;
            a_viewer_code_is_redeemed_once, an_expired_viewer_code_is_refused,
            viewer_codes_need_a_live_address, concurrent_redeems_have_one_winner
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __viewer_conformance_cases {
    ($make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let store: ::std::sync::Arc<dyn $crate::store::Store> = $make;
                $crate::store::viewer_conformance::$case(store.as_ref()).await;
            }
        )*
    };
}

/// A new code of `address_id` made at `now`: (the code, what the store is given).
fn code_for(address_id: &str, now: Millis) -> (String, NewViewerCode) {
    let code = new_viewer_code();
    let sealed_token = seal_token(&code, address_id, "aat_conformance").expect("seal");
    let new = NewViewerCode {
        code_hash: code_hash(&code),
        sealed_token,
        created_at: now,
        expires_at: now + VIEWER_CODE_VALID_MS,
    };
    (code, new)
}

pub async fn a_viewer_code_is_redeemed_once(store: &dyn Store) {
    let a = new_address(store, None).await;
    let (code, new) = code_for(&a.id, T0);
    store
        .create_viewer_code(&a.id, new.clone(), T0)
        .await
        .expect("create a viewer code");
    // Unknown codes (another's hash, the code itself unhashed) are nothing.
    assert_eq!(
        store
            .redeem_viewer_code(&code_hash(&new_viewer_code()), T0)
            .await,
        Ok(None)
    );
    assert_eq!(store.redeem_viewer_code(&code, T0).await, Ok(None));
    let got = store
        .redeem_viewer_code(&new.code_hash, T0 + 1_000)
        .await
        .expect("redeem");
    assert_eq!(
        got,
        Some(RedeemedViewerCode {
            address_id: a.id.clone(),
            sealed_token: new.sealed_token.clone(),
            expires_at: new.expires_at,
        })
    );
    // Only its code opens what was kept.
    let opened = crate::domain::viewer::open_token(&code, &a.id, &new.sealed_token);
    assert_eq!(opened.as_deref(), Ok("aat_conformance"));
    // A second redeem, at once or later, is refused.
    for at in [T0 + 1_000, T0 + 2_000, new.expires_at - 1] {
        assert_eq!(
            store.redeem_viewer_code(&new.code_hash, at).await,
            Ok(None),
            "redeemed again at {at}"
        );
    }
    // Two codes of one address are independent.
    let (_, one) = code_for(&a.id, T0);
    let (_, two) = code_for(&a.id, T0);
    for c in [&one, &two] {
        store
            .create_viewer_code(&a.id, c.clone(), T0)
            .await
            .expect("create");
    }
    let got = store.redeem_viewer_code(&two.code_hash, T0).await;
    assert_eq!(
        got.map(|r| r.map(|r| r.sealed_token)),
        Ok(Some(two.sealed_token))
    );
    let got = store.redeem_viewer_code(&one.code_hash, T0).await;
    assert_eq!(
        got.map(|r| r.map(|r| r.sealed_token)),
        Ok(Some(one.sealed_token))
    );
}

pub async fn an_expired_viewer_code_is_refused(store: &dyn Store) {
    let a = new_address(store, None).await;
    let (_, late) = code_for(&a.id, T0);
    store
        .create_viewer_code(&a.id, late.clone(), T0)
        .await
        .expect("create");
    // From the millisecond it expires.
    assert_eq!(
        store
            .redeem_viewer_code(&late.code_hash, late.expires_at)
            .await,
        Ok(None)
    );
    assert_eq!(
        store
            .redeem_viewer_code(&late.code_hash, late.expires_at + 86_400_000)
            .await,
        Ok(None)
    );
    // The last millisecond before still counts, once.
    let (_, just) = code_for(&a.id, T0);
    store
        .create_viewer_code(&a.id, just.clone(), T0)
        .await
        .expect("create");
    let got = store
        .redeem_viewer_code(&just.code_hash, just.expires_at - 1)
        .await
        .expect("redeem");
    assert_eq!(got.map(|r| r.address_id), Some(a.id.clone()));
    assert_eq!(
        store
            .redeem_viewer_code(&just.code_hash, just.expires_at - 1)
            .await,
        Ok(None)
    );
}

pub async fn viewer_codes_need_a_live_address(store: &dyn Store) {
    let (_, unknown) = code_for("addr_none", T0);
    assert_eq!(
        store
            .create_viewer_code(&ids::new_address_id(), unknown, T0)
            .await,
        Err(StoreError::AddressNotFound)
    );
    let deleted = new_address(store, None).await;
    store.delete_address(&deleted.id, T0).await.expect("delete");
    let (_, c) = code_for(&deleted.id, T0);
    assert_eq!(
        store.create_viewer_code(&deleted.id, c.clone(), T0).await,
        Err(StoreError::AddressGone)
    );
    assert_eq!(store.redeem_viewer_code(&c.code_hash, T0).await, Ok(None));
    let expiring = new_address(store, Some(T0 + 60_000)).await;
    let (_, c) = code_for(&expiring.id, T0 + 60_000);
    assert_eq!(
        store
            .create_viewer_code(&expiring.id, c.clone(), T0 + 60_000)
            .await,
        Err(StoreError::AddressGone)
    );
    assert_eq!(store.redeem_viewer_code(&c.code_hash, T0).await, Ok(None));
}

pub async fn concurrent_redeems_have_one_winner(store: &dyn Store) {
    let a = new_address(store, None).await;
    for _ in 0..3 {
        let (_, c) = code_for(&a.id, T0);
        store
            .create_viewer_code(&a.id, c.clone(), T0)
            .await
            .expect("create");
        let redeems = (0..12).map(|_| store.redeem_viewer_code(&c.code_hash, T0 + 10));
        let results = futures::future::join_all(redeems).await;
        let mut winners = 0;
        for r in results {
            if let Some(got) = r.expect("redeem") {
                winners += 1;
                assert_eq!(got.sealed_token, c.sealed_token);
            }
        }
        assert_eq!(winners, 1, "exactly one redeem gets the code");
        assert_eq!(
            store.redeem_viewer_code(&c.code_hash, T0 + 20).await,
            Ok(None)
        );
    }
}
