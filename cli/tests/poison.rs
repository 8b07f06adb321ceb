//! Poison inputs against a real `agentaddress serve` (docs/API.md, "Create.", "Inbox." and
//! "State."): whatever a sender POSTs to an inbox, its event reads back through REST
//! (`GET events`), MCP (`poll_events`) and the CLI (`agentaddress poll`), the three agreeing; a
//! body is kept as JSON only when that loses nothing (nesting at most 64 deep, no repeated key,
//! every number literal unchanged), else as its exact text. State values nested too deep, keys
//! of dots only, and `name` / `task_id` with control or bidirectional formatting characters are
//! refused with 400 `invalid_request` over REST, MCP and the CLI.

mod client_harness;
mod common;

use std::collections::HashSet;
use std::time::Duration;

use agentaddress_blackbox::mcp::Mcp;
use client_harness::{check_failure, Cli};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;

/// The nesting kept as JSON (`MAX_JSON_DEPTH` in docs/API.md, "Inbox.").
const MAX_DEPTH: usize = 64;
const TASK: &str = "poison";

/// `serve` with rate limits out of the way (every case polls three times).
async fn serve() -> (tempfile::TempDir, Child, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (child, base) = common::spawn_serve(
        &dir.path().join("poison.db"),
        "127.0.0.1:0",
        &[
            "--creations-per-minute",
            "100000",
            "--polls-per-minute",
            "100000",
        ],
    )
    .await;
    (dir, child, base)
}

/// One address, read through all three surfaces.
struct Reader {
    base: String,
    http: reqwest::Client,
    mcp: Mcp,
    cli: tokio::sync::Mutex<Cli>,
    address_id: String,
    token: String,
    inbox_url: String,
}

impl Reader {
    async fn new(base: &str) -> Self {
        let mut cli = Cli::new(base);
        let created = cli.create(&["create", TASK]).await;
        let inbox_url = created["inbox_url"]
            .as_str()
            .unwrap_or_else(|| panic!("no inbox_url: {created}"))
            .to_owned();
        let address_id = created["address_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no address_id: {created}"))
            .to_owned();
        let token = cli.token(TASK);
        Self {
            base: base.to_owned(),
            http: reqwest::Client::new(),
            mcp: Mcp::connect(base).await,
            cli: tokio::sync::Mutex::new(cli),
            address_id,
            token,
            inbox_url,
        }
    }

    fn root(&self) -> String {
        format!("{}/api/v1/addresses/{}", self.base, self.address_id)
    }

    /// POSTs `body` to the inbox; the event's sequence (202 expected).
    async fn deliver(&self, content_type: Option<&str>, body: &[u8]) -> u64 {
        let mut req = self.http.post(&self.inbox_url).body(body.to_vec());
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        let r = req.send().await.expect("delivering");
        let status = r.status().as_u16();
        let answer: Value = r.json().await.expect("answer");
        assert_eq!(status, 202, "delivery answered {answer}");
        answer["event"]["sequence"]
            .as_u64()
            .unwrap_or_else(|| panic!("no sequence: {answer}"))
    }

    /// The only event of the page after `seq - 1`, checked to be `seq`.
    fn only_event(page: &Value, seq: u64, surface: &str) -> Value {
        let events = page["events"]
            .as_array()
            .unwrap_or_else(|| panic!("{surface}: no events in {page}"));
        assert_eq!(events.len(), 1, "{surface}: {page}");
        assert_eq!(events[0]["sequence"], seq, "{surface}: {page}");
        assert_eq!(page["next_cursor"], seq, "{surface}: the cursor passes it");
        events[0].clone()
    }

    async fn rest_event(&self, seq: u64) -> Value {
        let r = self
            .http
            .get(format!("{}/events?after={}&limit=1", self.root(), seq - 1))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("GET events");
        assert_eq!(r.status().as_u16(), 200, "GET events");
        let page: Value = r.json().await.expect("page");
        Self::only_event(&page, seq, "REST")
    }

    async fn mcp_event(&self, seq: u64) -> Value {
        let args = json!({"address_id": self.address_id, "read_token": self.token,
                          "after": seq - 1, "limit": 1});
        let r = self.mcp.call("poll_events", args).await;
        Self::only_event(r.ok("poll_events"), seq, "MCP")
    }

    async fn cli_event(&self, seq: u64) -> Value {
        let after = (seq - 1).to_string();
        let page = self
            .cli
            .lock()
            .await
            .ok(&["poll", TASK, "--after", &after, "--limit", "1"])
            .await;
        Self::only_event(&page, seq, "CLI")
    }

    /// The event at `seq` as REST, MCP and the CLI read it: all three succeed and agree.
    async fn read_everywhere(&self, seq: u64) -> Value {
        let rest = self.rest_event(seq).await;
        let mcp = self.mcp_event(seq).await;
        let cli = self.cli_event(seq).await;
        assert_eq!(rest, mcp, "REST and MCP agree");
        assert_eq!(rest, cli, "REST and the CLI agree");
        rest
    }
}

fn is_json_type(ct: Option<&str>) -> bool {
    let Some(ct) = ct else { return true };
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence == "text/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Standard base64 with padding (what the envelope uses for bodies that are not UTF-8).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// What a body must read back as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Parsed JSON: `data` is the body, number literals and key order included.
    Json,
    /// The exact bytes, as `{"content_type", "text"}` (or `"base64"`).
    Text,
    /// Random bytes: either, checked as such.
    Either,
}

/// Checks an event against the body delivered. Panics on a mismatch.
fn check_event(e: &Value, ct: Option<&str>, body: &[u8], expect: Expect) {
    assert_eq!(e["type"], "http.request", "{e}");
    assert_eq!(e["source"], Value::Null, "{e}");
    assert_eq!(e["ingress_surface"], "http", "{e}");
    assert_eq!(e["http"]["content_type"], json!(ct), "{e}");
    let as_text = match std::str::from_utf8(body) {
        Ok(t) => json!({"content_type": ct, "text": t}),
        Err(_) => json!({"content_type": ct, "base64": base64(body)}),
    };
    let kept_text = e["data"] == as_text;
    let compact = |v: &Value| serde_json::to_string(v).unwrap_or_default();
    let kept_json = !kept_text
        && is_json_type(ct)
        && serde_json::from_slice::<Value>(body).is_ok_and(|v| compact(&v) == compact(&e["data"]));
    match expect {
        Expect::Json => assert!(kept_json, "expected the body as JSON: {e}"),
        Expect::Text => assert!(kept_text, "expected the body as its exact text: {e}"),
        Expect::Either => assert!(kept_json || kept_text, "the body is lost: {e}"),
    }
}

// ------------------------------------------------------------------ generated JSON texts

/// A JSON text and what it is: its nesting depth and whether re-encoding keeps it exactly.
#[derive(Debug, Clone)]
struct Json {
    text: String,
    depth: usize,
    lossless: bool,
}

/// Keys as written, and the names they stand for (`\u00e9` and `é` are one name).
const KEYS: [(&str, &str); 7] = [
    ("a", "a"),
    ("b", "b"),
    ("k", "k"),
    ("é", "é"),
    ("\\u00e9", "é"),
    ("type2", "type2"),
    ("", ""),
];

fn leaf() -> impl Strategy<Value = Json> {
    let exact = [
        "0",
        "-0",
        "7",
        "-12",
        "1.50",
        "-0.0",
        "1e+5",
        "2.5e-3",
        "1e-7",
        "123456789012345678901234567890",
        "-98765432109876543210.000001",
        "true",
        "false",
        "null",
        r#""a""#,
        r#""\u00e9""#,
        r#""é""#,
        r#""\/""#,
        r#""\"[{""#,
        r#""\ud83d\ude00""#,
        r#""""#,
    ];
    // serde_json writes these back as 1e+5, 1.0e+10, 2e-3, -1e+2, 0e+0, 1.5e+300.
    let changed = ["1E5", "1e5", "1.0e10", "2E-3", "-1E+2", "0e0", "1.5E300"];
    prop_oneof![
        4 => select(exact.to_vec()).prop_map(|t| Json { text: t.to_owned(), depth: 0, lossless: true }),
        1 => select(changed.to_vec()).prop_map(|t| Json { text: t.to_owned(), depth: 0, lossless: false }),
    ]
}

fn json_text() -> impl Strategy<Value = Json> {
    leaf().prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            (prop::collection::vec(inner.clone(), 0..5), any::<bool>()).prop_map(
                |(items, spaced)| {
                    let texts: Vec<&str> = items.iter().map(|j| j.text.as_str()).collect();
                    Json {
                        text: format!("[{}]", texts.join(if spaced { " ,\n " } else { "," })),
                        depth: 1 + items.iter().map(|j| j.depth).max().unwrap_or(0),
                        lossless: items.iter().all(|j| j.lossless),
                    }
                }
            ),
            (
                prop::collection::vec((0..KEYS.len(), inner), 0..5),
                any::<bool>()
            )
                .prop_map(|(members, spaced)| {
                    let mut names = HashSet::new();
                    let unique = members.iter().all(|(k, _)| names.insert(KEYS[*k].1));
                    let texts: Vec<String> = members
                        .iter()
                        .map(|(k, j)| {
                            let colon = if spaced { " : " } else { ":" };
                            format!("\"{}\"{colon}{}", KEYS[*k].0, j.text)
                        })
                        .collect();
                    Json {
                        text: format!("{{{}}}", texts.join(",")),
                        depth: 1 + members.iter().map(|(_, j)| j.depth).max().unwrap_or(0),
                        lossless: unique && members.iter().all(|(_, j)| j.lossless),
                    }
                }),
        ]
    })
}

/// A generated JSON text wrapped in `levels` arrays or `{"w": …}` objects: depths from flat
/// to past serde_json's limit of 128, clustered around the kept limit of 64.
fn wrapped_json() -> impl Strategy<Value = Json> {
    let levels = prop_oneof![0..=3usize, 58..=70usize, 118..=132usize];
    (json_text(), levels, any::<bool>(), any::<bool>()).prop_map(
        |(core, levels, arrays, padded)| {
            let (open, close) = if arrays { ("[", "]") } else { ("{\"w\":", "}") };
            let pad = if padded { " \n\t" } else { "" };
            let depth = core.depth + levels;
            Json {
                text: format!(
                    "{pad}{}{}{}{pad}",
                    open.repeat(levels),
                    core.text,
                    close.repeat(levels)
                ),
                depth,
                lossless: core.lossless && depth <= MAX_DEPTH,
            }
        },
    )
}

fn body() -> impl Strategy<Value = (Vec<u8>, Expect)> {
    prop_oneof![
        4 => wrapped_json().prop_map(|j| {
            let expect = if j.lossless { Expect::Json } else { Expect::Text };
            (j.text.into_bytes(), expect)
        }),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(|b| (b, Expect::Either)),
        1 => "\\PC{0,40}".prop_map(|s| (s.into_bytes(), Expect::Either)),
    ]
}

fn content_type() -> impl Strategy<Value = Option<&'static str>> {
    select(vec![
        None,
        Some("application/json"),
        Some("application/json; charset=utf-8"),
        Some("application/cloudevents+json"),
        Some("text/json"),
        Some("text/plain"),
        Some("application/octet-stream"),
    ])
}

/// Arbitrary bodies under arbitrary content types: every one reads back through REST, MCP and
/// the CLI alike, as JSON exactly when that loses nothing, otherwise as its exact bytes.
#[test]
fn arbitrary_bodies_read_back_everywhere() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (_dir, _server, base) = rt.block_on(serve());
    let reader = rt.block_on(Reader::new(&base));
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&(body(), content_type()), |((bytes, expect), ct)| {
        let expect = if is_json_type(ct) {
            expect
        } else {
            Expect::Text
        };
        rt.block_on(async {
            let seq = reader.deliver(ct, &bytes).await;
            let event = reader.read_everywhere(seq).await;
            check_event(&event, ct, &bytes, expect);
        });
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// `[[…]]` `depth` deep.
fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

/// The poison event of the issue (125 deep) and bodies with repeated keys or changed number
/// notation are kept as their exact text, and read back everywhere; the cursor passes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn poison_and_lossy_bodies_are_text_and_readable() {
    let (_dir, _server, base) = serve().await;
    let r = Reader::new(&base).await;
    let poison = nested(125);
    let bodies = [
        poison.as_str(),
        r#"{"a":1,"a":2}"#,
        r#"{"type":"x","type":"y"}"#,
        r#"{"n":1E5}"#,
        r#"{"type":"t","data":{"deep":[{"k":1,"k":1}]}}"#,
    ];
    for body in bodies {
        let seq = r.deliver(Some("application/json"), body.as_bytes()).await;
        let e = r.read_everywhere(seq).await;
        check_event(&e, Some("application/json"), body.as_bytes(), Expect::Text);
        assert_eq!(e["data"]["text"].as_str(), Some(body));
    }
    // At the limit the body stays JSON, and still reads back everywhere.
    let at_limit = nested(MAX_DEPTH);
    let seq = r.deliver(None, at_limit.as_bytes()).await;
    let e = r.read_everywhere(seq).await;
    check_event(&e, None, at_limit.as_bytes(), Expect::Json);
    // Escapes are no loss: the body stays JSON.
    let escaped = r#"{"caf\u00e9":"\u00e9\/","n":1e+5}"#;
    let seq = r
        .deliver(Some("application/json"), escaped.as_bytes())
        .await;
    let e = r.read_everywhere(seq).await;
    assert_eq!(e["data"]["café"], "é/", "{e}");
    assert_eq!(
        serde_json::to_string(&e["data"]).ok().as_deref(),
        Some(r#"{"café":"é/","n":1e+5}"#)
    );
    // A poll from the start reads the whole feed in one page on every surface.
    let page = r.cli.lock().await.ok(&["poll", TASK, "--after", "0"]).await;
    assert_eq!(page["events"].as_array().map(Vec::len), Some(7), "{page}");
    let mcp = r
        .mcp
        .call(
            "poll_events",
            json!({"address_id": r.address_id, "read_token": r.token}),
        )
        .await;
    assert_eq!(mcp.ok("poll_events")["next_cursor"], 7);
}

/// A raw HTTP/1.1 request on a fresh socket, so that the path reaches the server exactly as
/// written (an HTTP client library would normalise `%2e%2e` away); the status and JSON body.
async fn raw_request(
    base: &str, method: &str, path: &str, token: &str, body: &str,
) -> (u16, Value) {
    let host = base.trim_start_matches("http://").trim_end_matches('/');
    let mut socket = tokio::net::TcpStream::connect(host)
        .await
        .unwrap_or_else(|e| panic!("connect {host}: {e}"));
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(request.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut answer))
        .await
        .unwrap_or_else(|_| panic!("no answer within 10 s"))
        .expect("read");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text}"));
    let json = match (text.find("\r\n\r\n{"), text.rfind('}')) {
        (Some(start), Some(end)) if end > start => {
            serde_json::from_str(&text[start + 4..=end]).unwrap_or(Value::Null)
        }
        _ => Value::Null,
    };
    (status, json)
}

/// Keys of dots only are 400 `invalid_request` over REST (percent-encoded or not), MCP and the
/// CLI; keys with dots and other characters are fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dot_only_keys_are_refused_everywhere() {
    let (_dir, _server, base) = serve().await;
    let r = Reader::new(&base).await;
    let state_path = format!("/api/v1/addresses/{}/state", r.address_id);
    for segment in ["%2e%2e", "%2E%2e", "%2e", "..", ".", "...", "%2e.%2e"] {
        let path = format!("{state_path}/{segment}");
        for (method, body) in [("PUT", r#"{"value":1}"#), ("GET", ""), ("DELETE", "")] {
            let (status, answer) = raw_request(&base, method, &path, &r.token, body).await;
            assert_eq!(status, 400, "{method} {path}: {answer}");
            assert_eq!(
                answer["error"]["code"], "invalid_request",
                "{method} {path}"
            );
        }
    }
    for key in [".", "..", "..."] {
        let ids = json!({"address_id": r.address_id, "read_token": r.token, "key": key});
        let mut set = ids.clone();
        set["value"] = json!(1);
        r.mcp
            .call("set_state", set)
            .await
            .expect_error("invalid_request", key);
        r.mcp
            .call("get_state", ids.clone())
            .await
            .expect_error("invalid_request", key);
        r.mcp
            .call("delete_state", ids)
            .await
            .expect_error("invalid_request", key);
        let mut cli = r.cli.lock().await;
        cli.fails(&["state", "get", TASK, key], 2, "invalid_request")
            .await;
        cli.fails(&["state", "delete", TASK, key], 2, "invalid_request")
            .await;
        let url = cli.url.clone();
        let out = cli
            .run_with(&["state", "set", TASK, key, "-"], Some(&url), Some(b"1"))
            .await;
        check_failure(&out, 2, "invalid_request");
    }
    // Nothing was written, and keys that merely contain dots work.
    let (status, answer) = raw_request(
        &base,
        "PUT",
        &format!("{state_path}/..a"),
        &r.token,
        r#"{"value":1}"#,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let keys = r.cli.lock().await.ok(&["state", "keys", TASK]).await;
    assert_eq!(keys["state_keys"], 1, "{keys}");
}

/// A state value nested deeper than 64 is 400 over REST, MCP and the CLI; at 64 it is written
/// and its `state.updated` event reads back everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deep_state_values_are_refused_everywhere() {
    let (_dir, _server, base) = serve().await;
    let r = Reader::new(&base).await;
    let url = format!("{}/state/deep", r.root());
    let put = |value: String| {
        r.http
            .put(&url)
            .bearer_auth(&r.token)
            .header("content-type", "application/json")
            .body(format!("{{\"value\":{value}}}"))
            .send()
    };
    for depth in [100, MAX_DEPTH + 1, 126] {
        let resp = put(nested(depth)).await.expect("PUT");
        assert_eq!(resp.status().as_u16(), 400, "depth {depth}");
        let answer: Value = resp.json().await.expect("answer");
        assert_eq!(answer["error"]["code"], "invalid_request", "{answer}");
    }
    let deep: Value = serde_json::from_str(&nested(100)).unwrap();
    let args = json!({"address_id": r.address_id, "read_token": r.token, "key": "deep",
                      "value": deep});
    let e = r.mcp.call("set_state", args).await;
    let error = e.expect_error("invalid_request", "set_state 100 deep");
    assert!(
        error["message"].as_str().is_some_and(|m| m.contains("64")),
        "{error}"
    );
    {
        let mut cli = r.cli.lock().await;
        let url = cli.url.clone();
        let value = nested(100);
        let out = cli
            .run_with(
                &["state", "set", TASK, "deep", "-"],
                Some(&url),
                Some(value.as_bytes()),
            )
            .await;
        check_failure(&out, 2, "invalid_request");
    }
    // Nothing was written; at the limit the value is written and its event is readable.
    let resp = put(nested(MAX_DEPTH)).await.expect("PUT");
    assert_eq!(resp.status().as_u16(), 200);
    let written: Value = resp.json().await.expect("answer");
    assert_eq!(
        written["revision"], 1,
        "the refused writes made no event: {written}"
    );
    let e = r.read_everywhere(1).await;
    assert_eq!(e["type"], "state.updated");
    assert_eq!(
        serde_json::to_string(&e["data"]["value"]).ok(),
        Some(nested(MAX_DEPTH))
    );
}

/// `name` and `task_id` with control or bidirectional formatting characters are 400 over REST,
/// MCP and the CLI; other Unicode is fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn labels_with_control_or_bidi_characters_are_refused() {
    let (_dir, _server, base) = serve().await;
    let http = reqwest::Client::new();
    let create = |body: Value| {
        http.post(format!("{base}/api/v1/addresses"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    for bad in [
        "a\0b",
        "line\nbreak",
        "\u{1b}[31m",
        "\u{85}",
        "invoice\u{202E}fdp.exe",
        "\u{202A}x",
        "\u{2066}x\u{2069}",
        "\u{200E}",
        "\u{200F}",
        "\u{061C}",
    ] {
        for field in ["name", "task_id"] {
            let resp = create(json!({ field: bad })).await.expect("create");
            assert_eq!(resp.status().as_u16(), 400, "{field} {bad:?}");
            let answer: Value = resp.json().await.unwrap();
            assert_eq!(answer["error"]["code"], "invalid_request", "{answer}");
            let message = answer["error"]["message"].as_str().unwrap_or("");
            assert!(message.contains(field), "{message}");
        }
    }
    let ok = create(json!({"name": "déjà vu 👨‍👩‍👧", "task_id": "שלום-1"}))
        .await
        .expect("create");
    assert_eq!(ok.status().as_u16(), 201);
    let mcp = Mcp::connect(&base).await;
    mcp.call("create_return_address", json!({"name": "evil\u{202E}"}))
        .await
        .expect_error("invalid_request", "bidi name over MCP");
    mcp.call("create_return_address", json!({"task_id": "nul\u{0}"}))
        .await
        .expect_error("invalid_request", "NUL task_id over MCP");
    let mut cli = Cli::new(&base);
    cli.fails(
        &["create", "t", "--name", "evil\u{202E}txt"],
        2,
        "invalid_request",
    )
    .await;
    assert!(
        !cli.file("t").exists(),
        "no credentials saved for a refused create"
    );
}
