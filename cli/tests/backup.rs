//! `agentaddress backup` (README, "Backups"): a copy taken while `serve` is under write load
//! restores to a server that has every write acknowledged before the backup began, and a
//! consistent feed — a prefix of the live one, whose state events replay to the restored state
//! (the invariant checker's replay rule). Refusals leave everything as it was.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentaddress_blackbox::{Address, Client};
use serde_json::{json, Value};

const WRITERS: usize = 4;

/// What a writer had acknowledged, with when the acknowledgement arrived.
#[derive(Default)]
struct Acked {
    /// (address index, marker, when)
    deliveries: Vec<(usize, String, Instant)>,
    /// (address index, key, revision, when)
    puts: Vec<(usize, String, u64, Instant)>,
}

fn rebase(a: &Address, from: &str, to: &str) -> Address {
    let r = |s: &str| s.replacen(from, to, 1);
    Address {
        id: a.id.clone(),
        token: a.token.clone(),
        inbox_url: r(&a.inbox_url),
        root: r(&a.root),
        events_url: r(&a.events_url),
        state_url: r(&a.state_url),
        created: a.created.clone(),
    }
}

/// One writer: deliveries with an Idempotency-Key and state writes to its own key, until
/// `stop`; records what was acknowledged.
async fn writer(
    c: Client, a: Address, ai: usize, w: usize, acked: Arc<Mutex<Acked>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut n = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        n += 1;
        let marker = format!("w{w}-{n}");
        let r = c
            .deliver(
                &a,
                &json!({"type": "backup.test", "data": {"marker": marker}}),
                Some(&marker),
            )
            .await;
        if r.status == 202 || r.status == 200 {
            let now = Instant::now();
            acked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .deliveries
                .push((ai, marker, now));
        }
        let key = format!("writer-{w}");
        let r = c
            .json(
                "PUT",
                &format!("{}/{key}", a.state_url),
                Some(&a.token),
                &json!({"value": n}),
            )
            .await;
        if r.status == 200 {
            let rev = r.json["revision"].as_u64().unwrap_or(0);
            let now = Instant::now();
            acked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .puts
                .push((ai, key, rev, now));
        }
    }
}

/// The state an address's feed replays to: key → (revision, value).
fn replay(events: &[Value]) -> BTreeMap<String, (u64, Value)> {
    let mut state = BTreeMap::new();
    for e in events {
        let d = &e["data"];
        let key = d["key"].as_str().unwrap_or_default().to_owned();
        match e["type"].as_str() {
            Some("state.updated") => {
                state.insert(
                    key,
                    (d["revision"].as_u64().unwrap_or(0), d["value"].clone()),
                );
            }
            Some("state.deleted") => {
                state.remove(&key);
            }
            _ => {}
        }
    }
    state
}

fn backup(db: &Path, out: &Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_agentaddress"))
        .arg("backup")
        .arg("--db")
        .arg(db)
        .arg("--out")
        .arg(out)
        .output()
        .expect("cannot run agentaddress backup")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_under_write_load_restores_every_acknowledged_write_and_a_consistent_feed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("live.db");
    let copy = dir.path().join("backup.db");
    let limits = [
        "--polls-per-minute",
        "100000",
        "--max-retained-events",
        "1000000",
    ];
    let (mut live, base) = common::spawn_serve(&db, "127.0.0.1:0", &limits).await;
    let c = Client::new(&base);
    let mut addresses = Vec::new();
    for _ in 0..2 {
        addresses.push(c.new_address().await);
    }

    let acked = Arc::new(Mutex::new(Acked::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let ai = w % addresses.len();
            tokio::spawn(writer(
                c.clone(),
                addresses[ai].clone(),
                ai,
                w,
                acked.clone(),
                stop.clone(),
            ))
        })
        .collect();
    // The backup starts once the writers have had 50 deliveries acknowledged (however slow
    // the machine), and they go on writing during it and for a second after.
    let busy = Instant::now();
    while acked
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .deliveries
        .len()
        < 50
    {
        assert!(
            busy.elapsed() < Duration::from_secs(60),
            "the writers did not get 50 deliveries acknowledged in a minute"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let began = Instant::now();
    let (db2, copy2) = (db.clone(), copy.clone());
    let out = tokio::task::spawn_blocking(move || backup(&db2, &copy2))
        .await
        .expect("backup task");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "backup failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("integrity check ok"), "{stdout}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in tasks {
        t.await.expect("writer");
    }
    // The live feeds, for the prefix check.
    let mut live_feeds = Vec::new();
    for a in &addresses {
        live_feeds.push(c.read_all(a).await);
    }
    let _ = live.kill().await;

    // Restore: serve the copy.
    let (_restored, base2) = common::spawn_serve(&copy, "127.0.0.1:0", &limits).await;
    let c2 = Client::new(&base2);
    let acked = std::mem::take(&mut *acked.lock().unwrap_or_else(|e| e.into_inner()));
    let (mut before, mut after) = (0usize, 0usize);
    for (ai, a) in addresses.iter().enumerate() {
        let a2 = rebase(a, &base, &base2);
        let feed = c2.read_all(&a2).await;
        // Gapless from 1, and a prefix of the live feed: the copy is one moment of it.
        for (i, e) in feed.iter().enumerate() {
            assert_eq!(e["sequence"].as_u64(), Some(i as u64 + 1), "gapless: {e}");
            assert_eq!(
                e, &live_feeds[ai][i],
                "the restored feed is a prefix of the live one"
            );
        }
        assert!(!feed.is_empty() && feed.len() <= live_feeds[ai].len());
        // Every delivery acknowledged before the backup began is in it.
        for (i, marker, at) in &acked.deliveries {
            if *i != ai {
                continue;
            }
            let found = feed.iter().any(|e| e["data"]["marker"] == marker.as_str());
            if *at < began {
                before += 1;
                assert!(
                    found,
                    "delivery {marker}, acknowledged before the backup, is missing"
                );
            } else {
                after += usize::from(!found);
            }
        }
        // The state replays from the feed, and holds every write acknowledged before.
        let listed = c2.get(&a2.state_url, Some(&a2.token)).await;
        listed.expect_status(200, "list the restored state");
        let replayed = replay(&feed);
        let keys = listed.json["keys"].as_array().cloned().unwrap_or_default();
        assert_eq!(keys.len(), replayed.len(), "{listed:?}");
        for k in keys {
            let key = k["key"].as_str().unwrap_or_default();
            let got = c2
                .get(&format!("{}/{key}", a2.state_url), Some(&a2.token))
                .await;
            let (rev, value) = replayed.get(key).cloned().unwrap_or_default();
            assert_eq!(got.json["revision"].as_u64(), Some(rev), "{key}");
            assert_eq!(got.json["value"], value, "{key}");
        }
        for (i, key, rev, at) in &acked.puts {
            if *i == ai && *at < began {
                let have = replayed.get(key).map_or(0, |(r, _)| *r);
                assert!(
                    have >= *rev,
                    "{key}: revision {rev} acknowledged before, {have} restored"
                );
            }
        }
    }
    assert!(
        before >= 50,
        "the writers were busy before the backup: {before} deliveries"
    );
    eprintln!(
        "backup: {before} deliveries acknowledged before it, all restored; {after} of those after it are not in it"
    );
}

/// The README's example of `backup`'s line shows the schema version a backup of a database
/// of this build prints (README, "Backups").
#[test]
fn the_readme_shows_the_schema_version_a_backup_prints() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("fresh.db");
    drop(
        agentaddress_sqlite::SqliteStore::open(&db, agentaddress_sqlite::Synchronous::Full)
            .unwrap_or_else(|e| panic!("create {}: {e}", db.display())),
    );
    let out = backup(&db, &dir.path().join("copy.db"));
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{out:?}");
    let version = said
        .split("schema version ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("no schema version in {said:?}"));
    assert!(version.parse::<u32>().is_ok_and(|v| v >= 7), "{said}");
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("read README.md");
    let example = readme
        .lines()
        .find(|l| l.starts_with("# → backed up "))
        .unwrap_or_else(|| panic!("README.md has no example of backup's line"));
    assert!(
        example.contains(&format!(", schema version {version}, ")),
        "README's example says {example:?}; a backup prints schema version {version}"
    );
}

#[test]
fn refusals_change_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    // No such database: no file is made.
    let out = backup(&dir.path().join("none.db"), &dir.path().join("a.db"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    assert!(!dir.path().join("a.db").exists());
    // Not a database of ours.
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, b"not sqlite at all").unwrap();
    let out = backup(&junk, &dir.path().join("b.db"));
    assert!(!out.status.success(), "{out:?}");
    assert!(!dir.path().join("b.db").exists());
    assert!(!dir.path().join("b.db.partial").exists());
    assert_eq!(
        std::fs::read(&junk).unwrap_or_default(),
        b"not sqlite at all"
    );
    // An existing destination is never overwritten.
    let existing = dir.path().join("c.db");
    std::fs::write(&existing, b"keep me").unwrap();
    let out = backup(&junk, &existing);
    assert!(!out.status.success());
    assert_eq!(std::fs::read(&existing).unwrap_or_default(), b"keep me");
}
