//! More senders (docs/API.md §22) from outside, against any deployment: each provider's
//! handshake answered and appending nothing, each new scheme's signature (computed here,
//! independently of the server's code) verified with its implicit idempotency key, and the
//! event types the providers name.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

use crate::{Address, Client, Resp};

fn hmac_hex(key: &str, parts: &[&[u8]]) -> String {
    let mut m = match Hmac::<Sha256>::new_from_slice(key.as_bytes()) {
        Ok(m) => m,
        Err(e) => panic!("HMAC key: {e}"),
    };
    for p in parts {
        m.update(p);
    }
    hex::encode(m.finalize().into_bytes())
}

fn hmac_b64(key: &str, body: &[u8]) -> String {
    let mut m = match Hmac::<Sha256>::new_from_slice(key.as_bytes()) {
        Ok(m) => m,
        Err(e) => panic!("HMAC key: {e}"),
    };
    m.update(body);
    STANDARD.encode(m.finalize().into_bytes())
}

/// Twilio's signature: base64 HMAC-SHA1 of the URL then the sorted form parameters.
fn twilio_signature(token: &str, url: &str, form: &[u8]) -> String {
    let mut pairs: Vec<(String, String)> = form_urlencoded::parse(form)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    pairs.sort();
    let mut data = url.to_owned();
    for (k, v) in pairs {
        data.push_str(&k);
        data.push_str(&v);
    }
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, token.as_bytes());
    STANDARD.encode(ring::hmac::sign(&key, data.as_bytes()).as_ref())
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

async fn post(c: &Client, url: &str, ct: &str, headers: &[(&str, String)], body: &[u8]) -> Resp {
    let mut h: Vec<(&str, &str)> = vec![("content-type", ct)];
    h.extend(headers.iter().map(|(k, v)| (*k, v.as_str())));
    c.send("POST", url, None, &h, Some(body.to_vec())).await
}

async fn verified(c: &Client, verification: Value) -> Address {
    c.create_address(&json!({"name": "senders", "verification": verification}))
        .await
}

async fn last(c: &Client, a: &Address) -> Value {
    c.read_all(a).await.last().cloned().unwrap_or(Value::Null)
}

/// Every handshake of §22, answered and appending nothing: Slack's, Microsoft Graph's (its token
/// echoed as text/plain only, HTML and CR/LF inert), Zoom's (with the address's secret, its own
/// signature checked), Meta's GET (its verify token, a wrong one 403).
pub async fn handshakes(c: &Client) {
    let plain = c.new_address().await;
    let slack = br#"{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let r = post(c, &plain.inbox_url, "application/json", &[], slack).await;
    r.expect_status(200, "Slack's url_verification");
    assert_eq!(
        r.json,
        json!({"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"})
    );
    let long = format!(
        r#"{{"type":"url_verification","challenge":"{}"}}"#,
        "a".repeat(1025)
    );
    post(
        c,
        &plain.inbox_url,
        "application/json",
        &[],
        long.as_bytes(),
    )
    .await
    .expect_error(400, "invalid_request", "a challenge over 1,024 characters");

    let graph = format!(
        "{}?validationToken=%3Cb%3Ehi%3C%2Fb%3E%0D%0ASet-Cookie%3A%20x%3D1",
        plain.inbox_url
    );
    let r = post(c, &graph, "text/plain", &[], b"").await;
    r.expect_status(200, "Microsoft Graph's validationToken");
    assert_eq!(r.text, "<b>hi</b>\r\nSet-Cookie: x=1");
    let ct = r.headers.get("content-type").and_then(|v| v.to_str().ok());
    assert_eq!(ct, Some("text/plain; charset=utf-8"));
    assert!(r.headers.get("set-cookie").is_none());
    assert_eq!(
        c.read_all(&plain).await.len(),
        0,
        "handshakes append nothing"
    );

    // Zoom: the address's secret answers, and Zoom's own signature is checked.
    let secret = "zoom-secret-token-bb";
    let z = verified(c, json!({"scheme": "zoom", "secret": secret})).await;
    let body = br#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}"#;
    let ts = unix_now().to_string();
    let sig = format!(
        "v0={}",
        hmac_hex(secret, &[b"v0:", ts.as_bytes(), b":", body])
    );
    let headers = [
        ("x-zm-request-timestamp", ts.clone()),
        ("x-zm-signature", sig),
    ];
    let r = post(c, &z.inbox_url, "application/json", &headers, body).await;
    r.expect_status(200, "Zoom's endpoint.url_validation");
    assert_eq!(
        r.json,
        json!({"plainToken": "qgg8vlvZRS6UYooatFL8Aw",
               "encryptedToken": hmac_hex(secret, &[b"qgg8vlvZRS6UYooatFL8Aw"])})
    );
    post(c, &z.inbox_url, "application/json", &[], body)
        .await
        .expect_error(401, "signature_invalid", "Zoom's validation unsigned");
    post(c, &plain.inbox_url, "application/json", &[], body)
        .await
        .expect_error(
            400,
            "invalid_request",
            "Zoom's validation without a zoom secret",
        );
    assert_eq!(c.read_all(&z).await.len(), 0);

    // Meta: the one GET the inbox URL answers.
    let m = verified(
        c,
        json!({"scheme": "meta", "secret": "meta-app-secret", "verify_token": "vt-blackbox"}),
    )
    .await;
    let q = |token: &str| {
        format!(
            "{}?hub.mode=subscribe&hub.verify_token={token}&hub.challenge=1158201444",
            m.inbox_url
        )
    };
    let r = c.get(&q("vt-blackbox"), None).await;
    r.expect_status(200, "Meta's subscription");
    assert_eq!(r.text, "1158201444");
    let wrong = c.get(&q("vt-other"), None).await;
    wrong.expect_error(403, "forbidden", "Meta's subscription with a wrong token");
    assert!(!wrong.text.contains("vt-blackbox") && !wrong.text.contains("1158201444"));
    let elsewhere = c
        .get(
            &format!(
                "{}?hub.mode=subscribe&hub.verify_token=vt-blackbox&hub.challenge=1",
                plain.inbox_url
            ),
            None,
        )
        .await;
    elsewhere.expect_error(
        403,
        "forbidden",
        "Meta's subscription at a non-Meta address",
    );
    assert_eq!(c.read_all(&m).await.len(), 0);
}

/// The schemes slack, zoom, shopify, meta, twilio and linear: a signed delivery verifies and is
/// named by its provider; a provider's redelivery with its delivery id is a duplicate; an
/// unsigned one is refused (401) at an address with `reject_unverified`; a Slack delivery
/// signed 10 minutes ago is `timestamp_out_of_tolerance`; a GitHub delivery is `github.{event}`
/// at any address.
pub async fn schemes(c: &Client) {
    let now = unix_now();
    let ts = now.to_string();

    // Slack: an event callback, then its retry (same event_id) is a duplicate.
    let secret = "slack-signing-secret-bb";
    let a = verified(
        c,
        json!({"scheme": "slack", "secret": secret, "reject_unverified": true}),
    )
    .await;
    let body = br#"{"type":"event_callback","event_id":"Ev0BB","event":{"type":"app_mention","text":"hi"}}"#;
    let slack = |t: &str| {
        vec![
            ("x-slack-request-timestamp", t.to_owned()),
            (
                "x-slack-signature",
                format!(
                    "v0={}",
                    hmac_hex(secret, &[b"v0:", t.as_bytes(), b":", body])
                ),
            ),
        ]
    };
    post(c, &a.inbox_url, "application/json", &slack(&ts), body)
        .await
        .expect_status(202, "a Slack event");
    let e = last(c, &a).await;
    assert_eq!(e["type"], "slack.app_mention", "{e}");
    assert_eq!(
        e["verification"],
        json!({"scheme": "slack", "verified": true})
    );
    post(c, &a.inbox_url, "application/json", &slack(&ts), body)
        .await
        .expect_status(200, "Slack's retry");
    let old = (now - 600).to_string();
    let r = post(c, &a.inbox_url, "application/json", &slack(&old), body).await;
    r.expect_error(401, "signature_invalid", "a Slack replay");
    assert_eq!(r.json["error"]["reason"], "timestamp_out_of_tolerance");
    post(c, &a.inbox_url, "application/json", &[], body)
        .await
        .expect_error(401, "signature_invalid", "unsigned");
    assert_eq!(c.read_all(&a).await.len(), 1);

    // Zoom.
    let secret = "zoom-secret-bb";
    let a = verified(
        c,
        json!({"scheme": "zoom", "secret": secret, "reject_unverified": true}),
    )
    .await;
    let body = br#"{"event":"meeting.started","payload":{"object":{"id":"1"}},"event_ts":1}"#;
    let h = [
        ("x-zm-request-timestamp", ts.clone()),
        (
            "x-zm-signature",
            format!(
                "v0={}",
                hmac_hex(secret, &[b"v0:", ts.as_bytes(), b":", body])
            ),
        ),
    ];
    post(c, &a.inbox_url, "application/json", &h, body)
        .await
        .expect_status(202, "a Zoom event");
    let e = last(c, &a).await;
    assert_eq!(
        (e["type"].as_str(), &e["verification"]["verified"]),
        (Some("zoom.meeting.started"), &json!(true)),
        "{e}"
    );

    // Shopify: X-Shopify-Webhook-Id is the implicit key.
    let secret = "shopify-secret-bb";
    let a = verified(
        c,
        json!({"scheme": "shopify", "secret": secret, "reject_unverified": true}),
    )
    .await;
    let body = br#"{"id":820982911946154508,"email":"jon@example.com"}"#;
    let h = [
        ("x-shopify-hmac-sha256", hmac_b64(secret, body)),
        ("x-shopify-topic", "orders/create".to_owned()),
        ("x-shopify-webhook-id", "b54557e4-bb".to_owned()),
    ];
    post(c, &a.inbox_url, "application/json", &h, body)
        .await
        .expect_status(202, "a Shopify webhook");
    post(c, &a.inbox_url, "application/json", &h, body)
        .await
        .expect_status(200, "Shopify's redelivery");
    let e = last(c, &a).await;
    assert_eq!(
        (e["type"].as_str(), &e["verification"]["verified"]),
        (Some("shopify.orders/create"), &json!(true)),
        "{e}"
    );
    assert_eq!(c.read_all(&a).await.len(), 1);

    // Meta.
    let a = verified(c, json!({"scheme": "meta", "secret": "meta-secret-bb", "verify_token": "t", "reject_unverified": true})).await;
    let body = br#"{"object":"whatsapp_business_account","entry":[]}"#;
    let h = [(
        "x-hub-signature-256",
        format!("sha256={}", hmac_hex("meta-secret-bb", &[body])),
    )];
    post(c, &a.inbox_url, "application/json", &h, body)
        .await
        .expect_status(202, "a Meta webhook");
    assert_eq!(
        last(c, &a).await["verification"],
        json!({"scheme": "meta", "verified": true})
    );

    // Twilio: the public inbox URL (as the API gave it) and the sorted form.
    let token = "twilio-auth-token-bb";
    let a = verified(
        c,
        json!({"scheme": "twilio", "secret": token, "reject_unverified": true}),
    )
    .await;
    let form = b"To=%2B18005551212&From=%2B12349013030&Body=hello+there";
    let url = format!("{}?kind=sms", a.inbox_url);
    let h = [
        ("x-twilio-signature", twilio_signature(token, &url, form)),
        ("i-twilio-idempotency-token", "tw-bb-1".to_owned()),
    ];
    post(c, &url, "application/x-www-form-urlencoded", &h, form)
        .await
        .expect_status(202, "a Twilio webhook");
    post(c, &url, "application/x-www-form-urlencoded", &h, form)
        .await
        .expect_status(200, "Twilio's retry");
    let e = last(c, &a).await;
    assert_eq!(
        e["verification"],
        json!({"scheme": "twilio", "verified": true}),
        "{e}"
    );
    // Signed for another query: refused.
    post(
        c,
        &format!("{}?kind=voice", a.inbox_url),
        "application/x-www-form-urlencoded",
        &h,
        form,
    )
    .await
    .expect_error(401, "signature_invalid", "Twilio signed for another URL");

    // Linear: the body's webhookTimestamp (ms) within the tolerance.
    let secret = "lin_wh_bb";
    let a = verified(
        c,
        json!({"scheme": "linear", "secret": secret, "reject_unverified": true}),
    )
    .await;
    let body = format!(
        r#"{{"action":"create","type":"Issue","data":{{"id":"x"}},"webhookTimestamp":{}}}"#,
        now * 1000
    );
    let h = [
        ("linear-signature", hmac_hex(secret, &[body.as_bytes()])),
        ("linear-delivery", "lin-bb-1".to_owned()),
    ];
    post(c, &a.inbox_url, "application/json", &h, body.as_bytes())
        .await
        .expect_status(202, "a Linear webhook");
    let e = last(c, &a).await;
    assert_eq!(
        (e["type"].as_str(), &e["verification"]["verified"]),
        (Some("linear.Issue"), &json!(true)),
        "{e}"
    );

    // GitHub's event header names a delivery at any address, and `types=` selects it.
    let a = c.new_address().await;
    let h = [("x-github-event", "pull_request".to_owned())];
    post(
        c,
        &a.inbox_url,
        "application/json",
        &h,
        br#"{"action":"opened"}"#,
    )
    .await
    .expect_status(202, "a GitHub webhook");
    let r = c.events(&a, "types=github.*").await;
    r.expect_status(200, "a filtered read");
    let types: Vec<&str> = r.json["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(types, ["github.pull_request"]);
}
