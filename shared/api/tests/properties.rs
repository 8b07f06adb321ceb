//! Property tests (proptest) of the rules a hostile sender or reader controls the input of:
//! the inbox envelope rule (docs/API.md §3), state key and id validation, state size
//! accounting and its 413 / 409 boundary (docs/API.md §7), and the feed's query parsing
//! (docs/API.md §4). Each property is checked against an oracle written from the contract, on
//! generated inputs that include garbage; a failure is shrunk to a minimal counterexample by
//! proptest.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use agentaddress_api::extract::{
    expected_revision, optional_integer, parse_count, parse_feed_query,
};
use agentaddress_api::{self as api, ApiConfig, ApiError, AppState};
use agentaddress_core::domain::envelope::{from_delivery, DEFAULT_TYPE, RECORDED_HEADERS};
use agentaddress_core::domain::ids::is_valid_id;
use agentaddress_core::domain::limits::STATE_KEY_OVERHEAD;
use agentaddress_core::domain::state::{entry_size, validate_key};
use agentaddress_core::domain::Limits;
use agentaddress_sqlite::SqliteStore;
use axum::body::Body;
use axum::Router;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use http::{header, HeaderMap, HeaderValue, Method, Request, StatusCode};
use http_body_util::BodyExt;
use proptest::prelude::*;
use regex::Regex;
use serde_json::{json, Map, Value};
use tower::ServiceExt;

// ---------------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------------

/// Any JSON value: nested arrays and objects of strings (any Unicode), integers, floats,
/// booleans and nulls.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1.0e15f64..1.0e15).prop_map(|f| json!(f)),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec(("\\PC{0,6}", inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// A string of exactly `n` characters, mixing ASCII and multi-byte ones (so byte length and
/// character count differ).
fn chars(range: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![Just('t'), Just('é'), Just('日'), Just('🙂')],
        range,
    )
    .prop_map(|v| v.into_iter().collect())
}

/// A value for `type`: valid (1..128 characters), empty, too long, or not a string; the edges
/// (128, 129) often.
fn type_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => chars(1..=128).prop_map(Value::String),
        1 => chars(128..=128).prop_map(Value::String),
        1 => Just(Value::String(String::new())),
        1 => chars(129..=129).prop_map(Value::String),
        1 => chars(130..=140).prop_map(Value::String),
        1 => json_value().prop_filter("not a string", |v| !v.is_string()),
    ]
}

/// A value for `source`: valid (0..200 characters), too long, or not a string; the edges (200,
/// 201) often.
fn source_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => chars(0..=200).prop_map(Value::String),
        1 => chars(200..=200).prop_map(Value::String),
        1 => chars(201..=201).prop_map(Value::String),
        1 => chars(202..=210).prop_map(Value::String),
        1 => json_value().prop_filter("not a string", |v| !v.is_string()),
    ]
}

/// A JSON object body shaped like an envelope or not: `type`, `source`, `data` each present or
/// not, sometimes other keys, in a random order.
fn envelope_body() -> impl Strategy<Value = Map<String, Value>> {
    (
        prop::option::of(type_value()),
        prop::option::of(source_value()),
        prop::option::of(json_value()),
        prop::collection::vec(("[a-z_]{1,8}", json_value()), 0..3),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(t, s, d, extra, rotate)| {
            let mut pairs: Vec<(String, Value)> = Vec::new();
            if let Some(t) = t {
                pairs.push(("type".into(), t));
            }
            if let Some(s) = s {
                pairs.push(("source".into(), s));
            }
            if let Some(d) = d {
                pairs.push(("data".into(), d));
            }
            pairs.extend(extra);
            if !pairs.is_empty() {
                let n = rotate.index(pairs.len());
                pairs.rotate_left(n);
            }
            pairs.into_iter().collect()
        })
}

fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| panic!("serialize {v:?}: {e}"))
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

// ---------------------------------------------------------------------------------------------
// The envelope rule (docs/API.md §3)
// ---------------------------------------------------------------------------------------------

/// The rule as docs/API.md §3 states it: (type, source, data, whether the body was unwrapped).
fn envelope_oracle(body: &Map<String, Value>) -> (String, Option<String>, Value, bool) {
    let whole = Value::Object(body.clone());
    let event_type = match body.get("type") {
        Some(Value::String(t)) if (1..=128).contains(&t.chars().count()) => t.clone(),
        _ => return (DEFAULT_TYPE.into(), None, whole, false),
    };
    let source = match body.get("source") {
        None => None,
        Some(Value::String(s)) if s.chars().count() <= 200 => Some(s.clone()),
        // An invalid source is not taken, and keeps the whole body (docs/API.md).
        Some(_) => return (event_type, None, whole, false),
    };
    let only_envelope_keys = body
        .keys()
        .all(|k| matches!(k.as_str(), "type" | "source" | "data"));
    if only_envelope_keys {
        let data = body.get("data").cloned().unwrap_or(Value::Null);
        (event_type, source, data, true)
    } else {
        (event_type, source, whole, false)
    }
}

const JSON_TYPES: [Option<&str>; 4] = [
    None,
    Some("application/json"),
    Some("application/json; charset=utf-8"),
    Some("application/cloudevents+json"),
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A JSON object body: type, source and data as the rule says, byte for byte, and nothing
    /// is lost: the body is rebuilt from the event (with an absent `data` read as `null`).
    #[test]
    fn envelope_of_json_objects(body in envelope_body(), ct in prop::sample::select(&JSON_TYPES[..])) {
        let text = compact(&Value::Object(body.clone()));
        let e = from_delivery(ct, [], text.as_bytes());
        let (t, s, d, unwrapped) = envelope_oracle(&body);
        prop_assert_eq!(&e.event_type, &t);
        prop_assert_eq!(&e.source, &s);
        // Exact text: key order and number spelling are kept.
        prop_assert_eq!(&e.data, &compact(&d));
        let data = parse(&e.data);
        let rebuilt = if unwrapped {
            let mut m = Map::new();
            m.insert("type".into(), Value::String(e.event_type.clone()));
            if let Some(s) = &e.source {
                m.insert("source".into(), Value::String(s.clone()));
            }
            m.insert("data".into(), data);
            m
        } else {
            match data {
                Value::Object(m) => m,
                other => return Err(TestCaseError::fail(format!("whole body kept as {other}"))),
            }
        };
        let mut expected = body.clone();
        if unwrapped {
            expected.entry("data").or_insert(Value::Null);
        }
        // Compared as sets of keys: an unwrapped body is rebuilt in the canonical key order.
        let sorted = |m: &Map<String, Value>| m.iter().map(|(k, v)| (k.clone(), compact(v))).collect::<BTreeMap<_, _>>();
        prop_assert_eq!(sorted(&rebuilt), sorted(&expected));
        let http = parse(&e.http);
        prop_assert_eq!(&http["content_type"], &json!(ct));
    }

    /// Any other JSON body (array, number, string, …) is the event's data, typed `http.request`.
    #[test]
    fn envelope_of_other_json(v in json_value().prop_filter("not an object", |v| !v.is_object()),
                              ct in prop::sample::select(&JSON_TYPES[..])) {
        let text = compact(&v);
        let e = from_delivery(ct, [], text.as_bytes());
        prop_assert_eq!(e.event_type.as_str(), DEFAULT_TYPE);
        prop_assert_eq!(e.source, None);
        prop_assert_eq!(e.data, text);
    }

    /// A body that is not JSON (or not declared JSON): kept exactly, as UTF-8 text or base64.
    #[test]
    fn envelope_of_raw_bodies(
        body in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..256),
            "\\PC{0,64}".prop_map(String::into_bytes),
            json_value().prop_map(|v| compact(&v).into_bytes()),
        ],
        ct in prop::sample::select(&[None, Some("text/plain"), Some("application/octet-stream"),
                                     Some("application/x-www-form-urlencoded"), Some("application/json"),
                                     Some("image/png; q=1")][..]),
    ) {
        let e = from_delivery(ct, [], &body);
        let declared_json = ct.is_none_or(|c| c.starts_with("application/json"));
        if declared_json {
            if let Ok(parsed) = serde_json::from_slice::<Value>(&body) {
                // JSON it is: the envelope rule applies, not the raw form.
                let want = match &parsed {
                    Value::Object(m) => envelope_oracle(m).2,
                    other => other.clone(),
                };
                prop_assert_eq!(parse(&e.data), want);
                return Ok(());
            }
        }
        prop_assert_eq!(e.event_type.as_str(), DEFAULT_TYPE);
        prop_assert_eq!(e.source, None);
        let data = parse(&e.data);
        prop_assert_eq!(&data["content_type"], &json!(ct));
        let obj = data.as_object().ok_or_else(|| TestCaseError::fail("data is an object"))?;
        prop_assert_eq!(obj.len(), 2, "content_type and one of text/base64: {}", e.data);
        match std::str::from_utf8(&body) {
            Ok(text) => prop_assert_eq!(data["text"].as_str(), Some(text)),
            Err(_) => {
                let b64 = data["base64"].as_str().ok_or_else(|| TestCaseError::fail("base64 present"))?;
                prop_assert_eq!(STANDARD.decode(b64).ok(), Some(body.clone()));
            }
        }
    }

    /// Only allowlisted headers are recorded, all of them, repeated ones joined in order; a
    /// secret in any other header (Authorization, Cookie, …) never reaches the event.
    #[test]
    fn envelope_records_only_allowlisted_headers(
        headers in prop::collection::vec(
            (prop_oneof![
                prop::sample::select(RECORDED_HEADERS).prop_map(str::to_owned),
                prop::sample::select(RECORDED_HEADERS).prop_map(|h| h.to_ascii_uppercase()),
                Just("authorization".to_owned()), Just("cookie".to_owned()),
                Just("x-api-key".to_owned()), "x-[a-z]{1,10}",
            ], "[ -~]{0,20}"),
            0..12),
        secret in "[0-9a-f]{40}",
    ) {
        let mut pairs: Vec<(String, String)> = headers.clone();
        pairs.push(("authorization".into(), format!("Bearer {secret}")));
        pairs.push(("cookie".into(), format!("session={secret}")));
        let e = from_delivery(Some("application/json"), pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())), b"{}");
        prop_assert!(!e.http.contains(&secret), "a secret leaked into the event: {}", e.http);
        let http = parse(&e.http);
        let recorded = http["headers"].as_object().ok_or_else(|| TestCaseError::fail("headers object"))?;
        let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (k, v) in &pairs {
            let k = k.to_ascii_lowercase();
            if RECORDED_HEADERS.contains(&k.as_str()) {
                expected.entry(k).or_default().push(v.clone());
            }
        }
        prop_assert_eq!(recorded.len(), expected.len());
        for (k, vs) in expected {
            let joined = vs.join(", ");
            prop_assert_eq!(recorded.get(&k).and_then(Value::as_str), Some(joined.as_str()));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Keys and ids (docs/API.md §0, §7)
// ---------------------------------------------------------------------------------------------

static KEY_ORACLE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9._:-]{1,128}$").expect("regex"));

static ID_ORACLE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9_-]{1,64}$").expect("regex"));

/// Strings near the key and id alphabets and lengths, and arbitrary Unicode.
fn candidate_key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9._:-]{0,140}",
        "[.]{0,130}",
        "[A-Za-z0-9_-]{0,70}",
        "[A-Za-z0-9._:/ %+*#?-]{0,20}",
        "[A-Za-z0-9]{0,126}[^A-Za-z0-9._:-][a-z]{0,2}",
        "\\PC{0,130}",
        ".{0,8}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn state_keys_match_the_regex(key in candidate_key()) {
        // Keys of dots only (`.`, `..`) are refused: URL normalisers rewrite them (docs/API.md).
        let oracle = KEY_ORACLE.is_match(&key) && !key.bytes().all(|b| b == b'.');
        prop_assert_eq!(validate_key(&key).is_ok(), oracle, "{:?}", key);
    }

    #[test]
    fn ids_match_the_regex(id in candidate_key()) {
        prop_assert_eq!(is_valid_id(&id), ID_ORACLE.is_match(&id), "{:?}", id);
    }
}

// ---------------------------------------------------------------------------------------------
// State size accounting (docs/API.md §7)
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Size of a key = UTF-8 bytes of the key + bytes of the value's compact JSON + 64.
    #[test]
    fn entry_size_is_key_plus_compact_json_plus_64(key in "[A-Za-z0-9._:-]{1,128}", value in json_value()) {
        let text = compact(&value);
        prop_assert_eq!(STATE_KEY_OVERHEAD, 64);
        prop_assert_eq!(entry_size(&key, &text), (key.len() + text.len()) as u64 + 64);
        // Pretty-printed input costs the same: the compact form is what is counted.
        let pretty = serde_json::to_string_pretty(&value).unwrap_or_default();
        prop_assert_eq!(compact(&parse(&pretty)), text);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Integer fields (`expires_in_seconds`, `if_revision`) take a JSON number whose value is a
    /// non-negative integer however it is spelled (`60`, `60.00`, `6.0e1`, `600e-1`), exactly
    /// (no rounding through floats), and refuse a fraction or a negative value.
    #[test]
    fn integer_fields_read_any_spelling_exactly(n in prop_oneof![any::<u64>(), 0u64..1000, Just(u64::MAX)],
                                                zeros in 1usize..4, frac in 1u32..1000, shift in 0usize..5) {
        let read = |text: &str| {
            let obj: Map<String, Value> = serde_json::from_str(&format!("{{\"f\":{text}}}"))
                .unwrap_or_else(|e| panic!("{text}: {e}"));
            optional_integer(&obj, "f", 0..=u64::MAX)
        };
        let digits = n.to_string();
        let mut spellings = vec![
            digits.clone(),
            format!("{digits}.{}", "0".repeat(zeros)),
            format!("{}.{}0E+{}", &digits[..1], &digits[1..], digits.len() - 1),
        ];
        if digits.len() > 1 {
            spellings.push(format!("{}.{}e{}", &digits[..1], &digits[1..], digits.len() - 1));
        }
        if n > 0 {
            spellings.push(format!("{digits}{}e-{shift}", "0".repeat(shift)));
        }
        for text in &spellings {
            prop_assert_eq!(read(text), Ok(Some(n)), "{}", text);
        }
        let fractional = format!("{digits}.{frac}");
        let refused = read(&fractional).is_err();
        prop_assert!(refused, "{} is not an integer", fractional);
        if n > 0 {
            let negative = format!("-{digits}");
            let refused = read(&negative).is_err();
            prop_assert!(refused, "{} is negative", negative);
            // n / 10^len(n) is a fraction below 1 (unless n is 0).
            let shifted = format!("{digits}e-{}", digits.len());
            let refused = read(&shifted).is_err();
            prop_assert!(refused, "{} is not an integer", shifted);
        }
        prop_assert_eq!(read("null"), Ok(None));
    }
}

/// A tiny runtime for driving the router from synchronous proptest bodies.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

struct App {
    router: Router,
    root: String,
    token: String,
    inbox: String,
}

async fn send(router: &Router, req: Request<Body>) -> (StatusCode, HeaderMap, Value) {
    let response = router
        .clone()
        .oneshot(req)
        .await
        .expect("the router never fails");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("read body")
        .to_bytes();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, headers, json)
}

fn request(method: Method, uri: &str, token: Option<&str>, body: Option<&Value>) -> Request<Body> {
    let mut b = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        b = b.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let body = match body {
        Some(v) => {
            b = b.header(header::CONTENT_TYPE, "application/json");
            Body::from(compact(v))
        }
        None => Body::empty(),
    };
    b.body(body)
        .unwrap_or_else(|e| panic!("request {uri}: {e}"))
}

/// A fresh in-memory service with one address.
async fn app(limits: Limits) -> App {
    let store = SqliteStore::open_in_memory().expect("sqlite");
    let config = ApiConfig {
        public_url: Some("http://agentaddress.test".into()),
        email_domain: "inbox.test".into(),
        limits,
        email_ingest_secret_hash: None,
        poll_checks: Default::default(),
        max_waiting_polls: 0,
    };
    let router = api::router(AppState::new(Arc::new(store), config));
    let (status, _, created) = send(
        &router,
        request(Method::POST, "/api/v1/addresses", None, None),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let s = |p: &str| {
        created
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{p} in {created}"))
            .to_owned()
    };
    let strip = |url: String| {
        url.trim_start_matches("http://agentaddress.test")
            .to_owned()
    };
    App {
        root: format!("/api/v1/addresses/{}", s("/address/id")),
        token: s("/credentials/read_token"),
        inbox: strip(s("/endpoints/inbox_url")),
        router,
    }
}

const STATE_LIMITS: (u64, u64) = (4, 600);

fn state_limits() -> Limits {
    Limits {
        max_state_keys: STATE_LIMITS.0,
        max_state_bytes: STATE_LIMITS.1,
        max_retained_events: 100_000,
        ..Limits::default()
    }
}

const KEYS: [&str; 6] = [
    "a",
    "bb",
    "key.3",
    "k:4-x",
    "fifth_key",
    "a-much-longer-key.name:6",
];

#[derive(Debug, Clone)]
enum StateOp {
    /// PUT a string of `len` bytes (its compact JSON is `len + 2` bytes).
    Put {
        key: usize,
        len: usize,
    },
    Delete {
        key: usize,
    },
}

fn state_op() -> impl Strategy<Value = StateOp> {
    prop_oneof![
        // Small values, values around the 413 boundary for the shortest keys (600 − 64 − 2 −
        // key), and values that fill a good part of the budget.
        3 => (0..KEYS.len(), 0usize..40).prop_map(|(key, len)| StateOp::Put { key, len }),
        2 => (0..KEYS.len(), 500usize..540).prop_map(|(key, len)| StateOp::Put { key, len }),
        3 => (0..KEYS.len(), 100usize..300).prop_map(|(key, len)| StateOp::Put { key, len }),
        2 => (0..KEYS.len()).prop_map(|key| StateOp::Delete { key }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A model of the state budget against the real router: each PUT is 200, 413 (this value
    /// can never fit) or 409 `state_limit_exceeded` (the sum or the key count would break)
    /// exactly as the model says, and `GET state` reports the model's sizes and totals.
    #[test]
    fn state_budget_matches_the_model(ops in prop::collection::vec(state_op(), 1..24)) {
        let rt = runtime();
        rt.block_on(async {
            let a = app(state_limits()).await;
            let (max_keys, max_bytes) = STATE_LIMITS;
            let mut model: BTreeMap<&str, u64> = BTreeMap::new();
            for op in &ops {
                match *op {
                    StateOp::Put { key, len } => {
                        let k = KEYS[key];
                        let value = Value::String("x".repeat(len));
                        let size = k.len() as u64 + len as u64 + 2 + 64;
                        let total: u64 = model.values().sum::<u64>() - model.get(k).copied().unwrap_or(0) + size;
                        let count = model.len() as u64 + u64::from(!model.contains_key(k));
                        let (status, _, body) = send(&a.router, request(Method::PUT, &format!("{}/state/{k}", a.root),
                            Some(&a.token), Some(&json!({"value": value})))).await;
                        if size > max_bytes {
                            prop_assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{:?}: {}", op, body);
                            prop_assert_eq!(&body["error"]["code"], "payload_too_large");
                        } else if total > max_bytes || count > max_keys {
                            prop_assert_eq!(status, StatusCode::CONFLICT, "{:?} (model {:?}): {}", op, model, body);
                            prop_assert_eq!(&body["error"]["code"], "state_limit_exceeded");
                        } else {
                            prop_assert_eq!(status, StatusCode::OK, "{:?} (model {:?}): {}", op, model, body);
                            model.insert(k, size);
                        }
                    }
                    StateOp::Delete { key } => {
                        let k = KEYS[key];
                        let (status, _, body) = send(&a.router, request(Method::DELETE, &format!("{}/state/{k}", a.root),
                            Some(&a.token), None)).await;
                        if model.remove(k).is_some() {
                            prop_assert_eq!(status, StatusCode::OK, "{}", body);
                        } else {
                            prop_assert_eq!(status, StatusCode::NOT_FOUND, "{}", body);
                        }
                    }
                }
            }
            let (status, _, listing) = send(&a.router, request(Method::GET, &format!("{}/state", a.root), Some(&a.token), None)).await;
            prop_assert_eq!(status, StatusCode::OK);
            prop_assert_eq!(listing["state_bytes"].as_u64(), Some(model.values().sum::<u64>()));
            prop_assert_eq!(listing["state_keys"].as_u64(), Some(model.len() as u64));
            let reported: BTreeMap<String, u64> = listing["keys"].as_array().into_iter().flatten()
                .filter_map(|k| Some((k["key"].as_str()?.to_owned(), k["size"].as_u64()?)))
                .collect();
            let modelled: BTreeMap<String, u64> = model.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect();
            prop_assert_eq!(reported, modelled);
            Ok::<(), TestCaseError>(())
        })?;
    }
}

/// The exact edges: a value that fills the budget to the byte is accepted, one byte more is
/// 413 alone and 409 next to another key.
#[test]
fn state_budget_edges() {
    runtime().block_on(async {
        let a = app(state_limits()).await;
        let (_, max_bytes) = STATE_LIMITS;
        let put = |k: &str, len: usize| {
            request(
                Method::PUT,
                &format!("{}/state/{k}", a.root),
                Some(&a.token),
                Some(&json!({"value": "x".repeat(len)})),
            )
        };
        // "a": 1 + (len + 2) + 64 = 600 → len = 533.
        let fits = (max_bytes - 64 - 1 - 2) as usize;
        let (s, _, b) = send(&a.router, put("a", fits + 1)).await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "{b}");
        let (s, _, b) = send(&a.router, put("a", fits)).await;
        assert_eq!(s, StatusCode::OK, "exactly the budget fits: {b}");
        let (s, _, b) = send(&a.router, put("bb", 0)).await;
        assert_eq!(s, StatusCode::CONFLICT, "{b}");
        assert_eq!(b["error"]["code"], "state_limit_exceeded");
        // Shrink "a" by 70 bytes: "bb" with an empty string costs 2 + 2 + 64 = 68 and fits.
        let (s, _, b) = send(&a.router, put("a", fits - 70)).await;
        assert_eq!(s, StatusCode::OK, "{b}");
        let (s, _, b) = send(&a.router, put("bb", 0)).await;
        assert_eq!(s, StatusCode::OK, "{b}");
        let (s, _, b) = send(&a.router, put("bb", 3)).await;
        assert_eq!(s, StatusCode::CONFLICT, "one byte over the sum: {b}");
        let (s, _, b) = send(&a.router, put("bb", 2)).await;
        assert_eq!(s, StatusCode::OK, "exactly the sum: {b}");
    });
}

// ---------------------------------------------------------------------------------------------
// Feed query parsing (docs/API.md §4)
// ---------------------------------------------------------------------------------------------

fn is_400(e: &ApiError) -> bool {
    e.status() == StatusCode::BAD_REQUEST && e.code() == "invalid_request"
}

/// A query value: a number in or out of range, a decimal, garbage, or empty.
fn query_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        (0u64..200).prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        (0.0f64..100.0).prop_map(|f| f.to_string()),
        any::<f64>().prop_map(|f| f.to_string()),
        (0.0f64..1000.0).prop_map(|f| format!("{f:e}")),
        "[0-9.eE+-]{0,8}",
        "\\PC{0,8}",
        Just(String::new()),
        Just("9223372036854775807".to_owned()),
        Just("9223372036854775808".to_owned()),
    ]
}

/// `after`: a non-negative integer up to 2^63 − 1.
fn after_oracle(v: &str) -> Option<u64> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse::<u64>().ok().filter(|n| *n <= i64::MAX as u64)
}

/// `wait`: a finite non-negative decimal number, clamped to the longest wait.
fn wait_oracle(v: &str, max: u64) -> Option<Duration> {
    let chars_ok = !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_digit() || b"eE.+-".contains(&b));
    let w = v
        .parse::<f64>()
        .ok()
        .filter(|w| chars_ok && w.is_finite() && *w >= 0.0)?;
    Some(Duration::from_secs_f64(w.min(max as f64)))
}

fn encode(v: &str) -> String {
    form_urlencoded::byte_serialize(v.as_bytes()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Each parameter alone: accepted exactly when the oracle accepts it, with the oracle's
    /// value; `wait` is clamped to the longest wait (25 s by default); refusals are 400
    /// `invalid_request`.
    #[test]
    fn feed_query_parameters(after in prop::option::of(query_value()), limit in prop::option::of(query_value()),
                             wait in prop::option::of(query_value()), max_wait in prop_oneof![Just(25u64), 0u64..=25]) {
        let mut parts = Vec::new();
        if let Some(v) = &after { parts.push(format!("after={}", encode(v))); }
        if let Some(v) = &limit { parts.push(format!("limit={}", encode(v))); }
        if let Some(v) = &wait { parts.push(format!("wait={}", encode(v))); }
        let query = parts.join("&");
        let got = parse_feed_query(Some(&query), max_wait);
        let want_after = after.as_deref().map_or(Some(0), after_oracle);
        let want_limit = limit.as_deref().map_or(Some(100), |v| after_oracle(v).filter(|n| (1..=100).contains(n)));
        let want_wait = wait.as_deref().map_or(Some(Duration::ZERO), |v| wait_oracle(v, max_wait));
        match (want_after, want_limit, want_wait) {
            (Some(a), Some(l), Some(w)) => {
                let q = got.map_err(|e| TestCaseError::fail(format!("{query:?} refused: {e}")))?;
                prop_assert_eq!(q.after, a);
                prop_assert_eq!(q.limit as u64, l);
                prop_assert_eq!(q.wait, w);
                prop_assert!(q.wait <= Duration::from_secs(25));
            }
            _ => {
                let e = got.err().ok_or_else(|| TestCaseError::fail(format!("{query:?} accepted")))?;
                prop_assert!(is_400(&e), "{:?}: {:?}", query, e);
            }
        }
    }

    /// Any query string at all: never a panic; either parsed or a 400.
    #[test]
    fn feed_query_garbage_never_panics(query in prop_oneof!["\\PC{0,60}", "[a-z=&%0-9.+-]{0,60}",
                                                           "(after|limit|wait)=[^&]{0,10}(&(after|limit|wait)=[^&]{0,10}){0,3}"]) {
        match parse_feed_query(Some(&query), 25) {
            Ok(q) => {
                prop_assert!((1..=100).contains(&q.limit));
                prop_assert!(q.after <= i64::MAX as u64);
                prop_assert!(q.wait <= Duration::from_secs(25));
            }
            Err(e) => prop_assert!(is_400(&e), "{:?}: {:?}", query, e),
        }
    }

    /// A parameter given twice is refused, whatever the values.
    #[test]
    fn feed_query_repeated_parameters(name in prop::sample::select(&["after", "limit", "wait"][..]),
                                      a in "[0-9]{1,3}", b in "[0-9]{1,3}") {
        let e = parse_feed_query(Some(&format!("{name}={a}&{name}={b}")), 25).err();
        prop_assert!(e.as_ref().is_some_and(is_400), "{:?}", e);
    }

    /// `parse_count` (after, limit, if_revision) against its oracle.
    #[test]
    fn counts(v in query_value()) {
        prop_assert_eq!(parse_count(&v), after_oracle(&v));
    }

    /// `If-Match` is `N` or `"N"`; it must agree with `if_revision`; anything else is a 400.
    #[test]
    fn if_match(raw in prop_oneof![query_value(), query_value().prop_map(|v| format!("\"{v}\"")), "[ -~]{0,12}"],
                from_body in prop::option::of(0u64..20)) {
        let Ok(value) = HeaderValue::from_str(&raw) else { return Ok(()) };
        let mut headers = HeaderMap::new();
        headers.insert(header::IF_MATCH, value);
        let trimmed = raw.trim();
        let inner = trimmed.strip_prefix('"').and_then(|t| t.strip_suffix('"')).unwrap_or(trimmed);
        let want = after_oracle(inner);
        match (expected_revision(&headers, from_body), want, from_body) {
            (Ok(Some(got)), Some(n), None) => prop_assert_eq!(got, n),
            (Ok(Some(got)), Some(n), Some(b)) => { prop_assert_eq!(got, n); prop_assert_eq!(n, b); }
            (Err(e), None, _) => prop_assert!(is_400(&e)),
            (Err(e), Some(n), Some(b)) => { prop_assert_ne!(n, b); prop_assert!(is_400(&e)); }
            (got, want, b) => prop_assert!(false, "{:?} with if_revision {:?}: got {:?}, oracle {:?}", raw, b, got, want),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Through the real router: a feed read with any query is 200 or 400 `invalid_request`
    /// (never a 5xx, never a hang: the longest wait here is 0 s), and a 200 page is consistent
    /// with the query.
    #[test]
    fn feed_reads_with_any_query(after in prop::option::of(query_value()), limit in prop::option::of(query_value()),
                                 wait in prop::option::of(query_value()), junk in "[a-z]{0,3}=?[^&#]{0,6}") {
        let mut parts = vec![format!("{}", encode(&junk))];
        if let Some(v) = &after { parts.push(format!("after={}", encode(v))); }
        if let Some(v) = &limit { parts.push(format!("limit={}", encode(v))); }
        if let Some(v) = &wait { parts.push(format!("wait={}", encode(v))); }
        let query = parts.join("&");
        FEED.with(|cell| {
            let (rt, a) = cell;
            rt.block_on(async {
                let uri = format!("{}/events?{query}", a.root);
                let (status, headers, body) = send(&a.router, request(Method::GET, &uri, Some(&a.token), None)).await;
                prop_assert_eq!(headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()), Some("application/json; charset=utf-8"));
                match status {
                    StatusCode::OK => {
                        let q = parse_feed_query(Some(&query), 0).map_err(|e| TestCaseError::fail(format!("200 for a refused query: {e}")))?;
                        let events = body["events"].as_array().ok_or_else(|| TestCaseError::fail("events"))?;
                        prop_assert!(events.len() <= q.limit);
                        let seqs: Vec<u64> = events.iter().filter_map(|e| e["sequence"].as_u64()).collect();
                        prop_assert!(seqs.iter().all(|s| *s > q.after));
                        prop_assert!(seqs.windows(2).all(|w| w[0] + 1 == w[1]));
                        let expected_cursor = seqs.last().copied().unwrap_or(q.after);
                        prop_assert_eq!(body["next_cursor"].as_u64(), Some(expected_cursor));
                    }
                    StatusCode::BAD_REQUEST => {
                        prop_assert_eq!(&body["error"]["code"], "invalid_request");
                        prop_assert!(parse_feed_query(Some(&query), 0).is_err(), "400 for an accepted query {:?}", query);
                    }
                    other => prop_assert!(false, "{} for {:?}: {}", other, query, body),
                }
                Ok::<(), TestCaseError>(())
            })
        })?;
    }
}

thread_local! {
    /// One service for the router-level feed property: 12 events, no waiting, no poll limit.
    static FEED: (tokio::runtime::Runtime, App) = {
        let rt = runtime();
        let a = rt.block_on(async {
            let a = app(Limits { max_wait_seconds: 0, polls_per_minute: 1_000_000, ..Limits::default() }).await;
            for i in 0..12 {
                let req = request(Method::POST, &a.inbox, None, Some(&json!({"type": "t", "data": i})));
                let (status, _, body) = send(&a.router, req).await;
                assert_eq!(status, StatusCode::ACCEPTED, "{body}");
            }
            a
        });
        (rt, a)
    };
}
