//! `POST /api/mcp` of `agentaddress serve`, driven by a real MCP client (rmcp over Streamable
//! HTTP): the handshake and tool list, every tool with its errors, and the long-poll clamp.
//! The same scenarios run against the Lambda stack (functions/tests/mcp_lambda.rs).

mod common;

use std::process::Stdio;

use agentaddress_blackbox::{mcp, Client};
use serde_json::json;

async fn serve() -> (tempfile::TempDir, tokio::process::Child, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (child, base) = common::spawn_serve(&dir.path().join("mcp.db"), "127.0.0.1:0", &[]).await;
    (dir, child, base)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_handshake_and_tool_list() {
    let (_dir, _server, base) = serve().await;
    mcp::handshake_and_tool_list(&base).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_tools_end_to_end() {
    let (_dir, _server, base) = serve().await;
    mcp::tools_end_to_end(&base, &Client::new(&base)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_ask_person() {
    let (_dir, _child, base) = serve().await;
    mcp::ask_person_end_to_end(&base).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_wait_is_clamped_to_25_seconds() {
    let (_dir, _server, base) = serve().await;
    mcp::wait_is_clamped(&base).await;
}

/// Only POST is MCP here (stateless: no SSE stream to GET, no session to DELETE); the other
/// methods get the API's JSON 405, and a POST that is not MCP is refused by the transport.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_other_methods_are_405() {
    let (_dir, _server, base) = serve().await;
    let c = Client::new(&base);
    for method in ["GET", "PUT", "DELETE"] {
        c.send(method, "/api/mcp", None, &[], None)
            .await
            .expect_error(405, "method_not_allowed", method);
    }
    let r = c
        .send(
            "POST",
            "/api/mcp",
            None,
            &[("content-type", "application/json")],
            Some(b"{}".to_vec()),
        )
        .await;
    assert!(
        (400..500).contains(&r.status),
        "a POST that is no JSON-RPC message: {} {}",
        r.status,
        r.text
    );
}

/// The read token never reaches the log, even with `RUST_LOG=trace` (the MCP library logs whole
/// JSON-RPC messages, arguments included, at debug level: the server caps it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_read_token_is_never_logged() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log_path = dir.path().join("serve.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let (mut child, base, _stdout) = common::spawn_serve_with(
        &dir.path().join("mcp.db"),
        "127.0.0.1:0",
        &[],
        "trace,rmcp=trace,rmcp::service=trace,rmcp::transport=trace",
        Stdio::from(log),
    )
    .await;

    let m = mcp::Mcp::connect(&base).await;
    let (a, _) = m.create(json!({"name": "secret test"})).await;
    let args = json!({"address_id": a.id, "read_token": a.token});
    m.call("poll_events", args.clone()).await.ok("poll");
    let mut put = args.clone();
    put["key"] = json!("k");
    put["value"] = json!({"x": 1});
    m.call("set_state", put).await.ok("set_state");
    let mut wrong = args.clone();
    wrong["read_token"] = json!(format!("{}x", a.token));
    m.call("get_state", wrong)
        .await
        .expect_error("unauthorized", "a near-miss token");
    m.close().await;
    let _ = child.kill().await;
    let _ = child.wait().await;

    let text = std::fs::read_to_string(&log_path).expect("read log");
    assert!(
        text.contains("/api/mcp"),
        "the log records the MCP requests (so this test sees the log)"
    );
    let secret = a.token.trim_start_matches("aat_");
    assert!(
        !text.contains(secret),
        "the read token appears in the server log"
    );
}

/// `get_attachment`: a small attachment inline as an embedded resource (its exact bytes), a
/// large one refused with its size and the REST URL, and the errors of the REST route.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_get_attachment() {
    use base64::Engine;
    use rmcp::model::{CallToolRequestParams, ContentBlock, ResourceContents};
    use sha2::{Digest, Sha256};

    const SECRET: &str = "mcp-test-ingest-secret-0123456789";
    let dir = tempfile::tempdir().expect("temp dir");
    let (_server, base) = common::spawn_serve(
        &dir.path().join("mcp.db"),
        "127.0.0.1:0",
        &["--email-ingest-secret", SECRET],
    )
    .await;
    let m = mcp::Mcp::connect(&base).await;
    let (a, _) = m.create(json!({})).await;
    let small: Vec<u8> = (0..3_000u32).map(|n| (n % 251) as u8).collect();
    let large = vec![b'L'; mcp_inline_max() + 1];
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let raw = format!(
        "From: ada@example.com\r\nSubject: files\r\nMessage-ID: <files@example.com>\r\n\
         Content-Type: multipart/mixed; boundary=\"b\"\r\n\r\n\
         --b\r\nContent-Type: text/plain\r\n\r\nTwo files.\r\n\
         --b\r\nContent-Type: image/png\r\nContent-Disposition: attachment; filename=\"dot.png\"\r\n\
         Content-Transfer-Encoding: base64\r\n\r\n{}\r\n\
         --b\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"big.bin\"\r\n\
         Content-Transfer-Encoding: base64\r\n\r\n{}\r\n--b--\r\n",
        b64(&small),
        b64(&large)
    );
    let http = reqwest::Client::new();
    let r = http
        .post(format!(
            "{base}/api/v1/email/inbound?rcpt={}@inbox.localhost",
            a.id
        ))
        .bearer_auth(SECRET)
        .body(raw)
        .send()
        .await
        .expect("ingest");
    assert_eq!(r.status(), 200);
    let page = m
        .call(
            "poll_events",
            json!({"address_id": a.id, "read_token": a.token, "after": 0}),
        )
        .await;
    let event = &page.ok("poll")["events"][0];
    assert_eq!(event["type"], "email.received", "{event}");
    let event_id = event["id"].as_str().unwrap_or_default().to_owned();
    let attachments = event["data"]["attachments"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(attachments.len(), 2, "{event}");
    let id_of = |name: &str| {
        attachments
            .iter()
            .find(|x| x["filename"] == name)
            .and_then(|x| x["id"].as_str())
            .unwrap_or_else(|| panic!("no attachment {name}"))
            .to_owned()
    };
    let args = |att: &str| json!({"address_id": a.id, "read_token": a.token, "event_id": event_id, "attachment_id": att});

    // Small: inline, byte for byte.
    let args_small = match args(&id_of("dot.png")) {
        serde_json::Value::Object(o) => o,
        _ => unreachable!("an object"),
    };
    let result = m
        .client
        .call_tool(CallToolRequestParams::new("get_attachment").with_arguments(args_small))
        .await
        .expect("get_attachment");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let s = result.structured_content.clone().unwrap_or_default();
    assert_eq!(s["filename"], "dot.png");
    assert_eq!(s["content_type"], "image/png");
    assert_eq!(s["size"], small.len());
    assert_eq!(s["sha256"], hex::encode(Sha256::digest(&small)));
    let blob = result
        .content
        .iter()
        .find_map(|c| match c {
            ContentBlock::Resource(r) => match &r.resource {
                ResourceContents::BlobResourceContents {
                    blob, mime_type, ..
                } => {
                    assert_eq!(mime_type.as_deref(), Some("image/png"));
                    Some(blob.clone())
                }
                _ => None,
            },
            _ => None,
        })
        .unwrap_or_else(|| panic!("no embedded blob resource: {result:?}"));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(blob)
        .expect("base64");
    assert_eq!(bytes, small);

    // Large: refused with its size and where to download it.
    let refused = m.call("get_attachment", args(&id_of("big.bin"))).await;
    let error = refused.expect_error("payload_too_large", "a large attachment");
    assert_eq!(error["size"], large.len());
    let url = error["url"].as_str().unwrap_or_default();
    assert!(
        url.starts_with("http://") && url.ends_with(&format!("/attachments/{}", id_of("big.bin"))),
        "{url}"
    );
    let r = http
        .get(url)
        .bearer_auth(&a.token)
        .send()
        .await
        .expect("download");
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.map(|b| b.len()).unwrap_or(0), large.len());

    // The REST route's errors.
    m.call("get_attachment", args("att_99"))
        .await
        .expect_error("not_found", "an unknown attachment");
    let mut wrong = args(&id_of("dot.png"));
    wrong["read_token"] = json!("aat_wrong");
    m.call("get_attachment", wrong)
        .await
        .expect_error("unauthorized", "a wrong token");
    m.close().await;
}

/// The Python client of docs/MCP.md, exactly as the document shows it (between its
/// `python-mcp-client` markers), run with the official SDK (PyPI `mcp`, pinned in
/// scripts/mcp-python, which `scripts/test` runs first) against a real `serve`: it creates an
/// address, delivers to its inbox URL, polls, acknowledges, and prints what it saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_python_client_of_the_docs_runs() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = std::fs::read_to_string(root.join("docs/MCP.md")).expect("read docs/MCP.md");
    let snippet = python_snippet(&doc);
    let python = root.join(".cache/mcp-venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/mcp-python --install-only (scripts/test does)",
        python.display()
    );
    let (dir, _server, base) = serve().await;
    let script = dir.path().join("client.py");
    std::fs::write(&script, &snippet).expect("write the snippet");
    let run = tokio::process::Command::new(&python)
        .arg(&script)
        .env("AGENTADDRESS_MCP_URL", format!("{base}/api/mcp"))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), run)
        .await
        .unwrap_or_else(|_| panic!("the Python client did not finish within 120 s"))
        .unwrap_or_else(|e| panic!("run {}: {e}", python.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the Python client failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "tools: 15",
            r#"event: 1 deploy.finished {"ok": true}"#,
            "next cursor: 1",
        ],
        "stderr: {stderr}"
    );
}

/// The code between docs/MCP.md's `python-mcp-client` markers, without its fence.
fn python_snippet(doc: &str) -> String {
    let start = "<!-- python-mcp-client: start -->";
    let end = "<!-- python-mcp-client: end -->";
    let from = doc
        .find(start)
        .unwrap_or_else(|| panic!("docs/MCP.md has no {start}"));
    let block = &doc[from + start.len()..];
    let block = &block[..block
        .find(end)
        .unwrap_or_else(|| panic!("docs/MCP.md has no {end}"))];
    let code = block
        .trim()
        .strip_prefix("```python\n")
        .and_then(|b| b.strip_suffix("```"))
        .unwrap_or_else(|| panic!("the snippet is one ```python block: {block}"));
    assert!(
        code.contains("from mcp import ClientSession") && code.contains("asyncio.run(main())"),
        "{code}"
    );
    code.to_owned()
}

fn mcp_inline_max() -> usize {
    agentaddress_mcp::INLINE_MAX_BYTES
}
