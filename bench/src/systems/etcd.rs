//! etcd under test, through its JSON gateway: starting it, the same phases as agentaddress's
//! (a feed is a counter key and event keys appended in one guarded txn; delivery by watch).

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{json, Value};

use super::http::Http;
use super::measure::{
    delay_result, kilobyte, measure_idle, phase, start_in_batches, xorshift, Tally, DELAY_FEEDS,
    DELAY_GAP,
};
use super::process::{free_port, fresh_dir, log_file, Server};
use super::{Config, Delay, Figures, Idle};
use crate::procstat::rss_mb;

async fn start_etcd(bin: &Path, cfg: &Config) -> Result<Server, String> {
    let dir = cfg.work_dir.join("etcd");
    fresh_dir(&dir)?;
    let client = format!("http://127.0.0.1:{}", free_port()?);
    let peer = format!("http://127.0.0.1:{}", free_port()?);
    let child = Command::new(bin)
        .arg("--name")
        .arg("bench")
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--listen-client-urls")
        .arg(&client)
        .arg("--advertise-client-urls")
        .arg(&client)
        .arg("--listen-peer-urls")
        .arg(&peer)
        .arg("--initial-advertise-peer-urls")
        .arg(&peer)
        .arg("--initial-cluster")
        .arg(format!("bench={peer}"))
        .stdin(Stdio::null())
        .stdout(log_file(&dir.join("etcd.out"))?)
        .stderr(log_file(&dir.join("etcd.log"))?)
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start {} (apt-get install etcd-server): {e}",
                bin.display()
            )
        })?;
    let server = Server {
        pid: child.id(),
        child,
        url: client.clone(),
    };
    let http = Http::new(Some(Duration::from_secs(2)));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = http
            .post(
                &format!("{client}/v3/kv/range"),
                None,
                &json!({"key": b64("/")}),
            )
            .await;
        if matches!(r, Ok((200, _))) {
            return Ok(server);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "etcd did not answer within 30 s; see {}",
                dir.join("etcd.log").display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn b64(s: &str) -> String {
    B64.encode(s.as_bytes())
}

fn unb64(v: &Value) -> String {
    v.as_str()
        .and_then(|s| B64.decode(s).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// etcd's JSON gateway writes 64-bit integers as strings.
fn num(v: &Value) -> u64 {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| v.as_u64())
        .unwrap_or(0)
}

struct Etcd {
    http: Http,
    base: String,
}

enum Txn {
    Committed(u64),
    Failed(Value),
}

impl Etcd {
    async fn call(&self, path: &str, body: &Value) -> Result<Value, String> {
        match self
            .http
            .post(&format!("{}{path}", self.base), None, body)
            .await?
        {
            (200, b) => Ok(b),
            (s, b) => Err(format!("etcd {path}: {s} {b}")),
        }
    }

    /// A transaction: `compare` must all hold for `success` to run, else `failure` runs.
    async fn txn(&self, compare: Value, success: Value, failure: Value) -> Result<Txn, String> {
        let b = self
            .call(
                "/v3/kv/txn",
                &json!({"compare": compare, "success": success, "failure": failure}),
            )
            .await?;
        if b["succeeded"] == true {
            Ok(Txn::Committed(num(&b["header"]["revision"])))
        } else {
            Ok(Txn::Failed(b))
        }
    }
}

fn mod_equals(key: &str, rev: u64) -> Value {
    json!([{"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": rev.to_string()}])
}

fn put(key: &str, value: &str) -> Value {
    json!({"request_put": {"key": b64(key), "value": b64(value)}})
}

fn range(key: &str) -> Value {
    json!({"request_range": {"key": b64(key)}})
}

/// The first key of a failed transaction's range: (mod_revision, value).
fn ranged(b: &Value) -> (u64, String) {
    let kv = &b["responses"][0]["response_range"]["kvs"][0];
    (num(&kv["mod_revision"]), unb64(&kv["value"]))
}

/// Appends `payload` to the feed at `prefix`: the counter key and the event key in one txn
/// guarded by the counter's `mod_revision`. Returns the event key.
async fn etcd_append(
    e: &Etcd, prefix: &str, counter: &mut (u64, u64), payload: &str,
) -> Result<(String, u32), String> {
    let mut conflicts = 0;
    loop {
        let (rev, n) = *counter;
        let key = format!("{prefix}e/{:012}", n + 1);
        let ck = format!("{prefix}n");
        match e
            .txn(
                mod_equals(&ck, rev),
                json!([put(&ck, &(n + 1).to_string()), put(&key, payload)]),
                json!([range(&ck)]),
            )
            .await?
        {
            Txn::Committed(r) => {
                *counter = (r, n + 1);
                return Ok((key, conflicts));
            }
            Txn::Failed(b) => {
                conflicts += 1;
                let (r, v) = ranged(&b);
                *counter = (r, v.parse().unwrap_or(0));
            }
        }
    }
}

pub async fn run_etcd(bin: &Path, cfg: &Config) -> Result<Figures, String> {
    let server = start_etcd(bin, cfg).await?;
    println!("bench: etcd at {} (pid {})", server.url, server.pid);
    let etcd = Arc::new(Etcd {
        http: Http::new(Some(Duration::from_secs(60))),
        base: server.url.clone(),
    });
    let mut f = Figures::default();
    let c = cfg.clients;
    let value = kilobyte().to_string();

    // cas: the same fours and keys as agentaddress.
    (f.cas, f.cas_conflicts_per_s) = phase(cfg, server.pid, c, &mut f.errors, |i, deadline| {
        let e = Arc::clone(&etcd);
        let value = value.clone();
        async move {
            let keys = [
                format!("/s/{}/cold-{i}", i / 4),
                format!("/s/{}/hot", i / 4),
            ];
            let mut revs = [0u64; 2];
            let mut t = Tally::new();
            let mut n = 0u64;
            while Instant::now() < deadline {
                let k = usize::from(n % 4 == 3);
                n += 1;
                loop {
                    let at = Instant::now();
                    let r = e
                        .txn(
                            mod_equals(&keys[k], revs[k]),
                            json!([put(&keys[k], &value)]),
                            json!([range(&keys[k])]),
                        )
                        .await;
                    t.time(at);
                    match r {
                        Ok(Txn::Committed(rev)) => {
                            revs[k] = rev;
                            t.ok += 1;
                            break;
                        }
                        Ok(Txn::Failed(b)) => {
                            t.conflicts += 1;
                            revs[k] = ranged(&b).0;
                            if Instant::now() >= deadline {
                                break;
                            }
                        }
                        Err(err) => {
                            t.error(format!("cas: {err}"));
                            break;
                        }
                    }
                }
            }
            t
        }
    })
    .await;

    // deliver: an append txn per event on each agent's own feed.
    let body = json!({"type": "bench.delivery", "data": kilobyte()}).to_string();
    (f.deliver, _) = phase(cfg, server.pid, c, &mut f.errors, |i, deadline| {
        let e = Arc::clone(&etcd);
        let body = body.clone();
        async move {
            let mut t = Tally::new();
            let mut counter = (0u64, 0u64);
            while Instant::now() < deadline {
                let at = Instant::now();
                let r = etcd_append(&e, &format!("/f/{i}/"), &mut counter, &body).await;
                t.time(at);
                match r {
                    Ok(_) => t.ok += 1,
                    Err(err) => t.error(format!("deliver: {err}")),
                }
            }
            t
        }
    })
    .await;

    // read: ranges of 10 event keys from a random point.
    let mut lengths = Vec::new();
    for i in 0..c {
        let b = etcd
            .call("/v3/kv/range", &json!({"key": b64(&format!("/f/{i}/n"))}))
            .await?;
        lengths.push(unb64(&b["kvs"][0]["value"]).parse::<u64>().unwrap_or(0));
    }
    (f.read, _) = phase(cfg, server.pid, c, &mut f.errors, |i, deadline| {
        let (e, len) = (Arc::clone(&etcd), lengths[i]);
        async move {
            let mut t = Tally::new();
            let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ (i as u64 + 1);
            while Instant::now() < deadline {
                x = xorshift(x);
                let after = x % len.saturating_sub(10).max(1);
                let want = len.saturating_sub(after).min(10) as usize;
                let at = Instant::now();
                let r = e
                    .call(
                        "/v3/kv/range",
                        &json!({
                            "key": b64(&format!("/f/{i}/e/{:012}", after + 1)),
                            "range_end": b64(&format!("/f/{i}/e0")),
                            "limit": 10,
                        }),
                    )
                    .await;
                t.time(at);
                match r {
                    Ok(b) if b["kvs"].as_array().map_or(0, Vec::len) == want => t.ok += 1,
                    Ok(b) => t.error(format!(
                        "read: {} keys where {want} were expected",
                        b["kvs"].as_array().map_or(0, Vec::len)
                    )),
                    Err(err) => t.error(format!("read: {err}")),
                }
            }
            t
        }
    })
    .await;
    f.peak_rss_mb = rss_mb(server.pid).1;

    f.delay = etcd_delay(&etcd, cfg, &mut f.errors).await?;
    f.idle = etcd_idle(&server, cfg).await;
    Ok(f)
}

/// Reads newline-separated JSON messages from a watch stream; calls `on` with each and the
/// moment it arrived until `on` returns false or the stream ends.
async fn watch(
    http: &Http, base: &str, create: Value, mut on: impl FnMut(&Value, Instant) -> bool,
) -> Result<(), String> {
    let mut resp = http
        .c
        .post(format!("{base}/v3/watch"))
        .json(&json!({"create_request": create}))
        .send()
        .await
        .map_err(|e| format!("watch: {e}"))?;
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| format!("watch: {e}"))? {
        let now = Instant::now();
        buf.extend_from_slice(&chunk);
        let mut stream = serde_json::Deserializer::from_slice(&buf).into_iter::<Value>();
        let mut used = 0;
        while let Some(Ok(msg)) = stream.next() {
            used = stream.byte_offset();
            if !on(&msg, now) {
                return Ok(());
            }
        }
        buf.drain(..used);
    }
    Ok(())
}

async fn etcd_delay(
    etcd: &Arc<Etcd>, cfg: &Config, errors: &mut Vec<String>,
) -> Result<Delay, String> {
    let watching = Arc::new(AtomicUsize::new(0));
    let streams = Http::new(None);
    let consumers: Vec<_> = (0..DELAY_FEEDS)
        .map(|m| {
            let streams = streams.clone();
            let base = etcd.base.clone();
            let watching = Arc::clone(&watching);
            tokio::spawn(async move {
                let mut seen = HashMap::new();
                let create = json!({
                    "key": b64(&format!("/d/{m}/e/")),
                    "range_end": b64(&format!("/d/{m}/e0")),
                });
                watch(&streams, &base, create, |msg, now| {
                    if msg["result"]["created"] == true {
                        watching.fetch_add(1, Ordering::Relaxed);
                    }
                    for ev in msg["result"]["events"].as_array().into_iter().flatten() {
                        let key = unb64(&ev["kv"]["key"]);
                        if key.ends_with("/stop") {
                            return false;
                        }
                        seen.insert(key, now);
                    }
                    true
                })
                .await
                .map(|()| seen)
            })
        })
        .collect();
    let ready = Instant::now() + Duration::from_secs(10);
    while watching.load(Ordering::Relaxed) < DELAY_FEEDS && Instant::now() < ready {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let body = json!({"type": "bench.delay", "data": kilobyte()}).to_string();
    let mut counters = [(0u64, 0u64); DELAY_FEEDS];
    let mut sent = HashMap::new();
    let mut tick = tokio::time::interval(DELAY_GAP);
    for s in 0..cfg.delay_samples {
        tick.tick().await;
        let m = s % DELAY_FEEDS;
        match etcd_append(etcd, &format!("/d/{m}/"), &mut counters[m], &body).await {
            Ok((key, _)) => {
                sent.insert(key, Instant::now());
            }
            Err(e) => errors.push(format!("delay append: {e}")),
        }
    }
    for m in 0..DELAY_FEEDS {
        etcd.call(
            "/v3/kv/put",
            &json!({"key": b64(&format!("/d/{m}/e/stop")), "value": b64("stop")}),
        )
        .await?;
    }
    Ok(delay_result(consumers, &sent, "watch", errors).await)
}

async fn etcd_idle(server: &Server, cfg: &Config) -> Idle {
    let streams = Http::new(None);
    let created = Arc::new(AtomicUsize::new(0));
    let watches = start_in_batches((0..cfg.idle_polls).collect(), |k| {
        let streams = streams.clone();
        let base = server.url.clone();
        let created = Arc::clone(&created);
        async move {
            watch(
                &streams,
                &base,
                json!({"key": b64(&format!("/idle/{k}"))}),
                |msg, _| {
                    if msg["result"]["created"] == true {
                        created.fetch_add(1, Ordering::Relaxed);
                    }
                    true
                },
            )
            .await
        }
    })
    .await;
    measure_idle(server.pid, &watches, Some(&created)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_numbers_and_ranges_are_read_from_the_gateway_json() {
        let b = json!({"responses": [{"response_range": {"kvs": [
            {"key": b64("k"), "mod_revision": "42", "value": b64("7")}
        ]}}]});
        assert_eq!(ranged(&b), (42, "7".to_owned()));
        assert_eq!(
            ranged(&json!({"responses": [{"response_range": {}}]})),
            (0, String::new())
        );
        assert_eq!(num(&json!("18446744073709551615")), u64::MAX);
    }
}
