//! agentaddress serve under test: starting it (in each variant), its addresses, and its
//! phases (CAS, delivery, reads, delay, idle long polls over HTTP/1.1 and HTTP/2).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;

use super::email::{email_phase, MailTarget};
use super::http::Http;
use super::measure::{
    delay_result, kilobyte, measure_idle, phase, start_in_batches, xorshift, Tally, DELAY_FEEDS,
    DELAY_GAP,
};
use super::process::{fresh_dir, log_file, Server};
use super::{Config, Delay, Figures, Idle, Variant};
use crate::procstat::rss_mb;

async fn start_agentaddress(bin: &Path, cfg: &Config, v: Variant) -> Result<Server, String> {
    Ok(start_agentaddress_with(bin, cfg, v, false).await?.0)
}

/// Starts serve; with `smtp`, its SMTP door too, whose address is returned.
async fn start_agentaddress_with(
    bin: &Path, cfg: &Config, v: Variant, smtp: bool,
) -> Result<(Server, Option<String>), String> {
    let dir = cfg.work_dir.join(format!(
        "agentaddress-{}{}",
        v.label().replace(' ', "-"),
        if smtp { "-smtp" } else { "" }
    ));
    fresh_dir(&dir)?;
    let mut cmd = Command::new(bin);
    cmd.arg("serve")
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--db")
        .arg(dir.join("bench.db"))
        // Durability as shipped; quotas and rate limits out of the way of a load test.
        .env("AGENTADDRESS_SQLITE_SYNCHRONOUS", "full")
        .env("AGENTADDRESS_POLLS_PER_MINUTE", "1000000000")
        .env("AGENTADDRESS_CREATIONS_PER_MINUTE", "1000000000")
        .env("AGENTADDRESS_MAX_RETAINED_EVENTS", "10000000")
        // Every benchmark client connects from 127.0.0.1: no per-IP cap; the global cap is
        // whatever the descriptor limit allows.
        .env("AGENTADDRESS_MAX_CONNECTIONS", "1000000")
        .env("AGENTADDRESS_MAX_CONNECTIONS_PER_IP", "0")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file(&dir.join("serve.log"))?);
    if smtp {
        // Every sender connects from 127.0.0.1, several connections each (lettre's pool).
        cmd.arg("--smtp-listen")
            .arg("127.0.0.1:0")
            .env("AGENTADDRESS_SMTP_MAX_CONNECTIONS_PER_IP", "0")
            .env("AGENTADDRESS_SMTP_MESSAGES_PER_MINUTE_PER_IP", "0");
    }
    for (k, val) in v.env() {
        cmd.env(k, val);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let pid = child.id();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (smtp_tx, smtp_rx) = tokio::sync::oneshot::channel();
    // Reads the "listening on" lines, then keeps draining stdout so the server never blocks.
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        let mut smtp_tx = Some(smtp_tx);
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("agentaddress listening on ") {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(url.trim().to_owned());
                }
            } else if let Some(addr) = line.strip_prefix("agentaddress smtp listening on ") {
                if let Some(tx) = smtp_tx.take() {
                    let _ = tx.send(addr.trim().to_owned());
                }
            }
        }
    });
    let mut server = Server {
        child,
        pid,
        url: String::new(),
    };
    server.url = tokio::time::timeout(Duration::from_secs(30), rx)
        .await
        .map_err(|_| "the server did not print its URL within 30 s".to_owned())?
        .map_err(|_| format!("the server exited; see {}", dir.join("serve.log").display()))?;
    let smtp_addr = if smtp {
        Some(
            tokio::time::timeout(Duration::from_secs(30), smtp_rx)
                .await
                .map_err(|_| "the server did not print its SMTP address within 30 s".to_owned())?
                .map_err(|_| "the server printed no SMTP address".to_owned())?,
        )
    } else {
        None
    };
    Ok((server, smtp_addr))
}

#[derive(Debug, Clone)]
struct Address {
    root: String,
    token: String,
    inbox: String,
    email: String,
}

async fn create_addresses(http: &Http, base: &str, n: usize) -> Result<Vec<Address>, String> {
    let url = format!("{base}/api/v1/addresses");
    let results: Vec<Result<Address, String>> = futures::stream::iter(0..n)
        .map(|_| {
            let http = http.clone();
            let url = url.clone();
            async move {
                let (status, b) = http.post(&url, None, &json!({})).await?;
                if status != 201 {
                    return Err(format!("create address: {status} {b}"));
                }
                let root = b["endpoints"]["events_url"]
                    .as_str()
                    .and_then(|u| u.strip_suffix("/events"))
                    .unwrap_or_default()
                    .to_owned();
                Ok(Address {
                    root,
                    token: b["credentials"]["read_token"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    inbox: b["endpoints"]["inbox_url"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    email: b["address"]["email"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                })
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    results.into_iter().collect()
}

pub async fn run_agentaddress(bin: &Path, cfg: &Config, v: Variant) -> Result<Figures, String> {
    let server = start_agentaddress(bin, cfg, v).await?;
    println!(
        "bench: agentaddress ({}) at {} (pid {})",
        v.label(),
        server.url,
        server.pid
    );
    let http = Http::new(Some(Duration::from_secs(60)));
    let mut f = Figures::default();
    let c = cfg.clients;

    // cas: agents in fours share an address; each writes its own cold key three times for
    // every write to the address's shared hot key.
    let cas_addrs = create_addresses(&http, &server.url, c.div_ceil(4)).await?;
    (f.cas, f.cas_conflicts_per_s) = phase(cfg, server.pid, c, &mut f.errors, |i, deadline| {
        let a = cas_addrs[(i / 4) % cas_addrs.len()].clone();
        let http = http.clone();
        async move {
            let value = kilobyte();
            let urls = [
                format!("{}/state/cold-{i}", a.root),
                format!("{}/state/hot", a.root),
            ];
            let mut revs = [0u64; 2];
            let mut t = Tally::new();
            let mut n = 0u64;
            while Instant::now() < deadline {
                let k = usize::from(n % 4 == 3);
                n += 1;
                loop {
                    let at = Instant::now();
                    let r = http
                        .put(
                            &urls[k],
                            &a.token,
                            &json!({"value": value, "if_revision": revs[k]}),
                        )
                        .await;
                    t.time(at);
                    match r {
                        Ok((200, b)) => {
                            revs[k] = b["revision"].as_u64().unwrap_or(0);
                            t.ok += 1;
                            break;
                        }
                        Ok((409, b)) if b["error"]["code"] == "revision_conflict" => {
                            t.conflicts += 1;
                            revs[k] = b["error"]["current_revision"].as_u64().unwrap_or(0);
                            if Instant::now() >= deadline {
                                break;
                            }
                        }
                        Ok((s, b)) => {
                            t.error(format!("cas: {s} {b}"));
                            break;
                        }
                        Err(e) => {
                            t.error(format!("cas: {e}"));
                            break;
                        }
                    }
                }
            }
            t
        }
    })
    .await;

    // deliver: one address per agent.
    let feeds = create_addresses(&http, &server.url, c).await?;
    (f.deliver, _) = phase(cfg, server.pid, c, &mut f.errors, |i, deadline| {
        let a = feeds[i].clone();
        let http = http.clone();
        async move {
            let body = json!({"type": "bench.delivery", "data": kilobyte()});
            let mut t = Tally::new();
            while Instant::now() < deadline {
                let at = Instant::now();
                let r = http.post(&a.inbox, None, &body).await;
                t.time(at);
                match r {
                    Ok((202, _)) => t.ok += 1,
                    Ok((s, b)) => t.error(format!("deliver: {s} {b}")),
                    Err(e) => t.error(format!("deliver: {e}")),
                }
            }
            t
        }
    })
    .await;

    // read: pages of 10 from a random point of the feeds just written.
    let mut lengths = Vec::new();
    for a in &feeds {
        let (_, b) = http.get(&a.root, &a.token).await?;
        lengths.push(b["usage"]["last_sequence"].as_u64().unwrap_or(0));
    }
    (f.read, _) = phase(cfg, server.pid, c, &mut f.errors, |i, deadline| {
        let (a, len) = (feeds[i].clone(), lengths[i]);
        let http = http.clone();
        async move {
            let mut t = Tally::new();
            let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ (i as u64 + 1);
            while Instant::now() < deadline {
                x = xorshift(x);
                let after = x % len.saturating_sub(10).max(1);
                let want = len.saturating_sub(after).min(10) as usize;
                let at = Instant::now();
                let r = http
                    .get(
                        &format!("{}/events?after={after}&limit=10", a.root),
                        &a.token,
                    )
                    .await;
                t.time(at);
                match r {
                    Ok((200, b)) if b["events"].as_array().map(Vec::len) == Some(want) => t.ok += 1,
                    Ok((s, b)) => t.error(format!(
                        "read: {s}, {} events where {want} were expected",
                        b["events"].as_array().map_or(0, Vec::len)
                    )),
                    Err(e) => t.error(format!("read: {e}")),
                }
            }
            t
        }
    })
    .await;
    f.peak_rss_mb = rss_mb(server.pid).1;

    // delay: long-poll consumers on 8 feeds, one paced producer.
    f.delay = aa_delay(&http, &server.url, cfg, &mut f.errors).await?;

    // idle: many addresses, one long poll each, nothing arriving; HTTP/1.1 (a connection per
    // poll), then HTTP/2 on a fresh server (polls share connections, and their buffers).
    f.idle = aa_idle(&server, cfg, false).await?;
    if v == Variant::Default {
        drop(server);
        let fresh = start_agentaddress(bin, cfg, v).await?;
        f.idle_http2 = Some(aa_idle(&fresh, cfg, true).await?);
        drop(fresh);
        // email: a fresh server with its SMTP door.
        let (mail_server, smtp) = start_agentaddress_with(bin, cfg, v, true).await?;
        let smtp = smtp.ok_or("no SMTP address")?;
        let addrs = create_addresses(&http, &mail_server.url, c.max(DELAY_FEEDS)).await?;
        let targets: Vec<MailTarget> = addrs
            .into_iter()
            .map(|a| MailTarget {
                root: a.root,
                token: a.token,
                email: a.email,
            })
            .collect();
        f.email =
            Some(email_phase(cfg, mail_server.pid, &smtp, &http, &targets, &mut f.errors).await?);
    }
    Ok(f)
}

async fn aa_delay(
    http: &Http, base: &str, cfg: &Config, errors: &mut Vec<String>,
) -> Result<Delay, String> {
    let addrs = create_addresses(http, base, DELAY_FEEDS).await?;
    let consumers: Vec<_> = addrs
        .iter()
        .map(|a| {
            let a = a.clone();
            let http = http.clone();
            tokio::spawn(async move {
                let mut seen = HashMap::new();
                let mut after = 0u64;
                loop {
                    let r = http
                        .get(
                            &format!("{}/events?after={after}&wait=25", a.root),
                            &a.token,
                        )
                        .await;
                    let now = Instant::now();
                    let b = match r {
                        Ok((200, b)) => b,
                        Ok((s, b)) => return Err(format!("delay poll: {s} {b}")),
                        Err(e) => return Err(format!("delay poll: {e}")),
                    };
                    after = b["next_cursor"].as_u64().unwrap_or(after);
                    for e in b["events"].as_array().into_iter().flatten() {
                        if e["type"] == "bench.stop" {
                            return Ok(seen);
                        }
                        seen.insert(e["id"].as_str().unwrap_or_default().to_owned(), now);
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut sent = HashMap::new();
    let body = json!({"type": "bench.delay", "data": kilobyte()});
    let mut tick = tokio::time::interval(DELAY_GAP);
    for s in 0..cfg.delay_samples {
        tick.tick().await;
        let a = &addrs[s % addrs.len()];
        match http.post(&a.inbox, None, &body).await {
            Ok((202, b)) => {
                sent.insert(
                    b["event"]["id"].as_str().unwrap_or_default().to_owned(),
                    Instant::now(),
                );
            }
            Ok((st, b)) => errors.push(format!("delay deliver: {st} {b}")),
            Err(e) => errors.push(format!("delay deliver: {e}")),
        }
    }
    for a in &addrs {
        http.post(&a.inbox, None, &json!({"type": "bench.stop"}))
            .await?;
    }
    Ok(delay_result(consumers, &sent, "long poll", errors).await)
}

/// Connections the HTTP/2 idle polls share (100 streams each for 10,000 polls: under hyper's
/// default limit of 200 concurrent streams per connection, so every poll reaches the server).
pub const HTTP2_CONNECTIONS: usize = 100;

async fn aa_idle(server: &Server, cfg: &Config, http2: bool) -> Result<Idle, String> {
    let http = Http::new(Some(Duration::from_secs(60)));
    let addrs = create_addresses(&http, &server.url, cfg.idle_polls).await?;
    let clients: Vec<Http> = if http2 {
        (0..HTTP2_CONNECTIONS)
            .map(|_| Http::http2_prior_knowledge(Duration::from_secs(60)))
            .collect::<Result<_, _>>()?
    } else {
        vec![http]
    };
    let addrs: Vec<(usize, Address)> = addrs.into_iter().enumerate().collect();
    let polls = start_in_batches(addrs, |(i, a)| {
        let http = clients[i % clients.len()].clone();
        async move {
            http.get(&format!("{}/events?after=0&wait=25", a.root), &a.token)
                .await
                .map(|_| ())
        }
    })
    .await;
    Ok(measure_idle(server.pid, &polls, None).await)
}
