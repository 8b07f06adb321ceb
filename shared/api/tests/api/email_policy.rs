//! §10 of docs/API.md, "Sender rules": an address's `email_policy` at creation, `PUT` and
//! `DELETE {root}/email/policy`, its view in `GET {root}` with `email.refused_count`, every bad
//! input a 400 `invalid_request` naming the rule (nothing stored), and mail through the
//! raw-MIME webhook door refused, counted and never appended.

use std::sync::Arc;

use agentaddress_api::{self as api, ApiConfig, AppState};
use agentaddress_core::domain::{ids, Limits, ManualClock};
use agentaddress_sqlite::SqliteStore;
use http::StatusCode;
use serde_json::{json, Value};

use crate::common::{addr_of, delete, fresh_ip, get, post, put, send_to, Addr, TestApp, CREATE};

fn policy_url(a: &Addr) -> String {
    format!("{}/email/policy", a.root)
}

async fn put_policy(t: &TestApp, a: &Addr, body: &Value) -> crate::common::Resp {
    t.send(put(policy_url(a)).bearer(&a.token).json(body)).await
}

/// Bad policies, each with a part of the message that names its rule.
fn bad_policies() -> Vec<(Value, &'static str)> {
    let too_many: Vec<String> = (0..101).map(|i| format!("u{i}@example.com")).collect();
    vec![
        (json!("*@example.com"), "must be a JSON object"),
        (json!([]), "must be a JSON object"),
        (json!({}), "must set `allow` or `require_auth`"),
        (json!({"allow": []}), "at least one pattern"),
        (json!({"allow": "*@example.com"}), "must be an array"),
        (json!({"allow": [""]}), "`allow[0]` must be 3 to 254"),
        (json!({"allow": ["*"]}), "`allow[0]` must be 3 to 254"),
        (json!({"allow": ["*@*"]}), "must have a domain"),
        (
            json!({"allow": [format!("{}@example.com", "a".repeat(988))]}),
            "must be 3 to 254",
        ),
        (json!({"allow": too_many}), "at most 100 patterns"),
        (
            json!({"allow": ["example.com"]}),
            "must have the form `local@domain`",
        ),
        (json!({"allow": ["ada*@example.com"]}), "no other wildcard"),
        (json!({"allow": [7]}), "`allow[0]` must be a string"),
        (json!({"require_auth": "dkim"}), "`require_auth` must be"),
        (json!({"require_auth": false}), "`require_auth` must be"),
    ]
}

#[tokio::test]
async fn created_with_a_policy_it_is_shown_with_its_refusal_count() {
    let t = TestApp::new();
    let (created, a) = t
        .create_with(&json!({"email_policy": {"allow": ["*@Example.com", "Ops@*.corp.example"], "require_auth": "dmarc"}}))
        .await;
    let expected =
        json!({"allow": ["*@example.com", "ops@*.corp.example"], "require_auth": "dmarc"});
    assert_eq!(created["address"]["email_policy"], expected);
    let shown = t.inspect(&a).await;
    assert_eq!(shown["address"]["email_policy"], expected);
    assert_eq!(shown["email"], json!({"refused_count": 0}));

    // Without one: no member, the count still shown; `null` is absent.
    let (created, plain) = t.create_with(&json!({"email_policy": null})).await;
    assert!(
        created["address"].get("email_policy").is_none(),
        "{created}"
    );
    let shown = t.inspect(&plain).await;
    assert!(shown["address"].get("email_policy").is_none(), "{shown}");
    assert_eq!(shown["email"]["refused_count"], 0);
}

#[tokio::test]
async fn put_replaces_and_delete_removes_the_policy() {
    let t = TestApp::new();
    let a = t.create().await;
    let r = put_policy(
        &t,
        &a,
        &json!({"allow": ["ADA@example.com"], "other": true}),
    )
    .await;
    let expected = json!({"allow": ["ada@example.com"], "require_auth": null});
    assert_eq!(r.ok(StatusCode::OK)["email_policy"], expected);
    assert_eq!(t.inspect(&a).await["address"]["email_policy"], expected);

    let r = put_policy(
        &t,
        &a,
        &json!({"require_auth": "spf_or_dkim", "allow": null}),
    )
    .await;
    let expected = json!({"allow": null, "require_auth": "spf_or_dkim"});
    assert_eq!(r.ok(StatusCode::OK)["email_policy"], expected);
    assert_eq!(t.inspect(&a).await["address"]["email_policy"], expected);

    for _ in 0..2 {
        let r = t.send(delete(policy_url(&a)).bearer(&a.token)).await;
        assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
        let shown = t.inspect(&a).await;
        assert!(shown["address"].get("email_policy").is_none(), "{shown}");
    }
}

#[tokio::test]
async fn bad_policies_are_400_naming_the_rule_and_store_nothing() {
    let t = TestApp::new();
    let a = t.create().await;
    let kept = json!({"allow": ["*@example.com"], "require_auth": null});
    put_policy(&t, &a, &kept).await.ok(StatusCode::OK);
    for (policy, rule) in bad_policies() {
        let r = put_policy(&t, &a, &policy).await;
        let e = r.err(StatusCode::BAD_REQUEST, "invalid_request");
        let message = e["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(rule),
            "PUT {policy}: {message:?} lacks {rule:?}"
        );

        let r = t
            .send(
                post(CREATE)
                    .ip(&fresh_ip())
                    .json(&json!({"email_policy": policy})),
            )
            .await;
        let e = r.err(StatusCode::BAD_REQUEST, "invalid_request");
        let message = e["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("`email_policy`: ") && message.contains(rule),
            "create with {policy}: {message:?} lacks {rule:?}"
        );
    }
    // Nothing was stored: the address keeps what it had.
    assert_eq!(t.inspect(&a).await["address"]["email_policy"], kept);

    // Not JSON, another content type, too large.
    let r = t
        .send(
            put(policy_url(&a))
                .bearer(&a.token)
                .content_type("application/json")
                .raw("{nope"),
        )
        .await;
    r.err(StatusCode::BAD_REQUEST, "invalid_request");
    let r = t
        .send(
            put(policy_url(&a))
                .bearer(&a.token)
                .content_type("text/plain")
                .raw("{}"),
        )
        .await;
    r.err(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type");
    let huge = json!({"allow": ["*@example.com"], "pad": "x".repeat(70_000)});
    let r = put_policy(&t, &a, &huge).await;
    r.err(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    assert_eq!(t.inspect(&a).await["address"]["email_policy"], kept);
}

#[tokio::test]
async fn the_policy_routes_authenticate_first_and_refuse_a_gone_address() {
    let t = TestApp::new();
    let a = t.create().await;
    let body = json!({"allow": ["*@example.com"]});
    for r in [
        put(policy_url(&a)).json(&body),
        put(policy_url(&a))
            .bearer("aat_wrong")
            .json(&json!({"allow": []})),
        delete(policy_url(&a)),
    ] {
        t.send(r)
            .await
            .err(StatusCode::UNAUTHORIZED, "unauthorized");
    }
    assert!(t.inspect(&a).await["address"].get("email_policy").is_none());
    let r = t.send(delete(&a.root).bearer(&a.token)).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    put_policy(&t, &a, &body)
        .await
        .err(StatusCode::GONE, "address_gone");
    t.send(delete(policy_url(&a)).bearer(&a.token))
        .await
        .err(StatusCode::GONE, "address_gone");
}

const INGEST_SECRET: &str = "email-policy-ingest-secret";

/// An app with the raw-MIME webhook door open (`INGEST_SECRET`).
fn app_with_ingest() -> axum::Router {
    let store = Arc::new(SqliteStore::open_in_memory().expect("open in-memory SQLite"));
    let state = AppState::new(
        store,
        ApiConfig {
            public_url: None,
            email_domain: "inbox.test".into(),
            limits: Limits::default(),
            email_ingest_secret_hash: Some(ids::hash_secret(INGEST_SECRET)),
            poll_checks: Default::default(),
            max_waiting_polls: 0,
        },
    )
    .with_clock(Arc::new(ManualClock::starting_now()));
    api::router(state)
}

async fn inbound(app: &axum::Router, a: &Addr, mail_from: &str, from: &str, n: u32) -> Value {
    let raw = format!(
        "From: {from}\r\nTo: {}@inbox.test\r\nMessage-ID: <policy-{n}@example.com>\r\n\
         Subject: policy {n}\r\n\r\nHello.\r\n",
        a.id
    );
    let uri = format!(
        "/api/v1/email/inbound?rcpt={}%40inbox.test&mail_from={}",
        a.id,
        mail_from.replace('@', "%40")
    );
    let r = send_to(
        app,
        post(uri)
            .header("authorization", format!("Bearer {INGEST_SECRET}"))
            .content_type("message/rfc822")
            .raw(raw),
    )
    .await;
    r.ok(StatusCode::OK).clone()
}

#[tokio::test]
async fn the_webhook_door_refuses_counts_and_appends_nothing() {
    let app = app_with_ingest();
    let r = send_to(
        &app,
        post(CREATE)
            .ip(&fresh_ip())
            .json(&json!({"email_policy": {"allow": ["*@example.com"]}})),
    )
    .await;
    let a = addr_of(r.ok(StatusCode::CREATED));
    let rcpt = format!("{}@inbox.test", a.id);

    let answer = inbound(&app, &a, "eve@evil.example", "Ada <ada@example.com>", 1).await;
    assert_eq!(answer["accepted"], json!([]));
    assert_eq!(
        answer["rejected"],
        json!([{"rcpt": rcpt, "code": "invalid_request",
                "smtp": "550 5.7.1 Sender not allowed by the recipient's sender rules",
                "temporary": false}])
    );
    let answer = inbound(&app, &a, "ada@example.com", "Eve <eve@evil.example>", 2).await;
    assert_eq!(
        answer["rejected"][0]["smtp"],
        "550 5.7.1 Message author not allowed by the recipient's sender rules"
    );
    let answer = inbound(&app, &a, "ada@example.com", "Ada <ada@example.com>", 3).await;
    assert_eq!(answer["accepted"], json!([rcpt]));

    let shown = send_to(&app, get(&a.root).bearer(&a.token)).await;
    let shown = shown.ok(StatusCode::OK);
    assert_eq!(shown["email"]["refused_count"], 2);
    let page = send_to(&app, get(a.events()).bearer(&a.token)).await;
    let events = page.ok(StatusCode::OK)["events"].clone();
    assert_eq!(events.as_array().map(Vec::len), Some(1), "{events}");
    assert_eq!(events[0]["data"]["subject"], "policy 3");

    // With authentication required, the webhook door (which evaluates none) passes nothing.
    let r = send_to(
        &app,
        put(policy_url(&a))
            .bearer(&a.token)
            .json(&json!({"require_auth": "spf_or_dkim"})),
    )
    .await;
    r.ok(StatusCode::OK);
    let answer = inbound(&app, &a, "ada@example.com", "Ada <ada@example.com>", 4).await;
    assert_eq!(
        answer["rejected"][0]["smtp"],
        "550 5.7.1 Message not authenticated as the recipient's sender rules require"
    );
    let shown = send_to(&app, get(&a.root).bearer(&a.token)).await;
    assert_eq!(shown.ok(StatusCode::OK)["email"]["refused_count"], 3);
}

#[tokio::test]
async fn openapi_describes_the_policy() {
    let t = TestApp::new();
    let r = t.send(get("/openapi.json")).await;
    let doc = r.ok(StatusCode::OK);
    let create = &doc["components"]["schemas"]["CreateAddressRequest"]["properties"];
    let policy = &create["email_policy"];
    assert_eq!(
        policy["properties"]["require_auth"]["enum"],
        json!(["spf_or_dkim", "dmarc"])
    );
    assert_eq!(policy["properties"]["allow"]["maxItems"], 100);
    let item = &doc["paths"]["/api/v1/addresses/{address_id}/email/policy"];
    assert!(
        item["put"].is_object() && item["delete"].is_object(),
        "{item}"
    );
    let details = &doc["components"]["schemas"]["AddressDetails"]["properties"];
    assert!(details["email"].is_object(), "{details}");
}
