//! Both deployments answer every method of every path alike (docs/API.md §9, "Unknown routes
//! and methods"): each (path, method) of the route table — plus `/`, `/favicon.ico`, `/inbox/`,
//! `/api/mcp/` and unknown paths — goes to a fresh `agentaddress serve` and to the local Lambda
//! stack, and the two answers must have the same status, the same `Content-Type`, and for an
//! error the same code (the API's, or MCP's JSON-RPC one) and `Allow`; for a redirect the same
//! `Location`. Path parameters are well-formed ids that name nothing, and every body is refused
//! before it could change anything (no token; `text/plain` where JSON is expected), so nothing
//! is created. The differences docs/API.md states are listed in [`DOCUMENTED`] and checked too.
//!
//! `scripts/test` starts the stack and passes `AGENTADDRESS_LAMBDA_URL` and
//! `AGENTADDRESS_TEST_INGEST_SECRET`; without them this test fails loudly, never skips.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use agentaddress_api::RouteGroup;
use agentaddress_blackbox::stack_env as env;
use futures::StreamExt;

const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// What Chromium sends when it opens a page: `/` answers it with HTML, anything else with JSON.
const BROWSER: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";

/// Where the deployments differ on purpose: (method, path, serve's status, the stack's status,
/// where docs/API.md says so).
const DOCUMENTED: &[(&str, &str, u16, u16, &str)] = &[
    (
        "GET",
        "/api/v1/addresses/{address_id}/events/stream",
        401,
        501,
        "§14: the Lambda deployment cannot stream (501 before authentication)",
    ),
    (
        "HEAD",
        "/api/v1/addresses/{address_id}/events/stream",
        401,
        501,
        "§14",
    ),
];

/// A plausible value for each path parameter: well-formed, naming nothing.
fn concrete(path: &str) -> String {
    path.replace("{address_id}", "addr_parity0unknown")
        .replace("{inbox_secret}", "ais_parity0unknown")
        .replace("{event_id}", "evt_parity0unknown")
        .replace("{attachment_id}", "att_parity0unknown")
        .replace("{request_id}", "req_parity0unknown")
        .replace("{secret}", "rps_parity0unknown")
        .replace("{key}", "parity.key")
}

/// What is compared of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    status: u16,
    content_type: Option<String>,
    /// `error.code` of a JSON error body: a string (the API's) or a number (MCP's JSON-RPC).
    code: Option<String>,
    allow: Option<String>,
    location: Option<String>,
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.status)?;
        for (name, v) in [
            ("code", &self.code),
            ("Allow", &self.allow),
            ("Location", &self.location),
            ("Content-Type", &self.content_type),
        ] {
            if let Some(v) = v {
                write!(f, " {name}={v}")?;
            }
        }
        Ok(())
    }
}

/// One request: `method` on `path`, a `text/plain` body unless it is a GET or HEAD, and the
/// browser's `Accept` when `html`. Behind the gateway, an answer that is not agentaddress's (no
/// answer, or a 5xx without the API's error body: cargo-lambda's emulator now and then drops
/// one) is asked again; none of these requests changes anything.
async fn ask(
    http: &reqwest::Client, base: &str, method: &str, path: &str, html: bool, gateway: bool,
) -> Answer {
    let url = format!("{base}{path}");
    let m = reqwest::Method::from_bytes(method.as_bytes())
        .unwrap_or_else(|e| panic!("method {method}: {e}"));
    let mut attempt = 0;
    loop {
        let mut req = http.request(m.clone(), &url);
        if !matches!(method, "GET" | "HEAD") {
            req = req.header("content-type", "text/plain").body("parity");
        }
        if html {
            req = req.header("accept", BROWSER);
        }
        let sent = req.send().await;
        let resp = match sent {
            Ok(resp) => resp,
            Err(e) if gateway && attempt < 3 => {
                attempt += 1;
                eprintln!("parity: no answer to {method} {url}: {e}; retry {attempt}");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            Err(e) => panic!("{method} {url}: {e} ({e:?})"),
        };
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let status = resp.status().as_u16();
        let (content_type, allow, location) =
            (header("content-type"), header("allow"), header("location"));
        let bytes = resp.bytes().await.unwrap_or_default();
        let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        let code = match &json["error"]["code"] {
            serde_json::Value::Null => None,
            serde_json::Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        };
        if gateway && status >= 500 && code.is_none() && attempt < 3 {
            attempt += 1;
            eprintln!(
                "parity: the gateway answered {status} to {method} {url}: {}; retry {attempt}",
                String::from_utf8_lossy(&bytes)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        return Answer {
            status,
            // A HEAD answer's headers are the GET's, but the emulator may drop them with the
            // body: compared on the GET.
            content_type: if method == "HEAD" { None } else { content_type },
            code,
            allow,
            location,
        };
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_method_of_every_path_is_answered_alike() {
    let lambda = env("AGENTADDRESS_LAMBDA_URL");
    let secret = env("AGENTADDRESS_TEST_INGEST_SECRET");
    let dir = tempfile::tempdir().expect("temp dir");
    let (_serve, serve) = common::spawn_serve(
        &dir.path().join("parity.db"),
        "127.0.0.1:0",
        &["--email-ingest-secret", &secret],
    )
    .await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("HTTP client");

    let mut paths: BTreeSet<String> = RouteGroup::ALL
        .iter()
        .flat_map(|g| g.endpoints())
        .map(|(_, p)| p)
        .collect();
    for extra in [
        "/",
        "/favicon.ico",
        "/inbox/",
        "/api/mcp",
        "/api/mcp/",
        "/api/v1/nothing/here",
        "/nothing",
    ] {
        paths.insert(extra.to_owned());
    }
    let mut cases: Vec<(&str, String, bool)> = paths
        .iter()
        .flat_map(|p| METHODS.iter().map(move |m| (*m, p.clone(), false)))
        .collect();
    cases.push(("GET", "/".into(), true));
    cases.push(("HEAD", "/".into(), true));

    let answers: Vec<_> = futures::stream::iter(cases.iter())
        .map(|(method, path, html)| {
            let (http, serve, lambda) = (&http, &serve, &lambda);
            async move {
                let concrete = concrete(path);
                let s = ask(http, serve, method, &concrete, *html, false).await;
                let l = ask(http, lambda, method, &concrete, *html, true).await;
                (*method, path.clone(), *html, s, l)
            }
        })
        .buffered(8)
        .collect()
        .await;

    let mut differences = Vec::new();
    for (method, path, html, s, l) in &answers {
        let documented = DOCUMENTED
            .iter()
            .find(|(m, p, ..)| m == method && p == path);
        let what = format!(
            "{method} {path}{}",
            if *html { " (Accept: HTML)" } else { "" }
        );
        let alike = match documented {
            Some((.., on_serve, on_lambda, _)) => (s.status, l.status) == (*on_serve, *on_lambda),
            None => s == l,
        };
        if !alike {
            let why = documented.map_or(String::new(), |(.., on_serve, on_lambda, why)| {
                format!("; docs/API.md {why}: serve {on_serve}, lambda {on_lambda}")
            });
            differences.push(format!("{what}: serve {s}, lambda {l}{why}"));
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} requests were answered differently:\n{}",
        differences.len(),
        answers.len(),
        differences.join("\n")
    );

    // What the comparison must have seen (on both, since they agree).
    let of = |method: &str, path: &str, html: bool| {
        answers
            .iter()
            .find(|(m, p, h, ..)| *m == method && p == path && *h == html)
            .map(|(.., s, _)| s.clone())
            .unwrap_or_else(|| panic!("{method} {path} was not asked"))
    };
    let mcp = of("GET", "/api/mcp", false);
    assert_eq!(
        (mcp.status, mcp.code.as_deref(), mcp.allow.as_deref()),
        (405, Some("method_not_allowed"), Some("POST")),
        "GET /api/mcp: {mcp}"
    );
    let home = of("GET", "/", false);
    assert_eq!(home.status, 200, "{home}");
    assert!(
        home.content_type
            .as_deref()
            .is_some_and(|c| c.starts_with("application/json")),
        "{home}"
    );
    let page = of("GET", "/", true);
    assert!(
        page.content_type
            .as_deref()
            .is_some_and(|c| c.starts_with("text/html")),
        "{page}"
    );
    let icon = of("GET", "/favicon.ico", false);
    assert_eq!(
        (icon.status, icon.content_type.as_deref()),
        (200, Some("image/x-icon"))
    );
    let slash = of("GET", "/inbox/", false);
    assert_eq!(
        (slash.status, slash.location.as_deref()),
        (308, Some("/inbox"))
    );
    let unknown = of("GET", "/nothing", false);
    assert_eq!(unknown.code.as_deref(), Some("not_found"), "{unknown}");
    let statuses: BTreeSet<u16> = answers.iter().map(|(.., s, _)| s.status).collect();
    for expected in [200, 401, 404, 405] {
        assert!(
            statuses.contains(&expected),
            "no {expected} among {statuses:?}"
        );
    }
    println!(
        "parity: {} requests answered alike by serve and the Lambda stack ({} paths × {} methods, \
         and `/` for a browser); documented differences: {}",
        answers.len(),
        paths.len(),
        METHODS.len(),
        DOCUMENTED.len()
    );
}
