//! `email_id`: the same message delivered twice yields the same id.

mod common;

use agentaddress_email::{parse_message, AuthResults, AuthVerdict, EmailLimits, Provider};
use common::{corpus, envelope, parse};

#[test]
fn a_retry_through_another_relay_keeps_the_id() {
    let raw = corpus("gmail_reply.eml");
    let mut relayed =
        b"Received: from relay2.example by mx.inbox.example; Tue, 1 Dec 2026\r\n".to_vec();
    relayed.extend_from_slice(&raw);
    let a = parse(&raw).expect("accepted");
    let b = parse(&relayed).expect("accepted");
    assert_eq!(a.email_id, b.email_id);
    assert_ne!(a.data["size"], b.data["size"]);
}

#[test]
fn without_message_id_identical_bytes_keep_the_id() {
    let raw = corpus("html_only.eml");
    assert_eq!(
        parse(&raw).expect("a").email_id,
        parse(&raw).expect("b").email_id
    );
    let mut other = raw.clone();
    other.extend_from_slice(b"more");
    assert_ne!(
        parse(&raw).expect("a").email_id,
        parse(&other).expect("b").email_id
    );
}

#[test]
fn a_provider_id_is_used_and_the_rest_is_recorded() {
    let auth = AuthResults {
        spf: AuthVerdict::Pass,
        dkim: AuthVerdict::Temperror,
        dmarc: AuthVerdict::Softfail,
    };
    let parsed = parse_message(
        &corpus("plain.eml"),
        &envelope(),
        Some("build"),
        Provider::Ses,
        auth,
        Some("0100018c-ses-id"),
        &EmailLimits::default(),
    )
    .expect("accepted");
    assert_eq!(parsed.email_id, "0100018c-ses-id");
    assert_eq!(parsed.data["email_id"], "0100018c-ses-id");
    assert_eq!(parsed.data["tag"], "build");
    assert_eq!(parsed.data["provider"], "ses");
    assert_eq!(
        parsed.data["auth"],
        serde_json::json!({"spf": "pass", "dkim": "temperror", "dmarc": "softfail"})
    );
    let all = [
        AuthVerdict::Pass,
        AuthVerdict::Fail,
        AuthVerdict::Softfail,
        AuthVerdict::Neutral,
        AuthVerdict::None,
        AuthVerdict::Temperror,
        AuthVerdict::Permerror,
    ];
    let names: Vec<String> = all
        .iter()
        .filter_map(|v| serde_json::to_value(v).ok())
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        names,
        [
            "pass",
            "fail",
            "softfail",
            "neutral",
            "none",
            "temperror",
            "permerror"
        ]
    );
}

#[test]
fn no_from_falls_back_to_the_envelope_sender() {
    let parsed = parse(b"Subject: anonymous\r\n\r\nhi\r\n").expect("accepted");
    assert_eq!(parsed.source.as_deref(), Some("bounce@sender.example"));
    assert_eq!(parsed.data["from"], serde_json::Value::Null);
}
