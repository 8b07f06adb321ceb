//! Hostile clients of the SMTP door of `agentaddress serve` (docs/API.md §10, "The SMTP door"),
//! over real sockets from several loopback addresses against the real binary: SMTP smuggling
//! behind a bare line end, `DATA` opened and stalled from two client IPs while a third sends,
//! and one client IP past its share of the memory budget.

mod common;

use std::time::{Duration, Instant};

use common::smtp::{create, feed, serve, starts, Raw, DOMAIN};
use serde_json::Value;

const BARE_LINE_END: &str =
    "550 5.6.0 Message contains a bare CR or LF (RFC 5321 section 2.3.8); nothing was stored";
const NO_MEMORY: &str = "452 4.3.1 Insufficient system resources, try again later";

fn subjects(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["data"]["subject"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn message(id: &str, to: &str, subject: &str) -> String {
    format!(
        "From: Ada <ada@example.com>\r\nTo: {to}\r\nSubject: {subject}\r\n\
         Message-ID: <{id}@example.com>\r\n\r\nHello over SMTP.\r\n"
    )
}

/// `n` bytes of message body in CRLF lines (72 bytes each, the last one shorter).
fn body(n: usize) -> String {
    let line = format!("{}\r\n", "0123456789".repeat(7));
    let mut out = line.repeat(n / line.len());
    out.push_str(&"x".repeat(n % line.len()));
    out
}

/// SMTP smuggling (issue 33): a message ended by `<LF>.<LF>`, `<CR><LF>.<LF>` or
/// `<LF>.<CR><LF>` — which some servers take for the end of the data — followed in the same
/// write by a whole second transaction. Only `<CR><LF>.<CR><LF>` ends the data here, and the
/// bare line end refuses the message whole: one `550 5.6.0`, nothing stored, the pipelined
/// commands swallowed as data (the next reply is the next command's). The same for a bare CR.
/// A clean message afterwards on the same session is delivered and is the only event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smuggling_behind_a_bare_line_end_is_refused_whole() {
    let s = serve(DOMAIN, &[]).await;
    let http = reqwest::Client::new();
    for (i, shape) in ["\n.\n", "\r\n.\n", "\n.\r\n", "\r.\r\n"]
        .iter()
        .enumerate()
    {
        let a = create(&http, &s.base).await;
        let (mut c, data) = Raw::open_data(s.smtp, [127, 0, 0, 1], &a.email).await;
        starts(&data, "354");
        let cover = message(&format!("cover-{i}"), &a.email, "Cover");
        let smuggled = message(&format!("smuggled-{i}"), &a.email, "SMUGGLED");
        c.send(&format!(
            "{cover}Bye.{shape}MAIL FROM:<mallory@evil.example>\r\nRCPT TO:<{}>\r\nDATA\r\n\
             {smuggled}.\r\n",
            a.email
        ))
        .await;
        assert_eq!(c.reply().await, BARE_LINE_END, "shape {shape:?}");
        // The smuggled MAIL, RCPT and DATA were data: no reply of theirs is pending.
        assert_eq!(c.cmd("NOOP").await, "250 2.0.0 OK", "shape {shape:?}");
        let events = feed(&http, &s.base, &a, 0).await;
        assert!(events.is_empty(), "shape {shape:?}: {events:?}");

        let clean = message(&format!("clean-{i}"), &a.email, "Clean");
        starts(&c.transaction(&a.email).await, "354");
        c.send(&format!("{clean}.\r\n")).await;
        assert_eq!(c.reply().await, "250 2.0.0 OK", "shape {shape:?}");
        starts(&c.cmd("QUIT").await, "221");
        let events = feed(&http, &s.base, &a, 0).await;
        assert_eq!(subjects(&events), ["Clean"], "shape {shape:?}: {events:?}");
        let all = serde_json::to_string(&events).unwrap_or_default();
        assert!(!all.contains("SMUGGLED"), "shape {shape:?}: {all}");
    }
}

/// Issue 33, finding 2, scaled down: a 1 MiB budget and 128 KiB messages (8 whole messages
/// fit). Six clients from each of 127.0.0.2 and 127.0.0.3 open `DATA`, send a header line and
/// stall; a sender from 127.0.0.4 then gets `354` at once and its `250`, and its message is the
/// only event. Each stalled session is answered `421 4.4.2` within the stall bound of its
/// `354`, and closed. (Before: the twelve took the 8 whole-message slots until the 300 s data
/// timeout, and the sender got `452 4.3.1` after the command timeout.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_data_from_two_ips_does_not_starve_a_third() {
    const STALL: Duration = Duration::from_secs(4);
    let s = serve(
        DOMAIN,
        &[
            "--max-email-bytes",
            "131072",
            "--smtp-data-memory-mib",
            "1",
            "--smtp-data-stall-seconds",
            "4",
            "--smtp-command-timeout-seconds",
            "10",
        ],
    )
    .await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;

    let (opened_tx, mut opened) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut stallers = Vec::new();
    for ip in [[127, 0, 0, 2], [127, 0, 0, 3]] {
        for _ in 0..6 {
            let (smtp, rcpt, opened_tx) = (s.smtp, a.email.clone(), opened_tx.clone());
            stallers.push(tokio::spawn(async move {
                let (mut c, data) = Raw::open_data(smtp, ip, &rcpt).await;
                if !data.starts_with("354") {
                    return (data, String::new(), Duration::ZERO, true);
                }
                let at = Instant::now();
                c.send("Subject: stalled\r\n").await;
                let _ = opened_tx.send(());
                let reply = c.reply().await;
                let held = at.elapsed();
                (data, reply, held, c.closed_or_reset().await)
            }));
        }
    }
    drop(opened_tx);
    // The first eight are in DATA, holding their step (four per IP: each IP's share).
    for n in 0..8 {
        tokio::time::timeout(Duration::from_secs(15), opened.recv())
            .await
            .unwrap_or_else(|_| panic!("only {n} stalled sessions got 354 within 15 s"));
    }

    let started = Instant::now();
    let (mut c, data) = Raw::open_data(s.smtp, [127, 0, 0, 4], &a.email).await;
    let to_354 = started.elapsed();
    assert_eq!(data, "354 End data with <CR><LF>.<CR><LF>");
    assert!(
        to_354 < Duration::from_secs(2),
        "354 at once, not after the stalled sessions are cut: {to_354:?}"
    );
    c.send(&format!(
        "{}.\r\n",
        message("legit", &a.email, "Legitimate")
    ))
    .await;
    assert_eq!(c.reply().await, "250 2.0.0 OK");
    let to_250 = started.elapsed();
    assert!(to_250 < Duration::from_secs(3), "{to_250:?}");
    eprintln!("the sender from a third IP: 354 after {to_354:?}, 250 after {to_250:?}");
    starts(&c.cmd("QUIT").await, "221");

    let mut cut = 0;
    for staller in stallers {
        let (data, reply, held, closed) = staller.await.unwrap();
        if data.starts_with("354") {
            starts(&reply, "421 4.4.2");
            assert!(reply.contains("too slowly"), "{reply:?}");
            assert!(
                held >= STALL - Duration::from_millis(500) && held < STALL + Duration::from_secs(3),
                "cut by the stall bound ({STALL:?}) after 354: {held:?}"
            );
            assert!(closed, "closed after 421");
            cut += 1;
        } else {
            assert_eq!(data, NO_MEMORY, "a stalled client's DATA");
        }
    }
    assert!(cut >= 8, "{cut} stalled sessions got 354 and were cut");
    let events = feed(&http, &s.base, &a, 0).await;
    assert_eq!(subjects(&events), ["Legitimate"], "{events:?}");
}

/// One client IP holds at most its share of the memory budget (by default a quarter, at
/// least one whole message): with a 1 MiB budget and 128 KiB messages, 256 KiB. 127.0.0.2 holds
/// it (one message of 120 KB, two more just started); its next `DATA` waits the command
/// timeout and gets `452 4.3.1`, and a message that cannot grow past the share is read to its
/// end, discarded and answered `452 4.3.1`; meanwhile 127.0.0.3 delivers at once. The others
/// of 127.0.0.2 then finish, and only the discarded message is missing from the feed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_ip_cannot_take_more_than_its_share() {
    const WAIT: Duration = Duration::from_secs(3);
    let s = serve(
        DOMAIN,
        &[
            "--max-email-bytes",
            "131072",
            "--smtp-data-memory-mib",
            "1",
            "--smtp-command-timeout-seconds",
            "3",
        ],
    )
    .await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;
    let ip = [127, 0, 0, 2];

    // 127.0.0.2: one message of 120 KB under way (two steps), two more started (a step each).
    let (mut first, data) = Raw::open_data(s.smtp, ip, &a.email).await;
    starts(&data, "354");
    first
        .send(&(message("first", &a.email, "First") + &body(120_000)))
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (mut growing, data) = Raw::open_data(s.smtp, ip, &a.email).await;
    starts(&data, "354");
    let (mut third, data) = Raw::open_data(s.smtp, ip, &a.email).await;
    starts(&data, "354");

    // Its share is held: a further DATA waits for it, then 452 (the transaction stands).
    let started = Instant::now();
    let (mut refused, data) = Raw::open_data(s.smtp, ip, &a.email).await;
    assert_eq!(data, NO_MEMORY);
    let waited = started.elapsed();
    assert!(
        waited >= WAIT - Duration::from_millis(500) && waited < WAIT + Duration::from_secs(3),
        "452 after the command timeout: {waited:?}"
    );
    starts(&refused.cmd("RSET").await, "250");
    drop(refused);

    // Another IP gets through at once.
    let started = Instant::now();
    let (mut other, data) = Raw::open_data(s.smtp, [127, 0, 0, 3], &a.email).await;
    starts(&data, "354");
    other
        .send(&(message("other", &a.email, "Other IP") + &body(120_000) + "\r\n.\r\n"))
        .await;
    assert_eq!(other.reply().await, "250 2.0.0 OK");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "{took:?}");

    // A message of 127.0.0.2 that outgrows the share: read to its end, discarded, 452.
    let started = Instant::now();
    growing
        .send(&(message("growing", &a.email, "Growing") + &body(100_000) + "\r\n.\r\n"))
        .await;
    assert_eq!(growing.reply().await, NO_MEMORY);
    let waited = started.elapsed();
    assert!(
        waited >= WAIT - Duration::from_millis(500),
        "the message waited for memory first: {waited:?}"
    );

    // The others of 127.0.0.2 finish.
    first.send("\r\n.\r\n").await;
    assert_eq!(first.reply().await, "250 2.0.0 OK");
    third
        .send(&format!("{}.\r\n", message("third", &a.email, "Third")))
        .await;
    assert_eq!(third.reply().await, "250 2.0.0 OK");

    let events = feed(&http, &s.base, &a, 0).await;
    assert_eq!(
        subjects(&events),
        ["Other IP", "First", "Third"],
        "{events:?}"
    );
}
