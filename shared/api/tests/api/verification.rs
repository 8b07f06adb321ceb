//! §15 of docs/API.md, verified webhooks: an address's signing secret (at creation, `PUT`,
//! `DELETE {root}/verification`), each delivery's `verification` record, `reject_unverified`
//! (401 `signature_invalid`, nothing appended), the timestamp tolerance, rotation, and the
//! provider's delivery id as the implicit idempotency key.

use agentaddress_core::domain::verification::{sign, VerificationConfig};
use http::StatusCode;
use serde_json::{json, Value};

use crate::common::{delete, post, put, Addr, Req, TestApp};

const STD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const STD_SECRET_2: &str = "whsec_dGhlIG90aGVyIHNlY3JldCBvZiAzMiBieXRlcyEh";
const STRIPE_SECRET: &str = "whsec_test_secret";
const GH_SECRET: &str = "It's a Secret to Everybody";

fn config(scheme: &str, secret: &str) -> VerificationConfig {
    VerificationConfig::new(scheme, secret, None, None).expect("valid config")
}

async fn create_verified(t: &TestApp, verification: Value) -> (Value, Addr) {
    t.create_with(&json!({"name": "hooks", "verification": verification}))
        .await
}

/// A delivery of `body` signed for `scheme`/`secret` at the app's clock, with delivery id `id`.
fn signed(t: &TestApp, a: &Addr, scheme: &str, secret: &str, id: &str, body: &[u8]) -> Req {
    let mut r = post(&a.inbox)
        .content_type("application/json")
        .raw(body.to_vec());
    for (k, v) in sign(&config(scheme, secret), id, t.now() / 1000, body) {
        r = r.header(k, v);
    }
    r
}

async fn last_event(t: &TestApp, a: &Addr) -> Value {
    let page = t.events(a, "").await;
    let events = page["events"].as_array().expect("events").clone();
    events.last().cloned().unwrap_or(Value::Null)
}

async fn count(t: &TestApp, a: &Addr) -> usize {
    t.events(a, "").await["events"]
        .as_array()
        .map_or(0, Vec::len)
}

#[tokio::test]
async fn created_with_a_secret_it_is_shown_without_the_secret() {
    let t = TestApp::new();
    let (created, a) = create_verified(
        &t,
        json!({"scheme": "standard-webhooks", "secret": STD_SECRET, "reject_unverified": true, "tolerance_seconds": 120}),
    )
    .await;
    let expected =
        json!({"scheme": "standard-webhooks", "reject_unverified": true, "tolerance_seconds": 120});
    assert_eq!(created["address"]["verification"], expected);
    let shown = t.inspect(&a).await;
    assert_eq!(shown["address"]["verification"], expected);
    assert!(!created
        .to_string()
        .contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"));
    assert!(!shown
        .to_string()
        .contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"));
    // Defaults, and none for an address without one. GitHub signs no timestamp: no
    // tolerance_seconds in its view (docs/API.md §15), even when one was given.
    let (created, gh) = create_verified(&t, json!({"scheme": "github", "secret": GH_SECRET})).await;
    let expected = json!({"scheme": "github", "reject_unverified": false});
    assert_eq!(created["address"]["verification"], expected);
    assert_eq!(t.inspect(&gh).await["address"]["verification"], expected);
    let (created, _) = create_verified(
        &t,
        json!({"scheme": "github", "secret": GH_SECRET, "tolerance_seconds": 60}),
    )
    .await;
    assert_eq!(created["address"]["verification"], expected);
    let plain = t.create().await;
    assert!(t.inspect(&plain).await["address"]
        .get("verification")
        .is_none());
}

#[tokio::test]
async fn bad_configurations_are_400_without_echoing_the_secret() {
    let t = TestApp::new();
    let a = t.create().await;
    let bad = [
        json!("github"),
        json!({"secret": GH_SECRET}),
        json!({"scheme": "github"}),
        json!({"scheme": "svix", "secret": GH_SECRET}),
        json!({"scheme": "github", "secret": ""}),
        json!({"scheme": "github", "secret": 5}),
        json!({"scheme": "standard-webhooks", "secret": "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}),
        json!({"scheme": "standard-webhooks", "secret": "whsec_%%%notbase64%%%"}),
        json!({"scheme": "standard-webhooks", "secret": "whsec_c2hvcnQ="}),
        json!({"scheme": "stripe", "secret": "sk_live_supersecretvalue"}),
        json!({"scheme": "stripe", "secret": "whsec_has spaces inside"}),
        json!({"scheme": "github", "secret": GH_SECRET, "tolerance_seconds": 0}),
        json!({"scheme": "github", "secret": GH_SECRET, "tolerance_seconds": 3601}),
        json!({"scheme": "github", "secret": GH_SECRET, "tolerance_seconds": "60"}),
        json!({"scheme": "github", "secret": GH_SECRET, "reject_unverified": "yes"}),
    ];
    for v in bad {
        let r = t
            .send(
                post(crate::common::CREATE)
                    .ip(&crate::common::fresh_ip())
                    .json(&json!({"verification": v})),
            )
            .await;
        let e = r.err(StatusCode::BAD_REQUEST, "invalid_request").clone();
        let message = e["message"].as_str().unwrap_or("");
        if let Some(secret) = v.get("secret").and_then(Value::as_str) {
            if !secret.is_empty() {
                assert!(!r.text.contains(secret), "{secret} echoed: {message}");
            }
        }
        assert!(message.contains("verification"), "{message}");
        let r = t
            .send(
                put(format!("{}/verification", a.root))
                    .bearer(&a.token)
                    .json(&v),
            )
            .await;
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
        if let Some(secret) = v.get("secret").and_then(Value::as_str) {
            if !secret.is_empty() {
                assert!(!r.text.contains(secret), "{secret} echoed by PUT");
            }
        }
    }
    // Nothing was set by the refused PUTs.
    assert!(t.inspect(&a).await["address"].get("verification").is_none());
}

#[tokio::test]
async fn each_scheme_records_verified_deliveries_and_the_reason_of_others() {
    let t = TestApp::new();
    for (scheme, secret) in [
        ("standard-webhooks", STD_SECRET),
        ("stripe", STRIPE_SECRET),
        ("github", GH_SECRET),
    ] {
        let (_, a) = create_verified(&t, json!({"scheme": scheme, "secret": secret})).await;
        let body = br#"{"id": "evt_1", "type": "thing.happened", "data": {"n": 1}}"#;
        let r = t.send(signed(&t, &a, scheme, secret, "msg_1", body)).await;
        r.ok(StatusCode::ACCEPTED);
        let e = last_event(&t, &a).await;
        assert_eq!(
            e["verification"],
            json!({"scheme": scheme, "verified": true}),
            "{scheme}"
        );
        assert!(e["http"].get("verification").is_none());
        assert_eq!(e["http"]["content_type"], "application/json");

        // No signature at all.
        let r = t.send(post(&a.inbox).json(&json!({"n": 2}))).await;
        r.ok(StatusCode::ACCEPTED);
        assert_eq!(
            last_event(&t, &a).await["verification"],
            json!({"scheme": scheme, "verified": false, "reason": "missing_signature"})
        );

        // Signed over another body.
        let mut r = post(&a.inbox)
            .content_type("application/json")
            .raw(br#"{"n": 3}"#.to_vec());
        for (k, v) in sign(
            &config(scheme, secret),
            "msg_3",
            t.now() / 1000,
            br#"{"n": 4}"#,
        ) {
            r = r.header(k, v);
        }
        t.send(r).await.ok(StatusCode::ACCEPTED);
        assert_eq!(
            last_event(&t, &a).await["verification"],
            json!({"scheme": scheme, "verified": false, "reason": "bad_signature"})
        );
        assert_eq!(count(&t, &a).await, 3);
    }
}

#[tokio::test]
async fn github_docs_vector_verifies_through_the_inbox() {
    let t = TestApp::new();
    let (_, a) = create_verified(&t, json!({"scheme": "github", "secret": GH_SECRET})).await;
    let r = post(&a.inbox)
        .content_type("text/plain")
        .header(
            "X-Hub-Signature-256",
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        )
        .raw(b"Hello, World!".to_vec());
    t.send(r).await.ok(StatusCode::ACCEPTED);
    let e = last_event(&t, &a).await;
    assert_eq!(e["verification"]["verified"], true);
    assert_eq!(e["data"]["text"], "Hello, World!");
}

#[tokio::test]
async fn malformed_repeated_oversized_and_wrongly_encoded_signatures_do_not_verify() {
    let t = TestApp::new();
    let (_, a) = create_verified(&t, json!({"scheme": "github", "secret": GH_SECRET})).await;
    let good = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    let body = b"Hello, World!".to_vec();
    let cases: Vec<Vec<(&str, Vec<u8>)>> = vec![
        // Twice.
        vec![
            ("x-hub-signature-256", good.as_bytes().to_vec()),
            ("x-hub-signature-256", good.as_bytes().to_vec()),
        ],
        // Not hex, another algorithm, empty, base64 instead of hex.
        vec![("x-hub-signature-256", b"sha256=not-hex".to_vec())],
        vec![(
            "x-hub-signature-256",
            b"sha1=757107ea0eb2509fc211221cce984b8a37570b6d".to_vec(),
        )],
        vec![("x-hub-signature-256", b"sha256=".to_vec())],
        vec![(
            "x-hub-signature-256",
            b"sha256=dXEHrq6yUJ/CEiIczphLijdXC2t1hsIsRvQ3nLCLPhc=".to_vec(),
        )],
        // Oversized, and not ASCII.
        vec![(
            "x-hub-signature-256",
            format!("sha256={}", "ab".repeat(4000)).into_bytes(),
        )],
        vec![("x-hub-signature-256", vec![b's', b'h', 0xe9, 0xff])],
    ];
    for headers in cases {
        let mut r = post(&a.inbox).content_type("text/plain").raw(body.clone());
        for (k, v) in &headers {
            r = r.header(k, v);
        }
        t.send(r).await.ok(StatusCode::ACCEPTED);
        assert_eq!(
            last_event(&t, &a).await["verification"],
            json!({"scheme": "github", "verified": false, "reason": "bad_signature"}),
            "{headers:?}"
        );
    }
    // A Standard Webhooks delivery missing one of its three headers.
    let (_, s) = create_verified(
        &t,
        json!({"scheme": "standard-webhooks", "secret": STD_SECRET}),
    )
    .await;
    let mut r = post(&s.inbox).json(&json!({"n": 1}));
    for (k, v) in sign(
        &config("standard-webhooks", STD_SECRET),
        "m1",
        t.now() / 1000,
        b"{\"n\":1}",
    ) {
        if k != "webhook-timestamp" {
            r = r.header(k, v);
        }
    }
    t.send(r).await.ok(StatusCode::ACCEPTED);
    assert_eq!(
        last_event(&t, &s).await["verification"]["reason"],
        "missing_signature"
    );
}

#[tokio::test]
async fn reject_unverified_is_401_and_appends_nothing() {
    let t = TestApp::new();
    let (_, a) = create_verified(
        &t,
        json!({"scheme": "stripe", "secret": STRIPE_SECRET, "reject_unverified": true}),
    )
    .await;
    let body = br#"{"id": "evt_9", "object": "event"}"#;
    let r = t.send(post(&a.inbox).raw(body.to_vec())).await;
    let e = r.err(StatusCode::UNAUTHORIZED, "signature_invalid");
    assert_eq!(e["reason"], "missing_signature");
    let r = t
        .send(
            post(&a.inbox)
                .header(
                    "stripe-signature",
                    format!("t={},v1={}", t.now() / 1000, "00".repeat(32)),
                )
                .raw(body.to_vec()),
        )
        .await;
    assert_eq!(
        r.err(StatusCode::UNAUTHORIZED, "signature_invalid")["reason"],
        "bad_signature"
    );
    assert_eq!(count(&t, &a).await, 0);
    assert_eq!(t.inspect(&a).await["usage"]["last_sequence"], 0);
    // A signed one is accepted.
    t.send(signed(&t, &a, "stripe", STRIPE_SECRET, "", body))
        .await
        .ok(StatusCode::ACCEPTED);
    assert_eq!(count(&t, &a).await, 1);
}

#[tokio::test]
async fn a_timestamp_outside_the_tolerance_is_refused() {
    let t = TestApp::new();
    let (_, a) = create_verified(
        &t,
        json!({"scheme": "standard-webhooks", "secret": STD_SECRET, "reject_unverified": true, "tolerance_seconds": 60}),
    )
    .await;
    let body = br#"{"type": "late"}"#;
    // Signed now, delivered 61 s later: refused.
    let late = signed(&t, &a, "standard-webhooks", STD_SECRET, "msg_late", body);
    t.advance(61);
    let r = t.send(late).await;
    assert_eq!(
        r.err(StatusCode::UNAUTHORIZED, "signature_invalid")["reason"],
        "timestamp_out_of_tolerance"
    );
    assert_eq!(count(&t, &a).await, 0);
    // One signed 60 s in the future is within the tolerance too.
    let mut r = post(&a.inbox).raw(body.to_vec());
    for (k, v) in sign(
        &config("standard-webhooks", STD_SECRET),
        "msg_future",
        t.now() / 1000 + 60,
        body,
    ) {
        r = r.header(k, v);
    }
    t.send(r).await.ok(StatusCode::ACCEPTED);
    // Without reject_unverified the late one is recorded with its reason.
    let (_, b) = create_verified(
        &t,
        json!({"scheme": "standard-webhooks", "secret": STD_SECRET, "tolerance_seconds": 60}),
    )
    .await;
    let late = signed(&t, &b, "standard-webhooks", STD_SECRET, "m", body);
    t.advance(120);
    t.send(late).await.ok(StatusCode::ACCEPTED);
    assert_eq!(
        last_event(&t, &b).await["verification"]["reason"],
        "timestamp_out_of_tolerance"
    );
}

#[tokio::test]
async fn put_rotates_at_once_and_delete_removes() {
    let t = TestApp::new();
    let a = t.create().await;
    let url = format!("{}/verification", a.root);
    let r = t
        .send(put(&url).bearer(&a.token).json(
            &json!({"scheme": "standard-webhooks", "secret": STD_SECRET, "reject_unverified": true}),
        ))
        .await;
    let body = r.ok(StatusCode::OK).clone();
    assert_eq!(
        body,
        json!({"verification": {"scheme": "standard-webhooks", "reject_unverified": true, "tolerance_seconds": 300}})
    );
    assert!(!r.text.contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"));
    let payload = br#"{"type": "rotated"}"#;
    t.send(signed(
        &t,
        &a,
        "standard-webhooks",
        STD_SECRET,
        "m1",
        payload,
    ))
    .await
    .ok(StatusCode::ACCEPTED);
    // Rotate: the old secret's signature fails at once, the new one's verifies.
    t.send(put(&url).bearer(&a.token).json(
        &json!({"scheme": "standard-webhooks", "secret": STD_SECRET_2, "reject_unverified": true}),
    ))
    .await
    .ok(StatusCode::OK);
    let r = t
        .send(signed(
            &t,
            &a,
            "standard-webhooks",
            STD_SECRET,
            "m2",
            payload,
        ))
        .await;
    assert_eq!(
        r.err(StatusCode::UNAUTHORIZED, "signature_invalid")["reason"],
        "bad_signature"
    );
    t.send(signed(
        &t,
        &a,
        "standard-webhooks",
        STD_SECRET_2,
        "m3",
        payload,
    ))
    .await
    .ok(StatusCode::ACCEPTED);
    assert_eq!(count(&t, &a).await, 2);

    // DELETE: 204 (again too), deliveries are no longer verified or refused.
    for _ in 0..2 {
        let r = t.send(delete(&url).bearer(&a.token)).await;
        assert_eq!(r.status, StatusCode::NO_CONTENT);
    }
    assert!(t.inspect(&a).await["address"].get("verification").is_none());
    t.send(post(&a.inbox).json(&json!({"plain": true})))
        .await
        .ok(StatusCode::ACCEPTED);
    assert!(last_event(&t, &a).await.get("verification").is_none());

    // Authentication first; a deleted address is gone.
    let r = t
        .send(put(&url).json(&json!({"scheme": "github", "secret": "s"})))
        .await;
    r.err(StatusCode::UNAUTHORIZED, "unauthorized");
    t.send(delete(&url))
        .await
        .err(StatusCode::UNAUTHORIZED, "unauthorized");
    t.send(delete(&a.root).bearer(&a.token)).await;
    t.send(
        put(&url)
            .bearer(&a.token)
            .json(&json!({"scheme": "github", "secret": "s"})),
    )
    .await
    .err(StatusCode::GONE, "address_gone");
    t.send(delete(&url).bearer(&a.token))
        .await
        .err(StatusCode::GONE, "address_gone");
}

#[tokio::test]
async fn put_takes_json_only() {
    let t = TestApp::new();
    let a = t.create().await;
    let url = format!("{}/verification", a.root);
    t.send(
        put(&url)
            .bearer(&a.token)
            .content_type("text/plain")
            .raw(br#"{"scheme": "github", "secret": "s"}"#.to_vec()),
    )
    .await
    .err(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type");
    t.send(
        put(&url)
            .bearer(&a.token)
            .content_type("application/json")
            .raw(b"{".to_vec()),
    )
    .await
    .err(StatusCode::BAD_REQUEST, "invalid_request");
}

#[tokio::test]
async fn provider_redeliveries_without_an_idempotency_key_are_one_event() {
    let t = TestApp::new();
    for (scheme, secret) in [
        ("standard-webhooks", STD_SECRET),
        ("stripe", STRIPE_SECRET),
        ("github", GH_SECRET),
    ] {
        let (_, a) = create_verified(&t, json!({"scheme": scheme, "secret": secret})).await;
        let body = br#"{"id": "evt_same", "type": "invoice.paid"}"#;
        let first = t
            .send(signed(&t, &a, scheme, secret, "delivery-1", body))
            .await;
        let first = first.ok(StatusCode::ACCEPTED).clone();
        // The provider retries a minute later: a fresh timestamp and signature, same id.
        t.advance(60);
        let again = t
            .send(signed(&t, &a, scheme, secret, "delivery-1", body))
            .await;
        let again = again.ok(StatusCode::OK);
        assert_eq!(again["duplicate"], true, "{scheme}");
        assert_eq!(again["event"], first["event"], "{scheme}");
        assert_eq!(count(&t, &a).await, 1, "{scheme}");
        // An explicit Idempotency-Key wins over the provider's id.
        let r = t
            .send(
                signed(&t, &a, scheme, secret, "delivery-1", body)
                    .header("idempotency-key", "mine"),
            )
            .await;
        r.ok(StatusCode::ACCEPTED);
        // An unverified delivery gets no implicit key: each is an event.
        for _ in 0..2 {
            let mut r = post(&a.inbox).raw(body.to_vec());
            for (k, v) in sign(
                &config(scheme, secret),
                "delivery-1",
                t.now() / 1000,
                b"other",
            ) {
                r = r.header(k, v);
            }
            t.send(r).await.ok(StatusCode::ACCEPTED);
        }
        assert_eq!(count(&t, &a).await, 4, "{scheme}");
    }
}
