//! The inbox viewer's one-time sign-in links (docs/API.md §13, "Sign-in links"):
//! `POST {root}/viewer-codes` (bearer) and `POST /api/v1/viewer-codes/redeem` (no auth).

use http::StatusCode;
use serde_json::{json, Value};

use crate::common::{delete, fresh_ip, get, post, Addr, Resp, TestApp};

const REDEEM: &str = "/api/v1/viewer-codes/redeem";
const USED_OR_EXPIRED: &str =
    "This sign-in link was already used or has expired; run the command again.";

fn codes(a: &Addr) -> String {
    format!("{}/viewer-codes", a.root)
}

/// `POST {root}/viewer-codes` with the address's token: the 201 body.
async fn new_code(t: &TestApp, a: &Addr) -> Value {
    let r = t
        .send(
            post(codes(a))
                .bearer(&a.token)
                .header("host", "viewer.test"),
        )
        .await;
    assert_eq!(r.header("cache-control"), Some("no-store"), "{}", r.text);
    r.ok(StatusCode::CREATED).clone()
}

fn code_of(created: &Value) -> String {
    created["code"].as_str().expect("code").to_owned()
}

async fn redeem(t: &TestApp, code: &str) -> Resp {
    t.send(post(REDEEM).ip(&fresh_ip()).json(&json!({ "code": code })))
        .await
}

/// The one answer for an unknown, used or expired code.
#[track_caller]
fn refused(r: &Resp) -> String {
    let e = r.err(StatusCode::GONE, "code_expired");
    assert_eq!(e["message"], USED_OR_EXPIRED, "{}", r.text);
    r.text.clone()
}

#[tokio::test]
async fn a_code_signs_the_viewer_in_once() {
    let t = TestApp::new();
    let a = t.create().await;
    let created = new_code(&t, &a).await;
    let code = code_of(&created);
    assert!(
        code.starts_with("avc_") && code.len() >= 4 + 22,
        "{created}"
    );
    assert_eq!(
        created["viewer_url"],
        format!("http://viewer.test/inbox#code={code}"),
        "the code is in the fragment only"
    );
    assert_eq!(
        created["expires_at"],
        agentaddress_core::domain::time::format_rfc3339(t.now() + 300_000)
    );
    assert!(!created.to_string().contains(&a.token), "{created}");
    assert_ne!(
        code_of(&new_code(&t, &a).await),
        code,
        "a new code each time"
    );

    let r = redeem(&t, &code).await;
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let signed_in = r.ok(StatusCode::OK).clone();
    assert_eq!(
        signed_in,
        json!({"address_id": a.id, "read_token": a.token})
    );
    // The token it gave back works.
    let token = signed_in["read_token"].as_str().expect("token");
    t.send(get(a.events()).bearer(token))
        .await
        .ok(StatusCode::OK);

    // Once only: the second redeem is refused, as an unknown code is.
    let second = refused(&redeem(&t, &code).await);
    let unknown = refused(&redeem(&t, &format!("avc_{}", "A".repeat(43))).await);
    assert_eq!(second, unknown, "used and unknown read the same");
}

#[tokio::test]
async fn an_expired_code_is_refused() {
    let t = TestApp::new();
    let a = t.create().await;
    let late = code_of(&new_code(&t, &a).await);
    t.advance(299);
    let just = code_of(&new_code(&t, &a).await);
    t.advance(1);
    let expired = refused(&redeem(&t, &late).await);
    // The later one is still good, and then used.
    redeem(&t, &just).await.ok(StatusCode::OK);
    let used = refused(&redeem(&t, &just).await);
    assert_eq!(expired, used, "expired and used read the same");
    t.advance(3600);
    refused(&redeem(&t, &late).await);
}

#[tokio::test]
async fn making_a_code_takes_the_addresss_token() {
    let t = TestApp::new();
    let a = t.create().await;
    let b = t.create().await;
    for r in [
        post(codes(&a)),
        post(codes(&a)).bearer(&b.token),
        post(codes(&a)).bearer(&format!("aat_{}", "x".repeat(43))),
        post("/api/v1/addresses/addr_unknownunknownunknow/viewer-codes").bearer(&a.token),
    ] {
        t.send(r)
            .await
            .err(StatusCode::UNAUTHORIZED, "unauthorized");
    }
    // A gone address makes none, and its codes made before sign no one in.
    let code = code_of(&new_code(&t, &a).await);
    t.send(delete(&a.root).bearer(&a.token)).await;
    t.send(post(codes(&a)).bearer(&a.token))
        .await
        .err(StatusCode::GONE, "address_gone");
    refused(&redeem(&t, &code).await);
}

#[tokio::test]
async fn a_code_of_an_address_that_expired_since_is_refused() {
    let t = TestApp::new();
    let (_, a) = t.create_with(&json!({"expires_in_seconds": 120})).await;
    let code = code_of(&new_code(&t, &a).await);
    t.advance(120);
    refused(&redeem(&t, &code).await);
}

#[tokio::test]
async fn bad_redeem_bodies() {
    let t = TestApp::new();
    let a = t.create().await;
    // Anything that is no code of ours reads like an unknown code.
    for code in ["", "avc_", "aat_x", &a.token, &"avc_x".repeat(100)] {
        refused(&redeem(&t, code).await);
    }
    // A body that is not `{"code": "…"}` is the usual 400 / 413 / 415.
    for body in [r#"{}"#, r#"{"code": 5}"#, r#"["avc_x"]"#, "not json", ""] {
        t.send(
            post(REDEEM)
                .ip(&fresh_ip())
                .content_type("application/json")
                .raw(body),
        )
        .await
        .err(StatusCode::BAD_REQUEST, "invalid_request");
    }
    t.send(
        post(REDEEM)
            .ip(&fresh_ip())
            .content_type("text/plain")
            .raw(r#"{"code": "avc_x"}"#),
    )
    .await
    .err(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type");
    let big = json!({ "code": "a".repeat(2000) });
    t.send(post(REDEEM).ip(&fresh_ip()).json(&big))
        .await
        .err(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    // A bearer token changes nothing: redeem takes none.
    let code = code_of(&new_code(&t, &a).await);
    let r = t
        .send(
            post(REDEEM)
                .ip(&fresh_ip())
                .bearer("aat_wrong")
                .json(&json!({ "code": code })),
        )
        .await;
    r.ok(StatusCode::OK);
}

#[tokio::test]
async fn redeems_are_rate_limited_per_client() {
    let t = TestApp::new();
    let a = t.create().await;
    let code = code_of(&new_code(&t, &a).await);
    let ip = fresh_ip();
    let guess = json!({ "code": format!("avc_{}", "B".repeat(43)) });
    for _ in 0..20 {
        refused(&t.send(post(REDEEM).ip(&ip).json(&guess)).await);
    }
    // The 21st attempt of the minute is refused before the code is looked at, right or not.
    t.send(post(REDEEM).ip(&ip).json(&json!({ "code": code })))
        .await
        .assert_rate_limited();
    // Another client is not held back, and the code was not used up by the refusal.
    redeem(&t, &code).await.ok(StatusCode::OK);
    t.advance(60);
    refused(&t.send(post(REDEEM).ip(&ip).json(&guess)).await);
}

#[tokio::test]
async fn codes_are_rate_limited_per_address() {
    let t = TestApp::new();
    let a = t.create().await;
    for _ in 0..10 {
        new_code(&t, &a).await;
    }
    t.send(post(codes(&a)).bearer(&a.token))
        .await
        .assert_rate_limited();
    let b = t.create().await;
    new_code(&t, &b).await;
}
