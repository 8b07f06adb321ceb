//! §22 of docs/API.md, more senders: the providers' handshakes on the inbox URL (answered,
//! never appended, verified when the address verifies that provider, bounded, echoed only as
//! JSON or text/plain), the schemes slack, zoom, shopify, meta, twilio and linear through the
//! inbox, and the event types the providers name.

use agentaddress_core::domain::verification::{sign, sign_for_url, VerificationConfig};
use http::StatusCode;
use serde_json::{json, Value};

use crate::common::{get, post, Addr, Req, TestApp};

async fn count(t: &TestApp, a: &Addr) -> usize {
    t.events(a, "").await["events"]
        .as_array()
        .map_or(0, Vec::len)
}

async fn last(t: &TestApp, a: &Addr) -> Value {
    let page = t.events(a, "").await;
    page["events"]
        .as_array()
        .and_then(|e| e.last().cloned())
        .unwrap_or(Value::Null)
}

async fn verified(t: &TestApp, v: Value) -> Addr {
    t.create_with(&json!({"name": "senders", "verification": v}))
        .await
        .1
}

fn signed(req: Req, headers: Vec<(&'static str, String)>) -> Req {
    headers.into_iter().fold(req, |r, (k, v)| r.header(k, v))
}

#[tokio::test]
async fn slack_url_verification_is_answered_and_appends_nothing() {
    let t = TestApp::new();
    let a = t.create().await;
    let body = json!({"token": "Jhj5dZrVaK7ZwHHjRyZWjbDl", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification", "extra": {"ignored": true}});
    let r = t.send(post(&a.inbox).json(&body)).await;
    assert_eq!(
        r.ok(StatusCode::OK),
        &json!({"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"})
    );
    assert_eq!(count(&t, &a).await, 0);
    // Over 1,024 characters: 400, nothing appended.
    let long = json!({"type": "url_verification", "challenge": "a".repeat(1025)});
    t.send(post(&a.inbox).json(&long))
        .await
        .err(StatusCode::BAD_REQUEST, "invalid_request");
    assert_eq!(count(&t, &a).await, 0);

    // At an address verifying Slack, the handshake must verify.
    let secret = "8f742231b10e8888abcd99yyyzzz85a5";
    let s = verified(&t, json!({"scheme": "slack", "secret": secret})).await;
    let raw = serde_json::to_vec(&body).expect("json");
    let r = t
        .send(
            post(&s.inbox)
                .content_type("application/json")
                .raw(raw.clone()),
        )
        .await;
    assert_eq!(
        r.err(StatusCode::UNAUTHORIZED, "signature_invalid")["reason"],
        "missing_signature"
    );
    let c = VerificationConfig::new("slack", secret, None, None).expect("valid");
    let req = post(&s.inbox)
        .content_type("application/json")
        .raw(raw.clone());
    let r = t
        .send(signed(req, sign(&c, "", t.now() / 1000, &raw)))
        .await;
    assert_eq!(r.ok(StatusCode::OK)["challenge"], body["challenge"]);
    // A replay outside the tolerance.
    let req = post(&s.inbox)
        .content_type("application/json")
        .raw(raw.clone());
    let r = t
        .send(signed(req, sign(&c, "", t.now() / 1000 - 301, &raw)))
        .await;
    assert_eq!(
        r.err(StatusCode::UNAUTHORIZED, "signature_invalid")["reason"],
        "timestamp_out_of_tolerance"
    );
    assert_eq!(count(&t, &s).await, 0);
}

#[tokio::test]
async fn graph_validation_token_is_echoed_as_plain_text_only() {
    let t = TestApp::new();
    let a = t.create().await;
    // HTML and CRLF, percent-encoded as Graph sends the token.
    let r = t
        .send(
            post(format!(
                "{}?validationToken=%3Cscript%3Ealert(1)%3C%2Fscript%3E%0D%0ASet-Cookie%3A%20x%3D1",
                a.inbox
            ))
            .content_type("text/plain"),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(r.header("set-cookie"), None);
    assert_eq!(r.text, "<script>alert(1)</script>\r\nSet-Cookie: x=1");
    let long = format!("{}?validationToken={}", a.inbox, "a".repeat(1025));
    t.send(post(long))
        .await
        .err(StatusCode::BAD_REQUEST, "invalid_request");
    let twice = format!("{}?validationToken=a&validationToken=b", a.inbox);
    t.send(post(twice))
        .await
        .err(StatusCode::BAD_REQUEST, "invalid_request");
    assert_eq!(count(&t, &a).await, 0);
}

#[tokio::test]
async fn zoom_url_validation_needs_and_checks_the_zoom_secret() {
    let t = TestApp::new();
    let body = json!({"payload": {"plainToken": "qgg8vlvZRS6UYooatFL8Aw"}, "event_ts": 1654503849680_i64, "event": "endpoint.url_validation"});
    let raw = serde_json::to_vec(&body).expect("json");
    let plain = t.create().await;
    t.send(
        post(&plain.inbox)
            .content_type("application/json")
            .raw(raw.clone()),
    )
    .await
    .err(StatusCode::BAD_REQUEST, "invalid_request");
    let secret = "zoom_secret_token_example";
    let z = verified(&t, json!({"scheme": "zoom", "secret": secret})).await;
    let c = VerificationConfig::new("zoom", secret, None, None).expect("valid");
    let req = post(&z.inbox)
        .content_type("application/json")
        .raw(raw.clone());
    let r = t
        .send(signed(req, sign(&c, "", t.now() / 1000, &raw)))
        .await;
    assert_eq!(
        r.ok(StatusCode::OK),
        &json!({
            "plainToken": "qgg8vlvZRS6UYooatFL8Aw",
            "encryptedToken": "ab6193e5fc2172ba4a29511700f0cbf2aeabefa44064ef9bf89732e27aa58708"
        })
    );
    // Unsigned: refused.
    t.send(post(&z.inbox).content_type("application/json").raw(raw))
        .await
        .err(StatusCode::UNAUTHORIZED, "signature_invalid");
    assert_eq!(count(&t, &z).await + count(&t, &plain).await, 0);
}

#[tokio::test]
async fn meta_subscription_is_the_one_get_the_inbox_answers() {
    let t = TestApp::new();
    let m = verified(
        &t,
        json!({"scheme": "meta", "secret": "meta_app_secret", "verify_token": "tok-123"}),
    )
    .await;
    let shown = t.inspect(&m).await;
    assert_eq!(
        shown["address"]["verification"],
        json!({"scheme": "meta", "reject_unverified": false})
    );
    assert!(!shown.to_string().contains("tok-123"));
    let q = |token: &str, challenge: &str| {
        format!(
            "{}?hub.mode=subscribe&hub.verify_token={token}&hub.challenge={challenge}",
            m.inbox
        )
    };
    let r = t.send(get(q("tok-123", "1158201444"))).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.text, "1158201444");
    // A wrong token, and an address that is not Meta's: the same 403, nothing revealed.
    let wrong = t.send(get(q("tok-124", "1158201444"))).await;
    wrong.err(StatusCode::FORBIDDEN, "forbidden");
    assert!(!wrong.text.contains("tok-123") && !wrong.text.contains("1158201444"));
    let plain = t.create().await;
    let other = t
        .send(get(format!(
            "{}?hub.mode=subscribe&hub.verify_token=tok-123&hub.challenge=1",
            plain.inbox
        )))
        .await;
    other.err(StatusCode::FORBIDDEN, "forbidden");
    assert_eq!(other.json["error"], wrong.json["error"]);
    // Not a handshake, an oversized challenge, an unknown inbox.
    t.send(get(&m.inbox))
        .await
        .err(StatusCode::BAD_REQUEST, "invalid_request");
    t.send(get(q("tok-123", &"9".repeat(1025))))
        .await
        .err(StatusCode::BAD_REQUEST, "invalid_request");
    t.send(get(format!("{}x?hub.mode=subscribe", m.inbox)))
        .await
        .err(StatusCode::NOT_FOUND, "not_found");
    assert_eq!(count(&t, &m).await, 0);
    // A signed Meta delivery verifies.
    let c = VerificationConfig::with_token("meta", "meta_app_secret", None, None, Some("tok-123"))
        .expect("valid");
    let raw = br#"{"object":"whatsapp_business_account","entry":[]}"#.to_vec();
    let req = post(&m.inbox)
        .content_type("application/json")
        .raw(raw.clone());
    t.send(signed(req, sign(&c, "", 0, &raw)))
        .await
        .ok(StatusCode::ACCEPTED);
    assert_eq!(
        last(&t, &m).await["verification"],
        json!({"scheme": "meta", "verified": true})
    );
}

#[tokio::test]
async fn handshakes_count_against_their_rate_limit() {
    let t = TestApp::new();
    let a = t.create().await;
    let url = format!("{}?validationToken=x", a.inbox);
    for _ in 0..30 {
        assert_eq!(t.send(post(&url)).await.status, StatusCode::OK);
    }
    t.send(post(&url)).await.assert_rate_limited();
    // Deliveries are not handshakes: still accepted.
    t.deliver(&a, &json!({"type": "x"}))
        .await
        .ok(StatusCode::ACCEPTED);
}

#[tokio::test]
async fn twilio_signs_the_public_url_and_the_sorted_form() {
    let t = TestApp::new();
    let a = verified(
        &t,
        json!({"scheme": "twilio", "secret": "12345", "reject_unverified": true}),
    )
    .await;
    let c = VerificationConfig::new("twilio", "12345", None, None).expect("valid");
    let body = b"To=%2B18005551212&From=%2B12349013030&Body=hello&Body=again";
    // The URL Twilio was given: the public one, as this request's Host and proto make it.
    let url = format!("https://hooks.example{}?x=1", a.inbox);
    let headers = sign_for_url(&c, "idem-7", 0, body, &url);
    let send = |query: &'static str, host: &'static str, body: &'static [u8]| {
        let req = post(format!("{}{query}", a.inbox))
            .header("host", host)
            .header("x-forwarded-proto", "https")
            .content_type("application/x-www-form-urlencoded")
            .raw(body.to_vec());
        // The signature over the sorted form, and a delivery id of this body's own.
        let mut h = headers.clone();
        h[1].1 = format!("idem-{}", body.len() + query.len() + host.len());
        signed(req, h)
    };
    let r = t.send(send("?x=1", "hooks.example", body)).await;
    r.ok(StatusCode::ACCEPTED);
    let e = last(&t, &a).await;
    assert_eq!(
        e["verification"],
        json!({"scheme": "twilio", "verified": true})
    );
    assert!(e["http"]["headers"]["x-twilio-signature"].is_string());
    // The same again: Twilio's idempotency token makes it a duplicate.
    assert_eq!(
        t.send(send("?x=1", "hooks.example", body)).await.status,
        StatusCode::OK
    );
    // Reordered parameters verify; another host, another query, another value do not.
    let reordered = b"Body=again&From=%2B12349013030&Body=hello&To=%2B18005551213";
    t.send(send("?x=1", "hooks.example", &reordered[..]))
        .await
        .err(StatusCode::UNAUTHORIZED, "signature_invalid");
    let reordered = b"Body=again&From=%2B12349013030&Body=hello&To=%2B18005551212&";
    t.send(send("?x=1", "hooks.example", &reordered[..]))
        .await
        .ok(StatusCode::ACCEPTED);
    for (q, host, b) in [
        ("?x=1", "evil.example", body.as_slice()),
        ("?x=2", "hooks.example", body.as_slice()),
        (
            "?x=1",
            "hooks.example",
            b"To=%2B18005551212&From=%2B12349013030&Body=hello&Body=agair".as_slice(),
        ),
    ] {
        t.send(send(q, host, b))
            .await
            .err(StatusCode::UNAUTHORIZED, "signature_invalid");
    }
    assert_eq!(count(&t, &a).await, 2);
}

#[tokio::test]
async fn shopify_linear_slack_zoom_verify_and_are_named_by_their_provider() {
    let t = TestApp::new();
    let now_s = t.now() / 1000;
    // (scheme, secret, body, headers besides the signature, the event type expected)
    type Case = (
        &'static str,
        &'static str,
        Vec<u8>,
        Vec<(&'static str, String)>,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "shopify",
            "hush",
            br#"{"id":820982911946154508,"email":"jon@example.com"}"#.to_vec(),
            vec![("x-shopify-topic", "orders/create".into())],
            "shopify.orders/create",
        ),
        (
            "linear",
            "lin_wh_secret",
            format!(r#"{{"action":"create","type":"Issue","data":{{"id":"x"}},"webhookTimestamp":{}}}"#, t.now()).into_bytes(),
            vec![],
            "linear.Issue",
        ),
        (
            "slack",
            "8f742231b10e8888abcd99yyyzzz85a5",
            br#"{"type":"event_callback","event_id":"Ev1","event":{"type":"app_mention","text":"hi"}}"#.to_vec(),
            vec![],
            "slack.app_mention",
        ),
        (
            "zoom",
            "zoom_secret",
            br#"{"event":"meeting.started","payload":{"object":{"id":"1"}},"event_ts":1}"#.to_vec(),
            vec![],
            "zoom.meeting.started",
        ),
    ];
    for (scheme, secret, body, extra, expected_type) in cases {
        let a = verified(
            &t,
            json!({"scheme": scheme, "secret": secret, "reject_unverified": true}),
        )
        .await;
        let c = VerificationConfig::new(scheme, secret, None, None).expect("valid");
        let mut headers = sign(&c, "delivery-1", now_s, &body);
        headers.extend(extra);
        let req = post(&a.inbox)
            .content_type("application/json")
            .raw(body.clone());
        let r = t.send(signed(req, headers.clone())).await;
        r.ok(StatusCode::ACCEPTED);
        let e = last(&t, &a).await;
        assert_eq!(e["type"], expected_type, "{scheme}");
        assert_eq!(e["verification"]["verified"], true, "{scheme}");
        assert_eq!(
            e["data"],
            serde_json::from_slice::<Value>(&body).expect("json"),
            "{scheme}: the whole body is the data"
        );
        // Unsigned: refused, nothing appended.
        let req = post(&a.inbox)
            .content_type("application/json")
            .raw(body.clone());
        t.send(req)
            .await
            .err(StatusCode::UNAUTHORIZED, "signature_invalid");
        assert_eq!(count(&t, &a).await, 1, "{scheme}");
    }
}

#[tokio::test]
async fn provider_headers_name_events_at_any_address_but_never_an_envelope() {
    let t = TestApp::new();
    let a = t.create().await;
    let r = t
        .send(
            post(&a.inbox)
                .header("x-github-event", "push")
                .json(&json!({"ref": "refs/heads/main"})),
        )
        .await;
    r.ok(StatusCode::ACCEPTED);
    assert_eq!(last(&t, &a).await["type"], "github.push");
    // The event type is filterable.
    let page = t.events(&a, "types=github.*").await;
    assert_eq!(page["events"].as_array().map(Vec::len), Some(1));
    // An envelope keeps its own type, whatever headers come with it.
    t.send(
        post(&a.inbox)
            .header("x-github-event", "push")
            .json(&json!({"type": "ci.done", "data": {"ok": true}})),
    )
    .await
    .ok(StatusCode::ACCEPTED);
    assert_eq!(last(&t, &a).await["type"], "ci.done");
    // Without the provider's header, a Slack-shaped body is not Slack's.
    t.deliver(
        &a,
        &json!({"type": "event_callback", "event": {"type": "message"}}),
    )
    .await
    .ok(StatusCode::ACCEPTED);
    assert_eq!(last(&t, &a).await["type"], "event_callback");
    // A header value no type pattern could name is not used.
    t.send(
        post(&a.inbox)
            .header("x-github-event", "a b")
            .json(&json!({"x": 1})),
    )
    .await
    .ok(StatusCode::ACCEPTED);
    assert_eq!(last(&t, &a).await["type"], "http.request");
}
