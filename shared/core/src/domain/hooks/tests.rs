use super::*;
use crate::domain::verification::{verify, VerificationConfig};

fn patterns(p: &[&str]) -> TypePatterns {
    TypePatterns::parse(p).expect("valid patterns")
}

#[test]
fn hook_reports_never_wake() {
    let all = TypePatterns::default();
    assert!(!all.wakes("hook.failed") && !all.wakes("hook.disabled"));
    assert!(all.wakes("hooks.x") && all.wakes("email.received"));
    assert!(!patterns(&["hook.*"]).wakes("hook.test"));
}

#[test]
fn urls_must_be_https_without_credentials() {
    assert!(check_hook_url("https://example.com/hook", false).is_ok());
    assert!(check_hook_url("https://api.github.com/repos/o/r/dispatches", false).is_ok());
    let refused = |u: &str| check_hook_url(u, false).expect_err(u).0;
    assert!(refused("http://example.com/").contains("https"));
    assert!(refused("ftp://example.com/").contains("https"));
    assert!(refused("example.com/hook").contains("absolute"));
    assert!(refused("https://user:pw@example.com/").contains("user name"));
    assert!(refused("https://user@example.com/").contains("user name"));
    assert!(refused("https://example.com/#x").contains("fragment"));
    assert!(refused(&format!("https://example.com/{}", "a".repeat(3000))).contains("longer"));
    // `http://` is allowed with private receivers.
    assert!(check_hook_url("http://127.0.0.1:9000/wake", true).is_ok());
}

#[test]
fn literal_addresses_must_be_public() {
    for host in [
        "127.0.0.1",
        "localhost",
        "LocalHost.",
        "app.localhost",
        "10.1.2.3",
        "169.254.169.254",
        "172.16.0.1",
        "192.168.1.1",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "[::1]",
        "[fd00::1]",
        "[fe80::1]",
        "[::ffff:10.0.0.1]",
        "[::ffff:169.254.169.254]",
        "2130706433", // 127.0.0.1 written as one number
        "0x7f.1",     // and in hex
    ] {
        let u = format!("https://{host}/hook");
        let refused = check_hook_url(&u, false).expect_err(&u).0;
        assert!(refused.contains("not a public address"), "{u}: {refused}");
        assert!(check_hook_url(&u, true).is_ok(), "{u} with private allowed");
    }
    assert!(check_hook_url("https://8.8.8.8/", false).is_ok());
    assert!(check_hook_url("https://[2606:4700::1111]/", false).is_ok());
}

#[test]
fn the_table_of_non_public_ranges() {
    let v4 = |s: &str| is_public(s.parse::<IpAddr>().expect("ip"));
    for private in [
        "0.1.2.3",
        "10.0.0.0",
        "10.255.255.255",
        "100.64.0.0",
        "100.127.255.255",
        "127.0.0.1",
        "169.254.0.1",
        "169.254.169.254",
        "172.16.0.0",
        "172.31.255.255",
        "192.0.0.8",
        "192.0.2.1",
        "192.88.99.1",
        "192.168.0.1",
        "198.18.0.1",
        "198.19.255.255",
        "198.51.100.7",
        "203.0.113.9",
        "224.0.0.1",
        "239.255.255.250",
        "240.0.0.1",
        "255.255.255.255",
        "::",
        "::1",
        "::127.0.0.1",
        "::ffff:127.0.0.1",
        "::ffff:192.168.0.1",
        "64:ff9b::a00:1", // NAT64 of 10.0.0.1
        "64:ff9b:1::1",   // local-use NAT64
        "100::1",         // discard
        "2001::1",        // Teredo
        "2001:db8::1",    // documentation
        "2002:a00:1::1",  // 6to4 of 10.0.0.1
        "3fff::1",        // documentation
        "fc00::1",
        "fdff:ffff::1",
        "fe80::1",
        "febf::1",
        "fec0::1",
        "ff02::1",
    ] {
        assert!(!v4(private), "{private} must not be public");
    }
    for public in [
        "1.1.1.1",
        "8.8.8.8",
        "100.63.255.255",
        "100.128.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "192.0.1.1",
        "192.169.0.1",
        "198.20.0.1",
        "223.255.255.255",
        "2606:4700::1111",
        "2a00:1450::1",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808", // NAT64 of 8.8.8.8
        "2002:808:808::1",  // 6to4 of 8.8.8.8
        "2001:4860::8888",
    ] {
        assert!(v4(public), "{public} must be public");
    }
}

#[test]
fn headers_are_tokens_of_our_choosing_with_short_single_line_values() {
    let obj = |v: Value| v.as_object().cloned().expect("object");
    let ok = check_headers(&obj(json!({"Authorization": "Bearer x", "X-Run": "1"})))
        .expect("valid headers");
    assert_eq!(
        ok,
        vec![
            ("authorization".to_owned(), "Bearer x".to_owned()),
            ("x-run".to_owned(), "1".to_owned())
        ]
    );
    let refused = |v: Value| check_headers(&obj(v)).expect_err("refused").0;
    assert!(
        refused(json!({"a": "1", "b": "1", "c": "1", "d": "1", "e": "1", "f": "1"}))
            .contains("at most 5")
    );
    for owned in [
        "Host",
        "content-length",
        "Content-Type",
        "transfer-encoding",
        "connection",
        "Webhook-Signature",
        "webhook-id",
    ] {
        assert!(
            refused(json!({ owned: "x" })).contains("set by the sender"),
            "{owned}"
        );
    }
    assert!(refused(json!({"bad name": "x"})).contains("HTTP token"));
    assert!(refused(json!({"": "x"})).contains("HTTP token"));
    assert!(refused(json!({"x": "a\r\nInjected: 1"})).contains("line break"));
    assert!(refused(json!({"x": "a\nb"})).contains("line break"));
    assert!(refused(json!({"x": 5})).contains("string"));
    assert!(refused(json!({"x": "v".repeat(1025)})).contains("1024"));
    assert!(check_headers(&obj(json!({"x": "v".repeat(1024)}))).is_ok());
    assert!(refused(json!({"X-A": "1", "x-a": "2"})).contains("twice"));
}

fn wake() -> Wake {
    Wake {
        address_id: "addr_1".into(),
        task_id: Some("task-9".into()),
        hook_id: "hk_abc".into(),
        from_sequence: 4,
        to_sequence: 6,
        events: vec![
            WakeEvent {
                id: "evt_4".into(),
                sequence: 4,
                event_type: "email.received".into(),
                source: Some("mail".into()),
                created_at: 0,
            },
            WakeEvent {
                id: "evt_6".into(),
                sequence: 6,
                event_type: "request.answered".into(),
                source: None,
                created_at: 1_000,
            },
        ],
        events_url: "https://x.test/api/v1/addresses/addr_1/events?after=3".into(),
        test: None,
    }
}

#[test]
fn a_wake_carries_no_data_and_is_signed_like_standard_webhooks() {
    let w = wake();
    let body = w.body(HookFormat::Standard);
    assert_eq!(body["type"], "address.wake");
    assert_eq!(body["from_sequence"], 4);
    assert_eq!(body["to_sequence"], 6);
    assert_eq!(body["events"][1]["type"], "request.answered");
    assert_eq!(body["events"][0]["created_at"], "1970-01-01T00:00:00.000Z");
    assert!(body["events"][0].get("data").is_none());
    assert_eq!(w.message_id(), "hk_abc_6");

    let secret = new_signing_secret();
    let bytes = serde_json::to_vec(&body).expect("json");
    let headers = w.headers(HookFormat::Standard, &secret, 1_700_000_000, &bytes);
    let get = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| v.clone())
            .expect(n)
    };
    assert_eq!(get("content-type"), "application/json");
    assert!(get("user-agent").starts_with("agentaddress/"));
    assert_eq!(get("webhook-id"), "hk_abc_6");
    assert_eq!(get("webhook-timestamp"), "1700000000");
    // The receiver's side: the inbox's own verifier accepts it (one HMAC rule both ways), and
    // a changed body does not verify.
    let config = VerificationConfig::new("standard-webhooks", &secret, None, None).expect("config");
    let raw: Vec<(&str, &[u8])> = headers.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
    let now = 1_700_000_000_000;
    assert!(verify(&config, &raw, &bytes, now).verified());
    assert!(!verify(&config, &raw, b"{}", now).verified());
}

#[test]
fn github_and_slack_formats() {
    let w = wake();
    let gh = w.body(HookFormat::GithubDispatch);
    assert_eq!(gh["event_type"], "agentaddress.wake");
    assert_eq!(gh["client_payload"], w.to_json());
    let secret = new_signing_secret();
    let headers = w.headers(HookFormat::GithubDispatch, &secret, 1, b"{}");
    assert!(headers
        .iter()
        .any(|(k, v)| *k == "accept" && v == "application/vnd.github+json"));
    let slack = w.body(HookFormat::Slack);
    let text = slack["text"].as_str().expect("text");
    assert!(text.contains("1 × email.received") && text.contains("1 × request.answered"));
    assert!(text.contains("task task-9") && text.contains(&w.events_url));
    for f in [
        HookFormat::Standard,
        HookFormat::GithubDispatch,
        HookFormat::Slack,
    ] {
        assert_eq!(HookFormat::parse(f.as_str()), Some(f));
    }
    assert_eq!(HookFormat::parse("xml"), None);
}

#[test]
fn answers_are_read_as_delivered_retried_or_failed() {
    assert_eq!(try_outcome(Some(200), None, 0), TryOutcome::Delivered);
    assert_eq!(try_outcome(Some(204), None, 5), TryOutcome::Delivered);
    let after = |s: u64| TryOutcome::Retry {
        after: Some(Duration::from_secs(s)),
    };
    assert_eq!(try_outcome(None, None, 0), after(10));
    assert_eq!(try_outcome(Some(503), None, 1), after(60));
    assert_eq!(try_outcome(Some(302), None, 2), after(300));
    assert_eq!(try_outcome(Some(408), None, 3), after(1_800));
    assert_eq!(try_outcome(Some(429), Some("7200"), 0), after(7_200));
    // Retry-After is honoured up to six hours, and never sooner than the schedule.
    assert_eq!(try_outcome(Some(429), Some("999999"), 0), after(21_600));
    assert_eq!(try_outcome(Some(429), Some("1"), 2), after(300));
    assert_eq!(try_outcome(Some(429), Some("soon"), 0), after(10));
    assert_eq!(try_outcome(Some(500), None, 5), after(21_600));
    assert_eq!(
        try_outcome(Some(500), None, 6),
        TryOutcome::Retry { after: None }
    );
    for permanent in [400, 401, 403, 404, 410, 422] {
        assert_eq!(try_outcome(Some(permanent), None, 0), TryOutcome::Permanent);
    }
}

#[test]
fn ids_secrets_and_debounce() {
    let id = new_hook_id();
    assert!(
        id.starts_with("hk_") && crate::domain::ids::is_valid_id(&id),
        "{id}"
    );
    assert_ne!(new_hook_id(), id);
    let secret = new_signing_secret();
    assert!(VerificationConfig::new("standard-webhooks", &secret, None, None).is_ok());
    assert_eq!(debounce_rule(0), Ok(0));
    assert_eq!(debounce_rule(3600), Ok(3600));
    assert!(debounce_rule(3601).is_err());
}
