//! The inbox envelope rule (docs/API.md §3): how a delivered HTTP request becomes an event,
//! losing nothing the sender sent.
//!
//! A body is JSON when its content type says JSON (`application/json`, `*/*+json`) and it parses,
//! or when there is no content type and it parses. A JSON body that declares another content
//! type (say `text/plain`) is kept as text, exactly as sent.
//!
//! A body is kept as parsed JSON only when that loses nothing (docs/API.md, "Inbox."): it nests
//! arrays and objects at most [`MAX_JSON_DEPTH`] deep, no object repeats a key, and every number
//! keeps its literal text when re-encoded. Any other body is kept as text, byte for byte, so that
//! every reader (REST, MCP, the CLI) can parse every page and nothing the sender sent is lost.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Map, Value};

use super::verification::{self, Verification};

/// Headers recorded with an HTTP event, to verify webhook signatures later: `user-agent` and
/// every verification scheme's headers (docs/API.md §3; verification/tests.rs checks that the
/// list holds each scheme's).
pub const RECORDED_HEADERS: &[&str] = &[
    "user-agent",
    // GitHub (and Meta's signature header)
    "x-github-event",
    "x-github-delivery",
    "x-hub-signature-256",
    // Stripe
    "stripe-signature",
    // Standard Webhooks
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    // Slack
    "x-slack-signature",
    "x-slack-request-timestamp",
    "x-slack-retry-num",
    "x-slack-retry-reason",
    // Zoom
    "x-zm-signature",
    "x-zm-request-timestamp",
    "x-zm-trackingid",
    // Shopify
    "x-shopify-hmac-sha256",
    "x-shopify-topic",
    "x-shopify-webhook-id",
    "x-shopify-event-id",
    "x-shopify-shop-domain",
    "x-shopify-api-version",
    "x-shopify-triggered-at",
    // Twilio
    "x-twilio-signature",
    "i-twilio-idempotency-token",
    // Linear
    "linear-signature",
    "linear-delivery",
    "linear-event",
];

pub const DEFAULT_TYPE: &str = "http.request";
const MAX_TYPE_CHARS: usize = 128;
const MAX_SOURCE_CHARS: usize = 200;

/// The deepest nesting of arrays and objects kept as JSON: an inbox body nested deeper is kept
/// as text, and a state value nested deeper is refused (docs/API.md, "Inbox." and "State.").
/// `[]` is depth 1, a scalar depth 0. A page wraps an event's data in 3 more levels, a
/// `state.updated` event adds 1, an MCP JSON-RPC answer adds 3 around the page and the CLI's
/// output a few: every reader stays far below serde_json's recursion limit of 128.
pub const MAX_JSON_DEPTH: usize = 64;

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

/// The member of the `http` record that holds a delivery's verification (docs/API.md §15): the
/// event shows it beside `http`, as `verification`.
pub const VERIFICATION_MEMBER: &str = "verification";

/// Applies the envelope rule. `headers` are (lower-case name, value) pairs as received; only the
/// allowlisted ones are recorded, repeated ones joined with `", "`.
pub fn from_delivery<'a>(
    content_type: Option<&str>, headers: impl IntoIterator<Item = (&'a str, &'a str)>, body: &[u8],
) -> Envelope {
    from_verified_delivery(content_type, headers, body, None)
}

/// [`from_delivery`] for an address that verifies its deliveries (docs/API.md §15): the `http`
/// record also holds `verification`'s record, as its [`VERIFICATION_MEMBER`].
pub fn from_verified_delivery<'a>(
    content_type: Option<&str>, headers: impl IntoIterator<Item = (&'a str, &'a str)>, body: &[u8],
    verification: Option<&Verification>,
) -> Envelope {
    let headers: Vec<(&str, &str)> = headers.into_iter().collect();
    let mut recorded: Map<String, Value> = Map::new();
    for (name, value) in headers.iter().copied() {
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
    let mut http = Map::new();
    http.insert("content_type".into(), json!(content_type));
    http.insert("headers".into(), Value::Object(recorded));
    if let Some(v) = verification {
        http.insert(VERIFICATION_MEMBER.into(), v.to_json());
    }
    let http = Value::Object(http).to_string();

    let json_body = match content_type {
        Some(ct) if !is_json_content_type(ct) => None,
        _ => lossless_json(body),
    };
    let (event_type, source, data) = match json_body {
        // A provider's delivery (not an envelope) is named by its provider (docs/API.md §3).
        Some(Value::Object(obj)) if !is_envelope(&obj) => {
            match verification::provider_event_type(&headers, Some(&obj)) {
                Some(named) => (named, None, Value::Object(obj)),
                None => envelope_of_object(obj),
            }
        }
        Some(Value::Object(obj)) => envelope_of_object(obj),
        Some(other) => (provider_or_default(&headers), None, other),
        None => (
            provider_or_default(&headers),
            None,
            raw_body(content_type, body),
        ),
    };
    Envelope {
        event_type,
        source,
        data: data.to_string(),
        http,
    }
}

/// `body` parsed as JSON when keeping it parsed loses nothing (docs/API.md, "Inbox."): it
/// parses, nests at most [`MAX_JSON_DEPTH`] deep, and its compact re-encoding has the same
/// tokens outside strings — so no object had a repeated key (the re-encoding would lose a
/// member) and every number kept its literal text (`1E5` would become `1e+5`). Strings are
/// compared by position only: `"\u00e9"` and `"é"` are the same string, not a loss.
/// Linear in the body's length, no recursion on the input.
pub fn lossless_json(body: &[u8]) -> Option<Value> {
    if nesting_exceeds(body, MAX_JSON_DEPTH) {
        return None;
    }
    let value: Value = serde_json::from_slice(body).ok()?;
    let compact = serde_json::to_vec(&value).ok()?;
    Lexer::new(body).eq(Lexer::new(&compact)).then_some(value)
}

/// Whether the arrays and objects of `text` (read lexically: any bytes) nest deeper than `max`.
pub fn nesting_exceeds(text: &[u8], max: usize) -> bool {
    let mut depth = 0usize;
    for token in Lexer::new(text) {
        match token {
            Token::Punct(b'{' | b'[') => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            Token::Punct(b'}' | b']') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// A JSON token, as far as losslessness goes: punctuation, a string (its content is not
/// compared: escapes may differ), or any other run (a number or literal, by its exact text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    Punct(u8),
    Str,
    Scalar(&'a [u8]),
}

/// A lexer over any bytes, JSON or not: whitespace is skipped, every step consumes at least one
/// byte, an unterminated string runs to the end.
struct Lexer<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Lexer<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }
}

impl<'a> Iterator for Lexer<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        let bytes = self.bytes;
        while matches!(bytes.get(self.pos), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
        let start = self.pos;
        let first = *bytes.get(start)?;
        let mut end = start + 1;
        let token = match first {
            b'"' => {
                while let Some(&b) = bytes.get(end) {
                    end += if b == b'\\' { 2 } else { 1 };
                    if b == b'"' {
                        break;
                    }
                }
                Token::Str
            }
            b'{' | b'}' | b'[' | b']' | b':' | b',' => Token::Punct(first),
            _ => {
                while bytes.get(end).is_some_and(|&b| is_scalar_byte(b)) {
                    end += 1;
                }
                Token::Scalar(bytes.get(start..end).unwrap_or_default())
            }
        };
        self.pos = end.min(bytes.len());
        Some(token)
    }
}

/// Bytes that continue a number or a literal (`-1.5e+3`, `true`).
fn is_scalar_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')
}

/// An envelope in the strict sense: a string `type` and no keys but `type`, `source`, `data`.
/// Its type is the sender's own and no provider renames it.
fn is_envelope(obj: &Map<String, Value>) -> bool {
    obj.get("type").is_some_and(Value::is_string)
        && obj
            .keys()
            .all(|k| matches!(k.as_str(), "type" | "source" | "data"))
}

/// A body that is no JSON object: named by the provider's header (GitHub, Shopify), else
/// [`DEFAULT_TYPE`].
fn provider_or_default(headers: &[(&str, &str)]) -> String {
    verification::provider_event_type(headers, None).unwrap_or_else(|| DEFAULT_TYPE.to_owned())
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

    /// `[[…[]…]]` nested `depth` deep.
    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    /// What a body kept as text reads back as.
    fn as_text(ct: Option<&str>, body: &str) -> Value {
        json!({"content_type": ct, "text": body})
    }

    #[test]
    fn depth_at_the_limit_is_json_one_over_is_text() {
        let at = nested(MAX_JSON_DEPTH);
        let (t, _, d) = env(JSON, at.as_bytes());
        assert_eq!(t, DEFAULT_TYPE);
        assert_eq!(d.to_string(), at);
        let over = nested(MAX_JSON_DEPTH + 1);
        assert_eq!(env(JSON, over.as_bytes()).2, as_text(JSON, &over));
        // Objects count too, and so does the envelope's own level.
        let obj_over = format!(r#"{{"type":"deep","data":{}}}"#, nested(MAX_JSON_DEPTH));
        let (t, _, d) = env(None, obj_over.as_bytes());
        assert_eq!((t.as_str(), d), (DEFAULT_TYPE, as_text(None, &obj_over)));
        let obj_at = format!(r#"{{"type":"deep","data":{}}}"#, nested(MAX_JSON_DEPTH - 1));
        let (t, _, d) = env(None, obj_at.as_bytes());
        assert_eq!(t, "deep");
        assert_eq!(d.to_string(), nested(MAX_JSON_DEPTH - 1));
    }

    #[test]
    fn the_poison_body_is_text_byte_for_byte() {
        for depth in [125, 127, 128, 129, 200, 5000] {
            let body = nested(depth);
            let e = from_delivery(JSON, [], body.as_bytes());
            assert_eq!(e.event_type, DEFAULT_TYPE);
            let d: Value = serde_json::from_str(&e.data).expect("data is JSON");
            assert_eq!(d["text"].as_str(), Some(body.as_str()), "depth {depth}");
            assert!(!nesting_exceeds(e.data.as_bytes(), 2), "depth {depth}");
        }
    }

    #[test]
    fn nesting_is_counted_outside_strings_only() {
        assert!(!nesting_exceeds(br#"["[[[[[[","{{{{"]"#, 1));
        assert!(!nesting_exceeds(br#"["\"[[[["]"#, 1));
        assert!(nesting_exceeds(b"[[", 1));
        assert!(!nesting_exceeds(b"[][][]", 1));
        assert!(!nesting_exceeds(b"", 0));
        assert!(!nesting_exceeds(br#""unterminated [[["#, 0));
    }

    #[test]
    fn duplicate_keys_are_text() {
        for body in [
            r#"{"a":1,"a":2}"#,
            r#"{"type":"x","type":"y"}"#,
            r#"{"type":"x","data":{"k":[{"z":1,"z":1}]}}"#,
            r#"[1,{"b":{"c":{"d":true,"d":true}}}]"#,
            r#"{"a":{},"a":{}}"#,
        ] {
            let (t, s, d) = env(JSON, body.as_bytes());
            assert_eq!((t.as_str(), s), (DEFAULT_TYPE, None), "{body}");
            assert_eq!(d, as_text(JSON, body), "{body}");
        }
        // Same key names at different places are not duplicates.
        let body = r#"{"a":{"a":1},"b":[{"a":2},{"a":3}]}"#;
        assert_eq!(env(JSON, body.as_bytes()).2.to_string(), body);
    }

    #[test]
    fn changed_number_notation_is_text() {
        for body in [
            r#"{"n":1E5}"#,
            "1E5",
            "[1e5,2E-3]",
            "1.0e10",
            "[0,-1.5e300]",
        ] {
            let e = from_delivery(JSON, [], body.as_bytes());
            let d: Value = serde_json::from_str(&e.data).expect("data is JSON");
            let kept_as_json = e.data == body;
            assert!(
                kept_as_json || d == as_text(JSON, body),
                "{body} became {}",
                e.data
            );
            assert!(!kept_as_json, "{body} was expected to change notation");
        }
    }

    #[test]
    fn every_kept_json_body_re_encodes_to_its_literals() {
        // Whatever serde_json keeps, a body kept as JSON has exactly the sender's number text.
        for body in [
            "1.0e10",
            "-0",
            "-0.0",
            "1e5",
            "1e-7",
            "0.1",
            "1.50",
            "123456789012345678901234567890",
            "-1.7976931348623157e309",
            "[1.0e10,-0,2.5E+3]",
        ] {
            let e = from_delivery(JSON, [], body.as_bytes());
            let d: Value = serde_json::from_str(&e.data).expect("data is JSON");
            assert!(
                e.data == body || d == as_text(JSON, body),
                "{body} became {}",
                e.data
            );
        }
        for body in [
            "-0",
            "-0.0",
            "1e+5",
            "1e-7",
            "[1.50,-1.7976931348623157e+309]",
            "12345678901234567890123456789.000",
        ] {
            assert_eq!(from_delivery(JSON, [], body.as_bytes()).data, body);
        }
    }

    #[test]
    fn escapes_and_whitespace_stay_json() {
        let body = "{ \"caf\\u00e9\" : \"\\u00e9\\/\\n\\\"\" ,\n \"list\": [ 1 , 2 ] }";
        let (t, _, d) = env(JSON, body.as_bytes());
        assert_eq!(t, DEFAULT_TYPE);
        assert_eq!(d, json!({"café": "é/\n\"", "list": [1, 2]}));
        let (t, _, d) = env(None, br#"{"type":"t\u0041","data":"\ud83d\ude00"}"#);
        assert_eq!((t.as_str(), d), ("tA", json!("😀")));
    }

    #[test]
    fn text_fallback_is_byte_for_byte() {
        let body = "{\"a\":1,\"a\":2}\r\n\t ";
        assert_eq!(env(JSON, body.as_bytes()).2, as_text(JSON, body));
        let mut bytes = br#"{"a":1,"a":"#.to_vec();
        bytes.extend_from_slice(&[0xff, b'}']);
        let (_, _, d) = env(JSON, &bytes);
        assert_eq!(d["base64"].as_str(), Some(STANDARD.encode(&bytes).as_str()));
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
