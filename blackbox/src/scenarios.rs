//! The scenarios. Each takes a [`Client`] for the deployment under test and panics on the first
//! violation of docs/API.md.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{Address, Client, Restartable};

fn seqs(events: &[Value]) -> Vec<u64> {
    events
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap_or(0))
        .collect()
}

/// create → deliver → duplicate → long poll woken by a delivery → ack → state create-only / CAS
/// / conflict / delete → the matching state events → wrong token → delete address.
pub async fn agent_life(c: &Client) {
    let a = c
        .create_address(
            &json!({"name": "deploy watcher", "task_id": "task-42", "expires_in_seconds": 3600}),
        )
        .await;
    let created = &a.created;
    assert!(a.id.starts_with("addr_"), "{}", created);
    assert!(a.token.starts_with("aat_"), "{}", created);
    assert_eq!(created["address"]["name"], "deploy watcher");
    assert_eq!(created["address"]["task_id"], "task-42");
    assert!(created["address"]["expires_at"].is_string());
    let email = created["address"]["email"].as_str().unwrap_or("");
    assert!(email.starts_with(&format!("{}@", a.id)), "{email}");
    assert!(a.inbox_url.contains(&format!("/api/v1/inbox/{}/", a.id)));
    assert_eq!(a.events_url, format!("{}/events", a.root));
    assert_eq!(a.state_url, format!("{}/state", a.root));

    // An empty feed answers at once without wait.
    let r = c.events(&a, "after=0").await;
    r.expect_status(200, "empty feed");
    assert_eq!(
        r.json,
        json!({"events": [], "next_cursor": 0, "has_more": false})
    );

    // First delivery, then its duplicate.
    let body = json!({"type": "demo.callback", "source": "ci", "data": {"build": 7, "ok": true}});
    let first = c.deliver(&a, &body, Some("delivery-1")).await;
    first.expect_status(202, "first delivery");
    assert_eq!(first.json["duplicate"], false);
    assert_eq!(first.json["event"]["sequence"], 1);
    let event_id = first.json["event"]["id"].as_str().unwrap_or("").to_owned();
    let dup = c.deliver(&a, &body, Some("delivery-1")).await;
    dup.expect_status(200, "duplicate delivery");
    assert_eq!(dup.json["duplicate"], true);
    assert_eq!(dup.json["event"], first.json["event"]);
    c.deliver(&a, &json!({"other": 1}), Some("delivery-1"))
        .await
        .expect_error(422, "idempotency_key_reused", "same key, other body");

    // The event as the feed shows it.
    let r = c.events(&a, "after=0").await;
    r.expect_status(200, "feed");
    let events = r.json["events"].as_array().cloned().unwrap_or_default();
    assert_eq!(seqs(&events), vec![1], "{}", r.text);
    let e = &events[0];
    assert_eq!(e["id"], event_id.as_str());
    assert_eq!(e["type"], "demo.callback");
    assert_eq!(e["source"], "ci");
    assert_eq!(e["ingress_surface"], "http");
    assert_eq!(e["data"], json!({"build": 7, "ok": true}));
    assert!(e["acknowledged_at"].is_null());
    assert!(e["received_at"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert_eq!(e["http"]["content_type"], "application/json");
    assert_eq!(r.json["next_cursor"], 1);

    // A long poll waiting on an empty tail wakes when a delivery commits.
    let poller = {
        let c = c.clone();
        let a = a.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let r = c.events(&a, "after=1&wait=20").await;
            (r, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let delivered_at = Instant::now();
    c.deliver(&a, &json!({"type": "demo.second"}), None)
        .await
        .expect_status(202, "second delivery");
    let (r, _) = poller.await.expect("poller task");
    let woke_after = delivered_at.elapsed();
    r.expect_status(200, "long poll");
    assert_eq!(
        seqs(r.json["events"].as_array().map_or(&[][..], |v| v)),
        vec![2]
    );
    assert!(
        woke_after < Duration::from_secs(5),
        "the long poll must wake on delivery, not at its deadline (took {woke_after:?})"
    );

    // Ack, and ack again keeps the first time.
    let ack_url = format!("{}/events/{event_id}/ack", a.root);
    let r = c.send("POST", &ack_url, Some(&a.token), &[], None).await;
    r.expect_status(200, "ack");
    let acked_at = r.json["event"]["acknowledged_at"].clone();
    assert!(acked_at.is_string(), "{}", r.text);
    assert_eq!(r.json["event"]["id"], event_id.as_str());
    let r = c.send("POST", &ack_url, Some(&a.token), &[], None).await;
    r.expect_status(200, "ack again");
    assert_eq!(r.json["event"]["acknowledged_at"], acked_at);
    let r = c
        .get(&format!("{}/events/{event_id}", a.root), Some(&a.token))
        .await;
    r.expect_status(200, "get event");
    assert_eq!(r.json["event"]["acknowledged_at"], acked_at);
    c.send(
        "POST",
        &format!("{}/events/evt_unknownunknown1/ack", a.root),
        Some(&a.token),
        &[],
        None,
    )
    .await
    .expect_error(404, "not_found", "ack unknown event");

    // State: create-only, conflict, CAS, unconditional, delete.
    let key_url = format!("{}/progress", a.state_url);
    let r = c
        .json(
            "PUT",
            &key_url,
            Some(&a.token),
            &json!({"value": {"step": 1}, "if_revision": 0}),
        )
        .await;
    r.expect_status(200, "create-only put");
    let rev1 = r.json["revision"].as_u64().unwrap_or(0);
    assert_eq!(rev1, 3, "revision = sequence of its event: {}", r.text);
    assert_eq!(r.json["event"]["sequence"], rev1);
    assert_eq!(r.json["value"], json!({"step": 1}));
    let r = c
        .json(
            "PUT",
            &key_url,
            Some(&a.token),
            &json!({"value": {"step": 9}, "if_revision": 0}),
        )
        .await;
    r.expect_error(409, "revision_conflict", "create-only on an existing key");
    assert_eq!(r.json["error"]["current_revision"], rev1);
    let r = c
        .json(
            "PUT",
            &key_url,
            Some(&a.token),
            &json!({"value": {"step": 2}, "if_revision": rev1}),
        )
        .await;
    r.expect_status(200, "CAS put");
    let rev2 = r.json["revision"].as_u64().unwrap_or(0);
    assert_eq!(rev2, 4);
    let r = c
        .json(
            "PUT",
            &key_url,
            Some(&a.token),
            &json!({"value": {"step": 3}, "if_revision": rev1}),
        )
        .await;
    r.expect_error(409, "revision_conflict", "stale CAS");
    assert_eq!(r.json["error"]["current_revision"], rev2);
    let r = c
        .send(
            "PUT",
            &key_url,
            Some(&a.token),
            &[
                ("content-type", "application/json"),
                ("if-match", &rev2.to_string()),
            ],
            Some(br#"{"value": {"step": 3}}"#.to_vec()),
        )
        .await;
    r.expect_status(200, "If-Match put");
    let rev3 = r.json["revision"].as_u64().unwrap_or(0);
    let r = c.get(&key_url, Some(&a.token)).await;
    r.expect_status(200, "get key");
    assert_eq!(r.json["value"], json!({"step": 3}));
    assert_eq!(r.json["revision"], rev3);
    let r = c.get(&a.state_url, Some(&a.token)).await;
    r.expect_status(200, "list state");
    assert_eq!(r.json["state_keys"], 1);
    assert_eq!(r.json["keys"][0]["key"], "progress");
    assert_eq!(r.json["keys"][0]["revision"], rev3);
    assert_eq!(r.json["keys"][0]["size"], 8 + 10 + 64);
    let r = c
        .send(
            "DELETE",
            &format!("{key_url}?if_revision={rev2}"),
            Some(&a.token),
            &[],
            None,
        )
        .await;
    r.expect_error(409, "revision_conflict", "stale delete");
    assert_eq!(r.json["error"]["current_revision"], rev3);
    let r = c
        .send(
            "DELETE",
            &format!("{key_url}?if_revision={rev3}"),
            Some(&a.token),
            &[],
            None,
        )
        .await;
    r.expect_status(200, "delete key");
    assert_eq!(r.json["deleted"], true);
    let rev_del = r.json["revision"].as_u64().unwrap_or(0);
    c.get(&key_url, Some(&a.token))
        .await
        .expect_error(404, "not_found", "deleted key");
    c.send("DELETE", &key_url, Some(&a.token), &[], None)
        .await
        .expect_error(404, "not_found", "delete missing key");

    // The feed holds exactly the matching state events, atomically with the writes.
    let all = c.read_all(&a).await;
    assert_eq!(
        seqs(&all),
        (1..=rev_del).collect::<Vec<_>>(),
        "gapless feed"
    );
    let state_events: Vec<(String, Value)> = all
        .iter()
        .filter(|e| e["ingress_surface"] == "state")
        .map(|e| {
            (
                e["type"].as_str().unwrap_or("").to_owned(),
                e["data"].clone(),
            )
        })
        .collect();
    assert_eq!(
        state_events,
        vec![
            (
                "state.updated".into(),
                json!({"key": "progress", "revision": rev1, "value": {"step": 1}})
            ),
            (
                "state.updated".into(),
                json!({"key": "progress", "revision": rev2, "value": {"step": 2}})
            ),
            (
                "state.updated".into(),
                json!({"key": "progress", "revision": rev3, "value": {"step": 3}})
            ),
            (
                "state.deleted".into(),
                json!({"key": "progress", "revision": rev_del})
            ),
        ]
    );
    for e in all.iter().filter(|e| e["ingress_surface"] == "state") {
        assert_eq!(e["source"], "state");
        assert!(e.get("http").is_none(), "state events carry no http record");
    }

    // Wrong and foreign tokens.
    let b = c.new_address().await;
    for (token, what) in [
        (Some("aat_wrong"), "wrong token"),
        (None, "missing token"),
        (Some(b.token.as_str()), "another address's token"),
    ] {
        c.get(&a.events_url, token)
            .await
            .expect_error(401, "unauthorized", what);
        c.get(&a.root, token)
            .await
            .expect_error(401, "unauthorized", what);
    }
    c.get(
        &format!("{}/api/v1/addresses/addr_doesnotexist/events", c.base),
        Some(&a.token),
    )
    .await
    .expect_error(401, "unauthorized", "unknown address");
    let wrong_inbox = format!("{}/api/v1/inbox/{}/ais_wrong", c.base, a.id);
    c.send("POST", &wrong_inbox, None, &[], Some(b"{}".to_vec()))
        .await
        .expect_error(404, "not_found", "wrong inbox secret");
    c.send("POST", &a.events_url, Some(&a.token), &[], None)
        .await
        .expect_error(405, "method_not_allowed", "POST events");

    // Usage, then delete: every route of the address answers 410 with the right token.
    let r = c.get(&a.root, Some(&a.token)).await;
    r.expect_status(200, "inspect");
    assert_eq!(r.json["usage"]["last_sequence"], rev_del);
    assert_eq!(r.json["usage"]["retained_events"], rev_del);
    assert_eq!(r.json["usage"]["state_keys"], 0);
    assert_eq!(r.json["address"]["id"], a.id.as_str());
    assert!(
        !r.text.contains(&a.token)
            && !r
                .text
                .contains(a.inbox_url.rsplit('/').next().unwrap_or("-")),
        "secrets are shown once only"
    );
    c.send("DELETE", &a.root, Some(&a.token), &[], None)
        .await
        .expect_status(204, "delete address");
    c.get(&a.events_url, Some(&a.token)).await.expect_error(
        410,
        "address_gone",
        "events after delete",
    );
    c.get(&key_url, Some(&a.token))
        .await
        .expect_error(410, "address_gone", "state after delete");
    c.get(&a.root, Some(&a.token))
        .await
        .expect_error(410, "address_gone", "inspect after delete");
    c.deliver(&a, &json!({"late": true}), None)
        .await
        .expect_error(410, "address_gone", "inbox after delete");
    c.get(&a.events_url, Some(&b.token)).await.expect_error(
        401,
        "unauthorized",
        "wrong token on a deleted address",
    );
    c.get(&b.events_url, Some(&b.token))
        .await
        .expect_status(200, "other addresses are untouched");
}

/// Limits of docs/API.md §6 and §7 as the server reports them: inbox size, state keys and
/// bytes, a value that can never fit, the feed quota, and the poll rate limit.
pub async fn limits(c: &Client) {
    let a = c.new_address().await;
    let limits = c.limits(&a).await;
    let max_inbox = limits["max_inbox_bytes"].as_u64().unwrap_or(1_000_000) as usize;
    let max_keys = limits["max_state_keys"].as_u64().unwrap_or(32);
    let max_bytes = limits["max_state_bytes"].as_u64().unwrap_or(65_536);
    let quota = limits["max_retained_events"].as_u64().unwrap_or(1000);
    let polls = limits["polls_per_minute"].as_u64().unwrap_or(30);

    // The inbox takes exactly its limit, byte-identical, and refuses one byte more.
    let text: String = (0..max_inbox)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let r = c
        .send(
            "POST",
            &a.inbox_url,
            None,
            &[("content-type", "text/plain")],
            Some(text.clone().into_bytes()),
        )
        .await;
    r.expect_status(202, "inbox body at the limit");
    let id = r.json["event"]["id"].as_str().unwrap_or("").to_owned();
    let r = c
        .get(&format!("{}/events/{id}", a.root), Some(&a.token))
        .await;
    r.expect_status(200, "read the big event");
    assert_eq!(
        r.json["event"]["data"]["text"].as_str().map(str::len),
        Some(max_inbox)
    );
    assert!(
        r.json["event"]["data"]["text"] == text.as_str(),
        "byte-identical"
    );
    let mut over = text.into_bytes();
    over.push(b'!');
    c.send(
        "POST",
        &a.inbox_url,
        None,
        &[("content-type", "text/plain")],
        Some(over),
    )
    .await
    .expect_error(413, "payload_too_large", "inbox body over the limit");

    // State: keys, bytes, a value that can never fit.
    let s = c.new_address().await;
    for k in 0..max_keys {
        c.json(
            "PUT",
            &format!("{}/k{k}", s.state_url),
            Some(&s.token),
            &json!({"value": k}),
        )
        .await
        .expect_status(200, "put within the key limit");
    }
    c.json(
        "PUT",
        &format!("{}/one-more", s.state_url),
        Some(&s.token),
        &json!({"value": 1}),
    )
    .await
    .expect_error(409, "state_limit_exceeded", "one key too many");
    c.json(
        "PUT",
        &format!("{}/k0", s.state_url),
        Some(&s.token),
        &json!({"value": "overwrite"}),
    )
    .await
    .expect_status(200, "overwriting an existing key needs no new key");
    let huge = "x".repeat(max_bytes as usize);
    c.json(
        "PUT",
        &format!("{}/k1", s.state_url),
        Some(&s.token),
        &json!({"value": huge}),
    )
    .await
    .expect_error(413, "payload_too_large", "a value that can never fit");
    let r = c.get(&s.state_url, Some(&s.token)).await;
    let used = r.json["state_bytes"].as_u64().unwrap_or(0);
    let room = max_bytes - used;
    // k1 holds `1` (2 + 1 + 64 bytes); a string of L characters makes it 2 + (L + 2) + 64,
    // which grows the total by L + 1: L = room is one byte over, L = room - 1 fits exactly.
    let grow = "y".repeat(room as usize);
    let r = c
        .json(
            "PUT",
            &format!("{}/k1", s.state_url),
            Some(&s.token),
            &json!({"value": grow}),
        )
        .await;
    r.expect_error(409, "state_limit_exceeded", "bytes over the limit");
    let fits = "y".repeat(room as usize - 1);
    c.json(
        "PUT",
        &format!("{}/k1", s.state_url),
        Some(&s.token),
        &json!({"value": fits}),
    )
    .await
    .expect_status(200, "exactly at the byte limit");
    let r = c.get(&s.state_url, Some(&s.token)).await;
    assert_eq!(r.json["state_bytes"], max_bytes, "{}", r.text);

    // The feed quota.
    let q = c.new_address().await;
    let mut sent = 0u64;
    while sent < quota {
        let batch: Vec<_> = (sent..quota.min(sent + 16))
            .map(|n| {
                let c = c.clone();
                let q = q.clone();
                tokio::spawn(async move { c.deliver(&q, &json!({"n": n}), None).await })
            })
            .collect();
        for t in batch {
            let r = t.await.expect("delivery task");
            r.expect_status(202, "delivery within quota");
            sent += 1;
        }
    }
    c.deliver(&q, &json!({"n": "over"}), None)
        .await
        .expect_error(409, "quota_exceeded", "delivery over quota");
    c.json(
        "PUT",
        &format!("{}/k", q.state_url),
        Some(&q.token),
        &json!({"value": 1}),
    )
    .await
    .expect_error(409, "quota_exceeded", "state write on a full feed");
    let all = c.read_all(&q).await;
    assert_eq!(seqs(&all), (1..=quota).collect::<Vec<_>>());
    let acked = all[0]["id"].as_str().unwrap_or("").to_owned();
    c.send(
        "POST",
        &format!("{}/events/{acked}/ack", q.root),
        Some(&q.token),
        &[],
        None,
    )
    .await
    .expect_status(200, "ack");
    c.deliver(&q, &json!({"n": "still over"}), None)
        .await
        .expect_error(409, "quota_exceeded", "acking does not free quota");

    // Polls per address per minute. The limit is a fixed window of one wall-clock minute
    // (docs/API.md §6: "per minute"), so an attempt that straddles a minute boundary counts in two
    // windows and proves nothing: it is retried with a fresh address, up to three times.
    let mut attempt = 0;
    let (p, i, r) = loop {
        attempt += 1;
        let p = c.new_address().await;
        let started = unix_seconds();
        let mut limited = None;
        for i in 0..=polls + 1 {
            let r = c.events(&p, "after=0").await;
            if r.status == 429 {
                limited = Some((i, r));
                break;
            }
            r.expect_status(200, "poll within the rate limit");
        }
        // Two seconds either side allow for a server clock that differs from ours.
        let ended = unix_seconds();
        if attempt < 3 && crosses_minute(started - 2.0, ended + 2.0) {
            // Start the next attempt clear of that boundary.
            let boundary = ((started - 2.0) / 60.0).ceil() * 60.0;
            let wait = boundary + 3.0 - ended;
            if wait > 0.0 {
                tokio::time::sleep(Duration::from_secs_f64(wait)).await;
            }
            continue;
        }
        let (i, r) = limited.unwrap_or_else(|| panic!("no 429 after {} polls", polls + 2));
        break (p, i, r);
    };
    assert!(
        i >= polls.saturating_sub(1) && i <= polls,
        "limited at poll {i} of {polls}"
    );
    r.expect_error(429, "rate_limited", "poll rate limit");
    let secs = r.json["error"]["retry_after_seconds"].as_u64().unwrap_or(0);
    assert!((1..=60).contains(&secs), "{}", r.text);
    let header = r
        .headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    assert_eq!(header, Some(secs));
    c.get(&p.state_url, Some(&p.token))
        .await
        .expect_status(200, "only event reads are poll-limited");
}

fn unix_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Whether a wall-clock minute boundary falls within `[from, to]` (Unix seconds).
fn crosses_minute(from: f64, to: f64) -> bool {
    (from / 60.0).floor() != (to / 60.0).floor()
}

/// Everything acknowledged before a crash and restart is still there afterwards, in order,
/// with its acknowledgement and its state.
pub async fn survives_restart(c: &Client, server: Option<&mut dyn Restartable>) {
    let a = c.new_address().await;
    let mut expected = Vec::new();
    for n in 0..20 {
        let r = c
            .deliver(
                &a,
                &json!({"type": "job.done", "data": {"n": n}}),
                Some(&format!("job-{n}")),
            )
            .await;
        r.expect_status(202, "delivery");
        expected.push(r.json["event"]["id"].as_str().unwrap_or("").to_owned());
    }
    let ack = format!("{}/events/{}/ack", a.root, expected[3]);
    let r = c.send("POST", &ack, Some(&a.token), &[], None).await;
    r.expect_status(200, "ack");
    let acked_at = r.json["event"]["acknowledged_at"].clone();
    let w = c
        .json(
            "PUT",
            &format!("{}/cursor", a.state_url),
            Some(&a.token),
            &json!({"value": {"after": 20}, "if_revision": 0}),
        )
        .await;
    w.expect_status(200, "state write");

    let c = match server {
        Some(s) => {
            s.restart().await;
            c.reconnected()
        }
        None => c.reconnected(),
    };

    let all = c.read_all(&a).await;
    let ids: Vec<String> = all
        .iter()
        .filter(|e| e["type"] == "job.done")
        .map(|e| e["id"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        ids, expected,
        "every acknowledged delivery survives, in order"
    );
    assert_eq!(seqs(&all), (1..=21).collect::<Vec<_>>());
    assert_eq!(all[3]["acknowledged_at"], acked_at);
    let r = c
        .get(&format!("{}/cursor", a.state_url), Some(&a.token))
        .await;
    r.expect_status(200, "state after restart");
    assert_eq!(r.json["value"], json!({"after": 20}));
    assert_eq!(r.json["revision"], w.json["revision"]);
    let dup = c
        .deliver(
            &a,
            &json!({"type": "job.done", "data": {"n": 5}}),
            Some("job-5"),
        )
        .await;
    dup.expect_status(200, "idempotency keys survive");
    assert_eq!(dup.json["event"]["id"], expected[5].as_str());
    let r = c.deliver(&a, &json!({"after": "restart"}), None).await;
    r.expect_status(202, "deliveries continue");
    assert_eq!(r.json["event"]["sequence"], 22);
}

/// 16 clients doing CAS increments on one key: the final value equals the number of 200s, and
/// the feed holds exactly that many `state.updated` events (after the first write), gapless and
/// in increment order.
pub async fn concurrent_cas_increments(c: &Client, clients: usize, attempts: usize) {
    let a = c.new_address().await;
    let key = format!("{}/counter", a.state_url);
    c.json(
        "PUT",
        &key,
        Some(&a.token),
        &json!({"value": 0, "if_revision": 0}),
    )
    .await
    .expect_status(200, "initial write");
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let c = c.clone();
            let a = a.clone();
            let key = key.clone();
            tokio::spawn(async move {
                let mut ok = 0u64;
                let mut conflicts = 0u64;
                for _ in 0..attempts {
                    let r = c.get(&key, Some(&a.token)).await;
                    r.expect_status(200, "read counter");
                    let n = r.json["value"].as_u64().unwrap_or(u64::MAX);
                    let rev = r.json["revision"].as_u64().unwrap_or(0);
                    let w = c
                        .json(
                            "PUT",
                            &key,
                            Some(&a.token),
                            &json!({"value": n + 1, "if_revision": rev}),
                        )
                        .await;
                    match w.status {
                        200 => ok += 1,
                        409 => {
                            assert_eq!(w.code(), "revision_conflict", "{}", w.text);
                            conflicts += 1;
                        }
                        s => panic!("unexpected {s}: {}", w.text),
                    }
                }
                (ok, conflicts)
            })
        })
        .collect();
    let mut successes = 0;
    let mut conflicts = 0;
    for w in workers {
        let (ok, conf) = w.await.expect("worker");
        successes += ok;
        conflicts += conf;
    }
    assert!(successes > 0);
    let r = c.get(&key, Some(&a.token)).await;
    assert_eq!(
        r.json["value"].as_u64(),
        Some(successes),
        "no lost update: final value = number of 200s ({successes} ok, {conflicts} conflicts)"
    );
    let all = c.read_all(&a).await;
    assert_eq!(
        seqs(&all),
        (1..=successes + 1).collect::<Vec<_>>(),
        "gapless"
    );
    let values: Vec<u64> = all
        .iter()
        .map(|e| {
            assert_eq!(e["type"], "state.updated");
            assert_eq!(e["data"]["revision"], e["sequence"]);
            e["data"]["value"].as_u64().unwrap_or(u64::MAX)
        })
        .collect();
    assert_eq!(
        values,
        (0..=successes).collect::<Vec<_>>(),
        "increments in feed order"
    );
    assert_eq!(r.json["revision"].as_u64(), Some(successes + 1));
    let ids: BTreeSet<&str> = all.iter().filter_map(|e| e["id"].as_str()).collect();
    assert_eq!(ids.len(), all.len(), "one sequence is one event");
}

/// Service routes and wire conventions: health, OpenAPI, skill, JSON 404/405/415.
pub async fn service_routes(c: &Client) {
    let r = c.get("/healthz", None).await;
    r.expect_status(200, "healthz");
    assert_eq!(r.json["status"], "ok");
    assert!(
        r.json["store"] == "sqlite" || r.json["store"] == "dynamodb",
        "{}",
        r.text
    );
    assert!(r.json["version"].is_string());
    let ct = r
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert_eq!(ct, "application/json; charset=utf-8");

    let r = c.get("/openapi.json", None).await;
    r.expect_status(200, "openapi");
    assert!(r.json["openapi"]
        .as_str()
        .is_some_and(|v| v.starts_with("3.1")));
    for path in [
        "/api/v1/addresses",
        "/api/v1/addresses/{address_id}",
        "/api/v1/inbox/{address_id}/{inbox_secret}",
        "/api/v1/addresses/{address_id}/events",
        "/api/v1/addresses/{address_id}/events/{event_id}",
        "/api/v1/addresses/{address_id}/events/{event_id}/ack",
        "/api/v1/addresses/{address_id}/state",
        "/api/v1/addresses/{address_id}/state/{key}",
    ] {
        assert!(r.json["paths"].get(path).is_some(), "openapi lacks {path}");
    }

    let r = c.get("/skill.md", None).await;
    r.expect_status(200, "skill.md");
    for needle in [
        "/api/v1/addresses",
        "credentials.read_token",
        "next_cursor",
        "ack",
    ] {
        assert!(r.text.contains(needle), "skill.md lacks {needle}");
    }
    assert!(
        r.text.contains(&format!("{}/api/v1/addresses", c.base)),
        "skill.md names the base URL"
    );

    c.get("/api/v1/nothing-here", None)
        .await
        .expect_error(404, "not_found", "unknown route");
    c.send("DELETE", "/api/v1/addresses", None, &[], None)
        .await
        .expect_error(405, "method_not_allowed", "wrong method");
    c.send_past_limit(
        "POST",
        "/api/v1/addresses",
        None,
        &[("content-type", "text/plain")],
        Some(br#"{"name": "x"}"#.to_vec()),
    )
    .await
    .expect_error(415, "unsupported_media_type", "create with text/plain");
    c.send_past_limit(
        "POST",
        "/api/v1/addresses",
        None,
        &[("content-type", "application/json")],
        Some(b"{not json".to_vec()),
    )
    .await
    .expect_error(400, "invalid_request", "malformed JSON");
    let a: Address = c.new_address().await;
    c.get(&format!("{}?after=-1", a.events_url), Some(&a.token))
        .await
        .expect_error(400, "invalid_request", "negative cursor");
    c.get(&format!("{}/bad%20key", a.state_url), Some(&a.token))
        .await
        .expect_error(400, "invalid_request", "bad key");
}

#[cfg(test)]
mod tests {
    use super::crosses_minute;

    #[test]
    fn minute_boundaries() {
        assert!(!crosses_minute(120.0, 179.9));
        assert!(crosses_minute(119.0, 121.0));
        assert!(crosses_minute(179.5, 180.0));
        assert!(!crosses_minute(180.0, 180.5));
    }
}
