//! Request hygiene of a real `agentaddress serve`, over raw sockets (docs/API.md, "Request
//! hygiene"): Host (required on HTTP/1.1, once, a valid authority), absolute-form targets,
//! transfer codings other than `chunked`, repeated singleton headers, and the JSON-RPC errors
//! of `POST /api/mcp` for messages that are not one valid JSON-RPC request.

mod common;

use std::time::Duration;

use agentaddress_blackbox::{Address, Client};
use common::raw::{path_of, read_answer, Answer};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

async fn server() -> (tokio::process::Child, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (child, base) =
        common::spawn_serve(&dir.path().join("agentaddress.db"), "127.0.0.1:0", &[]).await;
    (child, base, dir)
}

/// Host and port of a base URL such as `http://127.0.0.1:1234`.
fn authority(base: &str) -> &str {
    base.strip_prefix("http://")
        .unwrap_or_else(|| panic!("not an http URL: {base}"))
}

/// Writes `request` on a fresh connection to the server and reads one answer (head and a
/// `Content-Length` body), within 10 s.
async fn exchange(base: &str, request: &[u8]) -> Answer {
    let mut sock = TcpStream::connect(authority(base)).await.expect("connect");
    // The server may answer from the head and stop reading: a failed write is not the test.
    let _ = sock.write_all(request).await;
    let answer = read_answer(&mut sock, Duration::from_secs(10)).await;
    assert!(
        answer.header("content-length").is_some(),
        "answer without Content-Length: {answer:?}"
    );
    answer
}

/// A request with `head_lines` (each without CRLF) and a `Content-Length` body.
fn request(start: &str, head_lines: &[String], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{start}\r\n");
    for l in head_lines {
        out.push_str(l);
        out.push_str("\r\n");
    }
    if !body.is_empty() {
        out.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

fn host(base: &str) -> String {
    format!("host: {}", authority(base))
}

fn bearer(a: &Address) -> String {
    format!("authorization: Bearer {}", a.token)
}

/// The state key `k` of `a` is absent.
async fn expect_no_state(c: &Client, a: &Address, what: &str) {
    c.get(&format!("{}/k", a.state_url), Some(&a.token))
        .await
        .expect_error(404, "not_found", what);
}

/// Needs `serve` to mark the requests it reads off a connection with
/// `agentaddress_api::hygiene::SocketRequest` (one line in `cli/src/transport/version.rs`'s
/// request layer): the shared router cannot tell them from the Lambda adapter's requests,
/// which may lack Host.
#[tokio::test]
async fn http11_without_host_is_400() {
    let (_child, base, _dir) = server().await;
    exchange(&base, b"GET /healthz HTTP/1.1\r\n\r\n")
        .await
        .expect_error(400, "invalid_request", "HTTP/1.1 without Host");
    let created = exchange(
        &base,
        &request("POST /api/v1/addresses HTTP/1.1", &[], b"{}"),
    )
    .await;
    created.expect_error(400, "invalid_request", "create without Host");
}

#[tokio::test]
async fn http10_without_host_is_served() {
    let (_child, base, _dir) = server().await;
    let a = exchange(&base, b"GET /healthz HTTP/1.0\r\n\r\n").await;
    assert_eq!(a.status, 200, "{:?}", String::from_utf8_lossy(&a.body));
    assert_eq!(a.json()["status"], "ok");
}

#[tokio::test]
async fn repeated_or_invalid_hosts_are_400() {
    let (_child, base, _dir) = server().await;
    let h = host(&base);
    exchange(
        &base,
        &request("GET /healthz HTTP/1.1", &[h.clone(), h.clone()], b""),
    )
    .await
    .expect_error(400, "invalid_request", "two Host headers");
    for bad in [
        "a.com:99999",
        "a.com:0",
        "user@a.com",
        "a.com, b.com",
        "a.com/x",
        "",
    ] {
        exchange(
            &base,
            &request("GET /healthz HTTP/1.1", &[format!("host: {bad}")], b""),
        )
        .await
        .expect_error(400, "invalid_request", bad);
    }
    // Nothing reaches the URLs the API hands out: a create with a bad Host is refused.
    exchange(
        &base,
        &request(
            "POST /api/v1/addresses HTTP/1.1",
            &[
                "host: a.com:99999".into(),
                "content-type: application/json".into(),
            ],
            b"{}",
        ),
    )
    .await
    .expect_error(400, "invalid_request", "create with a bad Host");
    // Valid ones are served and used.
    for good in ["a.example:8080", "127.0.0.1", "[::1]:1"] {
        let a = exchange(
            &base,
            &request(
                "POST /api/v1/addresses HTTP/1.1",
                &[
                    format!("host: {good}"),
                    "content-type: application/json".into(),
                ],
                b"{}",
            ),
        )
        .await;
        assert_eq!(
            a.status,
            201,
            "{good}: {:?}",
            String::from_utf8_lossy(&a.body)
        );
        let inbox = a.json()["endpoints"]["inbox_url"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            inbox.starts_with(&format!("http://{good}/")),
            "{good}: {inbox}"
        );
    }
}

/// An absolute-form target's authority is the request's host (and replaces Host); an invalid
/// one is refused like an invalid Host.
#[tokio::test]
async fn absolute_form_authority_replaces_host() {
    let (_child, base, _dir) = server().await;
    let h = host(&base);
    let a = exchange(
        &base,
        &request(
            "POST http://other.example:8080/api/v1/addresses HTTP/1.1",
            &[h.clone(), "content-type: application/json".into()],
            b"{}",
        ),
    )
    .await;
    assert_eq!(a.status, 201, "{:?}", String::from_utf8_lossy(&a.body));
    let created = a.json();
    for field in ["inbox_url", "events_url", "state_url"] {
        let url = created["endpoints"][field].as_str().unwrap_or_default();
        assert!(
            url.starts_with("http://other.example:8080/api/v1/"),
            "{field}: {url}"
        );
    }
    for bad in [
        "http://user@other.example/healthz",
        "http://other.example:99999/healthz",
        "http://other.example:0/healthz",
    ] {
        exchange(
            &base,
            &request(
                &format!("GET {bad} HTTP/1.1"),
                std::slice::from_ref(&h),
                b"",
            ),
        )
        .await
        .expect_error(400, "invalid_request", bad);
    }
    // The skill text's URLs follow the target too.
    let skill = exchange(
        &base,
        &request("GET http://third.example/skill.md HTTP/1.1", &[h], b""),
    )
    .await;
    assert_eq!(skill.status, 200);
    let text = String::from_utf8_lossy(&skill.body);
    assert!(
        text.contains("http://third.example/api/v1/addresses"),
        "{text}"
    );
}

#[tokio::test]
async fn transfer_codings_other_than_chunked_are_501_and_store_nothing() {
    let (_child, base, _dir) = server().await;
    let c = Client::new(&base);
    let a = c.new_address().await;
    let inbox = path_of(&a.inbox_url);
    let chunked_body = b"7\r\n{\"x\":1}\r\n0\r\n\r\n";
    for coding in ["gzip, chunked", "chunked, chunked, gzip;q=1, chunked"] {
        let mut req = request(
            &format!("POST {inbox} HTTP/1.1"),
            &[
                host(&base),
                "content-type: application/json".into(),
                format!("transfer-encoding: {coding}"),
            ],
            b"",
        );
        req.extend_from_slice(chunked_body);
        let answer = exchange(&base, &req).await;
        answer.expect_error(501, "not_supported", coding);
        let message = answer.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(message.contains("gzip"), "{message}");
    }
    assert!(c.read_all(&a).await.is_empty(), "a refused body was stored");
    // State writes too.
    let mut req = request(
        &format!("PUT {}/k HTTP/1.1", path_of(&a.state_url)),
        &[
            host(&base),
            bearer(&a),
            "content-type: application/json".into(),
            "transfer-encoding: deflate, chunked".into(),
        ],
        b"",
    );
    req.extend_from_slice(b"d\r\n{\"value\":\"v\"}\r\n0\r\n\r\n");
    exchange(&base, &req)
        .await
        .expect_error(501, "not_supported", "PUT state with deflate");
    expect_no_state(&c, &a, "a refused state write").await;
    // Plain chunked is served.
    let mut req = request(
        &format!("POST {inbox} HTTP/1.1"),
        &[
            host(&base),
            "content-type: application/json".into(),
            "transfer-encoding: chunked".into(),
        ],
        b"",
    );
    req.extend_from_slice(chunked_body);
    let ok = exchange(&base, &req).await;
    assert_eq!(ok.status, 202, "{:?}", String::from_utf8_lossy(&ok.body));
    let events = c.read_all(&a).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["data"], json!({"x": 1}));
}

#[tokio::test]
async fn repeated_singleton_headers_are_400_and_change_nothing() {
    let (_child, base, _dir) = server().await;
    let c = Client::new(&base);
    let a = c.new_address().await;
    let h = host(&base);
    let json_ct = String::from("content-type: application/json");

    // Idempotency-Key twice on a delivery: nothing delivered.
    let answer = exchange(
        &base,
        &request(
            &format!("POST {} HTTP/1.1", path_of(&a.inbox_url)),
            &[
                h.clone(),
                json_ct.clone(),
                "idempotency-key: k1".into(),
                "idempotency-key: k2".into(),
            ],
            b"{\"x\":1}",
        ),
    )
    .await;
    answer.expect_error(400, "invalid_request", "two Idempotency-Key");
    assert!(
        answer.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("Idempotency-Key"),
        "{:?}",
        answer.json()
    );
    assert!(
        c.read_all(&a).await.is_empty(),
        "a refused delivery was stored"
    );

    // If-Match twice on a state write: nothing written.
    let put = format!("PUT {}/k HTTP/1.1", path_of(&a.state_url));
    exchange(
        &base,
        &request(
            &put,
            &[
                h.clone(),
                bearer(&a),
                json_ct.clone(),
                "if-match: 0".into(),
                "if-match: 0".into(),
            ],
            b"{\"value\":1}",
        ),
    )
    .await
    .expect_error(400, "invalid_request", "two If-Match");
    expect_no_state(&c, &a, "after two If-Match").await;

    // Authorization twice, even both right: refused before authentication, nothing written.
    exchange(
        &base,
        &request(
            &put,
            &[h.clone(), bearer(&a), bearer(&a), json_ct.clone()],
            b"{\"value\":1}",
        ),
    )
    .await
    .expect_error(400, "invalid_request", "two Authorization on PUT");
    expect_no_state(&c, &a, "after two Authorization").await;
    exchange(
        &base,
        &request(
            &format!("DELETE {} HTTP/1.1", path_of(&a.root)),
            &[h.clone(), bearer(&a), "authorization: Bearer wrong".into()],
            b"",
        ),
    )
    .await
    .expect_error(400, "invalid_request", "two Authorization on DELETE");
    c.get(&a.root, Some(&a.token))
        .await
        .expect_status(200, "the address is still there");
    assert!(c.read_all(&a).await.is_empty(), "the feed changed");

    // Once each is served.
    let ok = exchange(
        &base,
        &request(
            &put,
            &[h, bearer(&a), json_ct, "if-match: 0".into()],
            b"{\"value\":1}",
        ),
    )
    .await;
    assert_eq!(ok.status, 200, "{:?}", String::from_utf8_lossy(&ok.body));
    assert_eq!(ok.json()["revision"], 1);
}

/// `POST /api/mcp` with `body`, as an MCP client sends it.
fn mcp_request(base: &str, body: &[u8]) -> Vec<u8> {
    request(
        "POST /api/mcp HTTP/1.1",
        &[
            host(base),
            "content-type: application/json".into(),
            "accept: application/json, text/event-stream".into(),
        ],
        body,
    )
}

#[tokio::test]
async fn mcp_answers_malformed_messages_with_jsonrpc_errors() {
    let (_child, base, _dir) = server().await;
    let cases: [(&str, i64, Value); 10] = [
        ("this is not JSON", -32700, Value::Null),
        ("{\"jsonrpc\":\"2.0\",", -32700, Value::Null),
        ("[]", -32600, Value::Null),
        (
            r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]"#,
            -32600,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}"#,
            -32600,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":true,"method":"tools/list"}"#,
            -32600,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}"#,
            -32600,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"1.0","id":7,"method":"tools/list"}"#,
            -32600,
            json!(7),
        ),
        (
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/list","params":5}"#,
            -32602,
            json!(8),
        ),
        (
            r#"{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":7}}"#,
            -32602,
            json!("c"),
        ),
    ];
    for (body, code, id) in cases {
        let a = exchange(&base, &mcp_request(&base, body.as_bytes())).await;
        assert_eq!(
            a.status,
            400,
            "{body}: {:?}",
            String::from_utf8_lossy(&a.body)
        );
        assert_eq!(a.header("content-type"), Some("application/json"), "{body}");
        let v = a.json();
        assert_eq!(v["jsonrpc"], "2.0", "{body}: {v}");
        assert_eq!(v["error"]["code"], code, "{body}: {v}");
        assert_eq!(v["id"], id, "{body}: {v}");
        assert!(v["error"]["message"].is_string(), "{body}: {v}");
        assert!(v.get("result").is_none(), "{body}: {v}");
    }
}

#[tokio::test]
async fn mcp_valid_messages_still_work() {
    let (_child, base, _dir) = server().await;
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "hygiene-test", "version": "1"},
        },
    });
    let a = exchange(&base, &mcp_request(&base, init.to_string().as_bytes())).await;
    assert_eq!(a.status, 200, "{:?}", String::from_utf8_lossy(&a.body));
    let v = a.json();
    assert_eq!(v["id"], 1, "{v}");
    assert_eq!(v["result"]["serverInfo"]["name"], "agentaddress", "{v}");

    let list = json!({"jsonrpc": "2.0", "id": "two", "method": "tools/list"});
    let a = exchange(&base, &mcp_request(&base, list.to_string().as_bytes())).await;
    assert_eq!(a.status, 200, "{:?}", String::from_utf8_lossy(&a.body));
    let v = a.json();
    assert_eq!(v["id"], "two", "{v}");
    let tools = v["result"]["tools"].as_array().cloned().unwrap_or_default();
    assert_eq!(tools.len(), agentaddress_blackbox::mcp::TOOLS.len(), "{v}");

    // An integer id written as a float is still an integer id.
    let list = json!({"jsonrpc": "2.0", "id": 3.0, "method": "tools/list"});
    let a = exchange(&base, &mcp_request(&base, list.to_string().as_bytes())).await;
    assert_eq!(a.status, 200, "{:?}", String::from_utf8_lossy(&a.body));

    // A tool call goes through to the REST API (an unknown address is a tool error).
    let call = json!({
        "jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "get_state", "arguments": {"address_id": "addr_x", "read_token": "aat_x"}},
    });
    let a = exchange(&base, &mcp_request(&base, call.to_string().as_bytes())).await;
    assert_eq!(a.status, 200, "{:?}", String::from_utf8_lossy(&a.body));
    let v = a.json();
    assert_eq!(v["result"]["isError"], true, "{v}");
    assert_eq!(
        v["result"]["structuredContent"]["error"]["code"], "unauthorized",
        "{v}"
    );
}

/// The MCP transport's own refusals are JSON-RPC errors too, with their HTTP status.
#[tokio::test]
async fn mcp_transport_refusals_are_jsonrpc_errors() {
    let (_child, base, _dir) = server().await;
    let list = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let cases = [
        (
            request(
                "POST /api/mcp HTTP/1.1",
                &[
                    host(&base),
                    "content-type: text/plain".into(),
                    "accept: application/json, text/event-stream".into(),
                ],
                list,
            ),
            415,
        ),
        (
            request(
                "POST /api/mcp HTTP/1.1",
                &[host(&base), "content-type: application/json".into()],
                list,
            ),
            406,
        ),
    ];
    for (req, status) in cases {
        let a = exchange(&base, &req).await;
        assert_eq!(a.status, status, "{:?}", String::from_utf8_lossy(&a.body));
        assert_eq!(a.header("content-type"), Some("application/json"));
        let v = a.json();
        assert_eq!(v["jsonrpc"], "2.0", "{v}");
        assert_eq!(v["id"], Value::Null, "{v}");
        assert_eq!(v["error"]["code"], -32600, "{v}");
    }
}
