//! The inbox envelope rule (SPEC §3): how a delivered HTTP request becomes an event, losing
//! nothing the sender sent.
//!
//! A body is JSON when its content type says JSON (`application/json`, `*/*+json`) and it parses,
//! or when there is no content type and it parses. A JSON body that declares another content
//! type (say `text/plain`) is kept as text, exactly as sent.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Map, Value};

/// Headers recorded with an HTTP event, to verify webhook signatures later.
pub const RECORDED_HEADERS: &[&str] = &[
    "user-agent",
    "x-github-event",
    "x-github-delivery",
    "x-hub-signature-256",
    "stripe-signature",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
];

pub const DEFAULT_TYPE: &str = "http.request";
const MAX_TYPE_CHARS: usize = 128;
const MAX_SOURCE_CHARS: usize = 200;

/// What an inbox delivery becomes: the event's type, source, data (compact JSON text) and the
/// `http` record (compact JSON text).
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub event_type: String,
    pub source: Option<String>,
    pub data: String,
    pub http: String,
}

/// `true` for `application/json`, `application/*+json` and `text/json`, parameters ignored.
pub fn is_json_content_type(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence == "text/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Applies the envelope rule. `headers` are (lower-case name, value) pairs as received; only the
/// allowlisted ones are recorded, repeated ones joined with `", "`.
pub fn from_delivery<'a>(
    content_type: Option<&str>,
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    body: &[u8],
) -> Envelope {
    let mut recorded: Map<String, Value> = Map::new();
    for (name, value) in headers {
        let name = name.to_ascii_lowercase();
        if !RECORDED_HEADERS.contains(&name.as_str()) {
            continue;
        }
        match recorded.get_mut(&name) {
            Some(Value::String(existing)) => {
                existing.push_str(", ");
                existing.push_str(value);
            }
            _ => {
                recorded.insert(name, Value::String(value.to_owned()));
            }
        }
    }
    let http = json!({"content_type": content_type, "headers": recorded}).to_string();

    let json_body = match content_type {
        Some(ct) if !is_json_content_type(ct) => None,
        _ => serde_json::from_slice::<Value>(body).ok(),
    };
    let (event_type, source, data) = match json_body {
        Some(Value::Object(obj)) => envelope_of_object(obj),
        Some(other) => (DEFAULT_TYPE.to_owned(), None, other),
        None => (DEFAULT_TYPE.to_owned(), None, raw_body(content_type, body)),
    };
    Envelope {
        event_type,
        source,
        data: data.to_string(),
        http,
    }
}

fn envelope_of_object(mut obj: Map<String, Value>) -> (String, Option<String>, Value) {
    let event_type = match obj.get("type") {
        Some(Value::String(t)) if (1..=MAX_TYPE_CHARS).contains(&t.chars().count()) => t.clone(),
        _ => return (DEFAULT_TYPE.to_owned(), None, Value::Object(obj)),
    };
    let source = match obj.get("source") {
        None => Some(None),
        Some(Value::String(s)) if s.chars().count() <= MAX_SOURCE_CHARS => Some(Some(s.clone())),
        Some(_) => None,
    };
    let only_envelope_keys = obj
        .keys()
        .all(|k| matches!(k.as_str(), "type" | "source" | "data"));
    match source {
        Some(source) if only_envelope_keys => {
            let data = obj.remove("data").unwrap_or(Value::Null);
            (event_type, source, data)
        }
        Some(source) => (event_type, source, Value::Object(obj)),
        None => (event_type, None, Value::Object(obj)),
    }
}

fn raw_body(content_type: Option<&str>, body: &[u8]) -> Value {
    match std::str::from_utf8(body) {
        Ok(text) => json!({"content_type": content_type, "text": text}),
        Err(_) => json!({"content_type": content_type, "base64": STANDARD.encode(body)}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(ct: Option<&str>, body: &[u8]) -> (String, Option<String>, Value) {
        let e = from_delivery(ct, [], body);
        (
            e.event_type,
            e.source,
            serde_json::from_str(&e.data).expect("data is JSON"),
        )
    }

    const JSON: Option<&str> = Some("application/json");

    #[test]
    fn envelope_with_only_envelope_keys_unwraps_data() {
        let (t, s, d) = env(
            JSON,
            br#"{"type":"demo.callback","source":"ci","data":{"ok":true}}"#,
        );
        assert_eq!(t, "demo.callback");
        assert_eq!(s.as_deref(), Some("ci"));
        assert_eq!(d, json!({"ok": true}));
        let (t, s, d) = env(JSON, br#"{"type":"x"}"#);
        assert_eq!((t.as_str(), s, d), ("x", None, Value::Null));
    }

    #[test]
    fn extra_keys_keep_the_whole_body() {
        let body = br#"{"type":"push","source":"gh","data":1,"ref":"main"}"#;
        let (t, s, d) = env(JSON, body);
        assert_eq!(t, "push");
        assert_eq!(s.as_deref(), Some("gh"));
        assert_eq!(d, serde_json::from_slice::<Value>(body).expect("json"));
    }

    #[test]
    fn invalid_type_or_source_keeps_everything() {
        for body in [
            &br#"{"type":"","data":1}"#[..],
            br#"{"type":5,"data":1}"#,
            br#"{"source":"x","data":1}"#,
        ] {
            let (t, s, d) = env(JSON, body);
            assert_eq!(t, DEFAULT_TYPE);
            assert_eq!(s, None);
            assert_eq!(d, serde_json::from_slice::<Value>(body).expect("json"));
        }
        let long_type = format!(r#"{{"type":"{}"}}"#, "t".repeat(129));
        assert_eq!(env(JSON, long_type.as_bytes()).0, DEFAULT_TYPE);
        let body = format!(r#"{{"type":"ok","source":"{}","data":1}}"#, "s".repeat(201));
        let (t, s, d) = env(JSON, body.as_bytes());
        assert_eq!((t.as_str(), s), ("ok", None));
        assert_eq!(d["source"].as_str().map(str::len), Some(201));
        let (t, s, d) = env(JSON, br#"{"type":"ok","source":7,"data":1}"#);
        assert_eq!((t.as_str(), s), ("ok", None));
        assert_eq!(d, json!({"type":"ok","source":7,"data":1}));
    }

    #[test]
    fn non_object_json_and_text_and_binary() {
        assert_eq!(
            env(JSON, b"[1,2]"),
            (DEFAULT_TYPE.into(), None, json!([1, 2]))
        );
        assert_eq!(env(None, b"42"), (DEFAULT_TYPE.into(), None, json!(42)));
        let (_, _, d) = env(Some("text/plain"), br#"{"type":"x"}"#);
        assert_eq!(
            d,
            json!({"content_type": "text/plain", "text": "{\"type\":\"x\"}"})
        );
        let (_, _, d) = env(JSON, b"{broken");
        assert_eq!(
            d,
            json!({"content_type": "application/json", "text": "{broken"})
        );
        let (_, _, d) = env(None, b"");
        assert_eq!(d, json!({"content_type": null, "text": ""}));
        let (_, _, d) = env(Some("application/octet-stream"), &[0xff, 0x00, 0x01]);
        assert_eq!(
            d,
            json!({"content_type": "application/octet-stream", "base64": "/wAB"})
        );
    }

    #[test]
    fn big_numbers_and_key_order_survive() {
        let body = br#"{"z":12345678901234567890123456789,"a":1.50}"#;
        let e = from_delivery(JSON, [], body);
        assert_eq!(e.data, r#"{"z":12345678901234567890123456789,"a":1.50}"#);
    }

    #[test]
    fn records_only_allowlisted_headers() {
        let e = from_delivery(
            Some("application/json; charset=utf-8"),
            [
                ("User-Agent", "GitHub-Hookshot/1"),
                ("x-github-event", "push"),
                ("authorization", "Bearer secret"),
                ("cookie", "c=1"),
                ("webhook-signature", "v1,a"),
                ("webhook-signature", "v1,b"),
            ],
            b"{}",
        );
        let http: Value = serde_json::from_str(&e.http).expect("json");
        assert_eq!(http["content_type"], "application/json; charset=utf-8");
        assert_eq!(http["headers"]["user-agent"], "GitHub-Hookshot/1");
        assert_eq!(http["headers"]["x-github-event"], "push");
        assert_eq!(http["headers"]["webhook-signature"], "v1,a, v1,b");
        assert!(http["headers"].get("authorization").is_none());
        assert!(!e.http.contains("secret"));
    }

    #[test]
    fn json_content_types() {
        assert!(is_json_content_type("application/json"));
        assert!(is_json_content_type("Application/JSON; charset=utf-8"));
        assert!(is_json_content_type("application/cloudevents+json"));
        assert!(!is_json_content_type("text/plain"));
        assert!(!is_json_content_type("application/x-www-form-urlencoded"));
    }
}
