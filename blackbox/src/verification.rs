//! Verified webhooks (docs/API.md §15) from outside: deliveries signed as GitHub, Standard
//! Webhooks and Stripe sign them, computed here with HMAC-SHA256 independently of the server's
//! code, against any deployment.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::distributions::Alphanumeric;
use rand::Rng;
use serde_json::{json, Value};
use sha2::Sha256;

use crate::{Address, Client, Resp};

fn mac_of(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut m = match Hmac::<Sha256>::new_from_slice(key) {
        Ok(m) => m,
        Err(e) => panic!("HMAC key: {e}"),
    };
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().to_vec()
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Fresh secrets of each scheme: (standard-webhooks, stripe, github).
pub fn fresh_secrets() -> (String, String, String) {
    let bytes: [u8; 32] = rand::random();
    let alnum = |n: usize| -> String {
        rand::thread_rng()
            .sample_iter(&Alphanumeric)
            .take(n)
            .map(char::from)
            .collect()
    };
    (
        format!("whsec_{}", STANDARD.encode(bytes)),
        format!("whsec_{}", alnum(32)),
        format!("gh-{}", alnum(40)),
    )
}

/// The headers GitHub sends with `body`.
pub fn github_headers(secret: &str, delivery: &str, body: &[u8]) -> Vec<(String, String)> {
    vec![
        (
            "x-hub-signature-256".into(),
            format!("sha256={}", hex::encode(mac_of(secret.as_bytes(), &[body]))),
        ),
        ("x-github-delivery".into(), delivery.into()),
        ("x-github-event".into(), "push".into()),
    ]
}

/// The headers a Standard Webhooks sender sends with `body` at `t`.
pub fn standard_headers(secret: &str, id: &str, t: i64, body: &[u8]) -> Vec<(String, String)> {
    let key = secret
        .strip_prefix("whsec_")
        .and_then(|k| STANDARD.decode(k).ok())
        .unwrap_or_default();
    let ts = t.to_string();
    let sig = mac_of(&key, &[id.as_bytes(), b".", ts.as_bytes(), b".", body]);
    vec![
        ("webhook-id".into(), id.into()),
        ("webhook-timestamp".into(), ts),
        (
            "webhook-signature".into(),
            format!("v1,{}", STANDARD.encode(sig)),
        ),
    ]
}

/// The header Stripe sends with `body` at `t`.
pub fn stripe_headers(secret: &str, t: i64, body: &[u8]) -> Vec<(String, String)> {
    let ts = t.to_string();
    let sig = mac_of(secret.as_bytes(), &[ts.as_bytes(), b".", body]);
    vec![(
        "stripe-signature".into(),
        format!("t={ts},v1={}", hex::encode(sig)),
    )]
}

async fn post(c: &Client, a: &Address, headers: &[(String, String)], body: &[u8]) -> Resp {
    let mut h: Vec<(&str, &str)> = vec![("content-type", "application/json")];
    h.extend(headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    c.send("POST", &a.inbox_url, None, &h, Some(body.to_vec()))
        .await
}

async fn last_event(c: &Client, a: &Address) -> Value {
    c.read_all(a).await.last().cloned().unwrap_or(Value::Null)
}

/// Asserts that no answer showed a secret, in its body or its headers.
fn assert_hidden(r: &Resp, secrets: &[&str], what: &str) {
    for s in secrets {
        assert!(
            !r.text.contains(s),
            "{what}: the answer shows a secret: {}",
            r.text
        );
        for (name, value) in &r.headers {
            assert!(
                !String::from_utf8_lossy(value.as_bytes()).contains(s),
                "{what}: header {name} shows a secret"
            );
        }
    }
}

/// Create with a GitHub secret → a signed delivery is verified, its redelivery (same
/// `X-GitHub-Delivery`, no `Idempotency-Key`) a duplicate, an unsigned one recorded as
/// `missing_signature` → PUT a Standard Webhooks secret with `reject_unverified` → an unsigned
/// delivery is 401 `signature_invalid` and appends nothing, a signed one verifies → PUT a Stripe
/// secret → a delivery signed an hour ago is `timestamp_out_of_tolerance` → DELETE → deliveries
/// carry no verification. No answer ever shows a secret. Returns the secrets used.
pub async fn verified_webhooks(c: &Client) -> Vec<String> {
    let (std_secret, stripe_secret, gh_secret) = fresh_secrets();
    let secrets = [
        std_secret.as_str(),
        stripe_secret.as_str(),
        gh_secret.as_str(),
    ];
    let r = c
        .create(
            &json!({"name": "verified", "verification": {"scheme": "github", "secret": gh_secret}}),
        )
        .await;
    r.expect_status(201, "create with a signing secret");
    assert_hidden(&r, &secrets, "create");
    assert_eq!(
        r.json["address"]["verification"],
        json!({"scheme": "github", "reject_unverified": false}),
        "GitHub signs no timestamp: no tolerance_seconds (docs/API.md §15)"
    );
    let a = Address::from_created(&c.base, &r.json);
    let url = format!("{}/verification", a.root);

    let body = br#"{"type": "push", "data": {"ref": "refs/heads/main"}}"#;
    let headers = github_headers(&gh_secret, "gh-delivery-1", body);
    let r = post(c, &a, &headers, body).await;
    r.expect_status(202, "a signed GitHub delivery");
    let first = r.json["event"].clone();
    let e = last_event(c, &a).await;
    assert_eq!(
        e["verification"],
        json!({"scheme": "github", "verified": true})
    );
    assert_eq!(e["type"], "push");
    let r = post(c, &a, &headers, body).await;
    r.expect_status(200, "GitHub's redelivery");
    assert_eq!(r.json["duplicate"], true);
    assert_eq!(r.json["event"], first);
    let r = post(c, &a, &[], body).await;
    r.expect_status(202, "an unsigned delivery");
    assert_eq!(
        last_event(c, &a).await["verification"],
        json!({"scheme": "github", "verified": false, "reason": "missing_signature"})
    );

    // Rotate to a Standard Webhooks secret that refuses unverified deliveries.
    let r = c
        .json(
            "PUT",
            &url,
            Some(&a.token),
            &json!({"scheme": "standard-webhooks", "secret": std_secret, "reject_unverified": true}),
        )
        .await;
    r.expect_status(200, "PUT verification");
    assert_hidden(&r, &secrets, "PUT");
    assert_eq!(
        r.json,
        json!({"verification": {"scheme": "standard-webhooks", "reject_unverified": true, "tolerance_seconds": 300}})
    );
    let before = c.read_all(&a).await.len();
    let r = post(c, &a, &headers, body).await;
    r.expect_error(
        401,
        "signature_invalid",
        "GitHub's signature after the rotation",
    );
    assert_eq!(r.json["error"]["reason"], "missing_signature");
    let t = unix_now();
    let signed = standard_headers(&std_secret, "msg_bb_1", t, body);
    let r = post(c, &a, &signed, b"{\"type\": \"forged\"}").await;
    r.expect_error(401, "signature_invalid", "a signature over another body");
    assert_eq!(r.json["error"]["reason"], "bad_signature");
    assert_eq!(
        c.read_all(&a).await.len(),
        before,
        "refusals append nothing"
    );
    let r = post(c, &a, &signed, body).await;
    r.expect_status(202, "a signed Standard Webhooks delivery");
    assert_eq!(
        last_event(c, &a).await["verification"],
        json!({"scheme": "standard-webhooks", "verified": true})
    );

    // Stripe: a delivery signed an hour ago is outside the tolerance.
    c.json(
        "PUT",
        &url,
        Some(&a.token),
        &json!({"scheme": "stripe", "secret": stripe_secret, "tolerance_seconds": 60}),
    )
    .await
    .expect_status(200, "PUT a Stripe secret");
    let stripe_body = br#"{"id": "evt_bb_1", "object": "event", "type": "invoice.paid"}"#;
    let r = post(
        c,
        &a,
        &stripe_headers(&stripe_secret, t - 3600, stripe_body),
        stripe_body,
    )
    .await;
    r.expect_status(202, "a late Stripe delivery");
    assert_eq!(
        last_event(c, &a).await["verification"],
        json!({"scheme": "stripe", "verified": false, "reason": "timestamp_out_of_tolerance"})
    );
    let r = post(
        c,
        &a,
        &stripe_headers(&stripe_secret, t, stripe_body),
        stripe_body,
    )
    .await;
    r.expect_status(202, "a Stripe delivery");
    assert_eq!(last_event(c, &a).await["verification"]["verified"], true);

    // Bad configurations are refused without repeating the secret.
    let r = c
        .json(
            "PUT",
            &url,
            Some(&a.token),
            &json!({"scheme": "stripe", "secret": gh_secret}),
        )
        .await;
    r.expect_error(400, "invalid_request", "a GitHub secret as Stripe's");
    assert_hidden(&r, &secrets, "a refused PUT");

    let inspected = c.get(&a.root, Some(&a.token)).await;
    inspected.expect_status(200, "inspect");
    assert_hidden(&inspected, &secrets, "inspect");
    assert_eq!(
        inspected.json["address"]["verification"]["scheme"],
        "stripe"
    );
    let events = c.events(&a, "after=0").await;
    assert_hidden(&events, &secrets, "the feed");

    c.send("DELETE", &url, Some(&a.token), &[], None)
        .await
        .expect_status(204, "DELETE verification");
    let inspected = c.get(&a.root, Some(&a.token)).await;
    assert!(inspected.json["address"].get("verification").is_none());
    let r = post(c, &a, &[], body).await;
    r.expect_status(202, "a delivery after DELETE");
    assert!(last_event(c, &a).await.get("verification").is_none());
    c.send("DELETE", &a.root, Some(&a.token), &[], None)
        .await
        .expect_status(204, "delete the address");
    vec![std_secret, stripe_secret, gh_secret]
}
