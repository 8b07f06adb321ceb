//! Process-level behaviour of `agentaddress serve`: graceful shutdown on SIGTERM/SIGINT, and
//! durability across SIGKILL at an arbitrary moment under load.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentaddress_blackbox::Client;
use serde_json::json;
use tokio::process::Child;

async fn spawn(db: &Path, listen: &str) -> (Child, String) {
    common::spawn_serve(db, listen, &["--creations-per-minute", "1000"]).await
}

fn signal(child: &Child, sig: &str) {
    let pid = child.id().expect("server pid");
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
}

async fn graceful(sig: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut child, base) = spawn(&dir.path().join("a.db"), "127.0.0.1:0").await;
    let c = Client::new(&base);
    let a = c.new_address().await;
    let poller = {
        let c = c.clone();
        let a = a.clone();
        tokio::spawn(async move { c.events(&a, "after=0&wait=25").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let signalled = Instant::now();
    signal(&child, sig);
    let r = poller.await.expect("poller task");
    assert_eq!(r.status, 200, "a waiting long poll is answered: {}", r.text);
    assert_eq!(r.json["events"], json!([]));
    assert!(
        signalled.elapsed() < Duration::from_secs(5),
        "answered at shutdown, not at the wait deadline"
    );
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("the server exits after shutdown")
        .expect("wait");
    assert!(status.success(), "clean exit: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_answers_waiting_polls_and_exits_cleanly() {
    graceful("-TERM").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigint_answers_waiting_polls_and_exits_cleanly() {
    graceful("-INT").await;
}

/// Eight senders deliver as fast as they can; the server is SIGKILLed mid-stream, three times,
/// each time once a round's worth of deliveries has been answered (a count, not a delay, so a
/// loaded machine still applies load before the kill).
/// Every delivery answered 202 before a kill is in the feed afterwards with the same id and
/// sequence, the feed is gapless, and retried keys are answered as duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_under_load_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("crash.db");
    let (mut child, base) = spawn(&db, "127.0.0.1:0").await;
    let listen = base.trim_start_matches("http://").to_owned();
    let c = Client::new(&base);
    let addresses = vec![c.new_address().await, c.new_address().await];
    let mut acknowledged: BTreeMap<String, (String, String, u64)> = BTreeMap::new();
    for round in 0..3 {
        let answered = Arc::new(AtomicUsize::new(0));
        let senders: Vec<_> = (0..8)
            .map(|s| {
                let c = c.clone();
                let a = addresses[s % 2].clone();
                let answered = answered.clone();
                tokio::spawn(async move {
                    let mut ok = Vec::new();
                    for n in 0.. {
                        let key = format!("r{round}-s{s}-n{n}");
                        let body = json!({"type": "load", "data": {"key": key}});
                        let r = match tokio::time::timeout(
                            Duration::from_secs(5),
                            c.try_deliver(&a, &body, Some(&key)),
                        )
                        .await
                        {
                            Ok(Some(r)) => r,
                            _ => break,
                        };
                        if r.status != 202 {
                            break;
                        }
                        let id = r.json["event"]["id"].as_str().unwrap_or("").to_owned();
                        let seq = r.json["event"]["sequence"].as_u64().unwrap_or(0);
                        ok.push((key, a.id.clone(), id, seq));
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                    ok
                })
            })
            .collect();
        let target = 50 + 25 * round;
        let waiting = Instant::now();
        while answered.load(Ordering::Relaxed) < target {
            assert!(
                waiting.elapsed() < Duration::from_secs(60),
                "round {round}: only {} deliveries answered in 60 s",
                answered.load(Ordering::Relaxed)
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        child.start_kill().expect("SIGKILL");
        child.wait().await.expect("reap");
        for s in senders {
            for (key, addr, id, seq) in s.await.expect("sender") {
                acknowledged.insert(key, (addr, id, seq));
            }
        }
        let (next, next_base) = spawn(&db, &listen).await;
        assert_eq!(next_base, base, "restarted on the same port");
        child = next;
    }
    assert!(
        acknowledged.len() > 100,
        "load was applied: {}",
        acknowledged.len()
    );
    let c = Client::new(&base);
    for a in &addresses {
        let feed = c.read_all(a).await;
        let seqs: Vec<u64> = feed.iter().filter_map(|e| e["sequence"].as_u64()).collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "gapless");
        let by_key: BTreeMap<String, (String, u64)> = feed
            .iter()
            .map(|e| {
                (
                    e["data"]["key"].as_str().unwrap_or("").to_owned(),
                    (
                        e["id"].as_str().unwrap_or("").to_owned(),
                        e["sequence"].as_u64().unwrap_or(0),
                    ),
                )
            })
            .collect();
        assert_eq!(by_key.len(), feed.len(), "each key produced one event");
        for (key, (addr, id, seq)) in &acknowledged {
            if addr == &a.id {
                assert_eq!(
                    by_key.get(key),
                    Some(&(id.clone(), *seq)),
                    "acknowledged delivery {key} survived the crash"
                );
            }
        }
    }
    let (key, (addr, id, _)) = acknowledged.iter().next().expect("one delivery");
    let a = addresses.iter().find(|a| &a.id == addr).expect("address");
    let body = json!({"type": "load", "data": {"key": key}});
    let r = c.deliver(a, &body, Some(key)).await;
    assert_eq!(
        r.status, 200,
        "a retried key is a duplicate after the crash"
    );
    assert_eq!(r.json["event"]["id"], id.as_str());
}
