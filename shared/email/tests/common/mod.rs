//! Helpers shared by the integration tests.
#![allow(dead_code)]

use agentaddress_email::{
    parse_message, AuthResults, EmailLimits, Envelope, ParsedEmail, Provider, Refusal,
};
use serde_json::Value;

pub fn envelope() -> Envelope {
    Envelope {
        mail_from: "bounce@sender.example".into(),
        rcpt_to: vec!["addr_abc@inbox.example".into()],
    }
}

pub fn corpus(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/corpus/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn parse_with(raw: &[u8], limits: &EmailLimits) -> Result<ParsedEmail, Refusal> {
    parse_message(
        raw,
        &envelope(),
        None,
        Provider::Smtp,
        AuthResults::default(),
        None,
        limits,
    )
}

pub fn parse(raw: &[u8]) -> Result<ParsedEmail, Refusal> {
    parse_with(raw, &EmailLimits::default())
}

/// Parses a corpus file that must be accepted; checks the contract's shape and returns `data`.
pub fn accept(name: &str) -> Value {
    let parsed = parse(&corpus(name)).unwrap_or_else(|e| panic!("{name}: refused: {e:?}"));
    check_shape(&parsed, EmailLimits::default().max_data_bytes);
    parsed.data
}

/// Every key of the contract, in order; `data` within the limit; `email_id` a valid id.
pub fn check_shape(parsed: &ParsedEmail, limit: usize) {
    let obj = parsed.data.as_object().expect("data is an object");
    let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    assert_eq!(keys, agentaddress_email::DATA_KEYS);
    let len = serde_json::to_vec(&parsed.data)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    assert!(len <= limit, "data is {len} bytes, over {limit}");
    assert_eq!(obj["email_id"], parsed.email_id.as_str());
    // reply_text: null exactly when text is; never longer than text.
    match (&obj["text"], &obj["reply_text"]) {
        (Value::Null, Value::Null) => {}
        (Value::String(text), Value::String(reply)) => assert!(
            reply.len() <= text.len(),
            "reply_text ({} bytes) longer than text ({} bytes)",
            reply.len(),
            text.len()
        ),
        (text, reply) => panic!("text {text} with reply_text {reply}"),
    }
    assert!(obj["auto_reply"].is_boolean(), "{}", obj["auto_reply"]);
    assert!(agentaddress_core::domain::ids::is_valid_id(
        &parsed.email_id
    ));
    for a in obj["attachments"].as_array().expect("attachments") {
        let name = a["filename"].as_str().expect("filename");
        assert!(!name.is_empty() && !name.contains(['/', '\\']));
        assert!(!name.chars().any(char::is_control));
    }
}
