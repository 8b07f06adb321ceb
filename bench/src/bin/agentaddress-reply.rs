//! `agentaddress-reply`: what extracting `reply_text` (docs/API.md §10, "The reply's text")
//! costs per message, each figure beside its anchor from the same run: `parse_message` of the
//! same raw message (which includes the extraction; the ratio is the extraction's share).
//!
//! - **the corpus**: every case of `shared/email/tests/replies/` (real reply shapes of Gmail,
//!   Outlook, Apple Mail and Thunderbird), each extraction timed `--samples` times;
//! - **50 KB replies**: three messages of 50 KB of text — a short answer above a Gmail thread
//!   quoted five levels deep, a short answer above Outlook's header block and 50 KB of unquoted
//!   history, and 50 KB of new text with nothing to remove (every line examined, the text
//!   returned whole) — each timed `--samples` times.
//!
//! Prints p50, p99 and max per row, and p50 / parse p50. Goal: p99 ≤ 1 ms for 50 KB.
//!
//! `agentaddress-reply [--samples 2000] [--corpus shared/email/tests/replies]`
#![forbid(unsafe_code)]

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use agentaddress_email::{parse_message, reply_text, AuthResults, EmailLimits, Envelope, Provider};
use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "agentaddress-reply", version)]
struct Args {
    /// Timed extractions (and parses) per message.
    #[arg(long, default_value_t = 2000)]
    samples: usize,
    /// The reply corpus (`*.case` files).
    #[arg(long)]
    corpus: Option<PathBuf>,
}

const SEPARATOR: &[u8] = b"\n#### expected reply_text ####\n";

fn crlf(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + bytes.len() / 20);
    for &b in bytes {
        if b == b'\n' {
            out.push(b'\r');
        }
        out.push(b);
    }
    out
}

/// The corpus's raw messages, as mail travels (CRLF).
fn corpus(dir: &PathBuf) -> Vec<(String, Vec<u8>)> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".case"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let bytes = std::fs::read(dir.join(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            let at = bytes
                .windows(SEPARATOR.len())
                .position(|w| w == SEPARATOR)
                .unwrap_or_else(|| panic!("{name}: no separator"));
            (name, crlf(&bytes[..=at]))
        })
        .collect()
}

fn message(subject: &str, body: &str) -> Vec<u8> {
    format!(
        "From: Ada Lovelace <ada@example.com>\r\nTo: agent@inbox.example\r\n\
         Subject: {subject}\r\nMessage-ID: <bench-{}@example.com>\r\nMIME-Version: 1.0\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A short answer above a Gmail thread quoted five levels deep, 50 KB of text in all.
fn gmail_thread() -> Vec<u8> {
    let mut body = String::from(
        "Yes, ship it tonight. I checked the numbers again and they hold.\r\n\r\nBob\r\n\r\n",
    );
    let mut level = 1usize;
    while body.len() < 50_000 {
        let q = ">".repeat(level);
        body.push_str(&format!(
            "{q} On Mon, Nov 30, 2026 at 6:{:02} PM Ada Lovelace <ada@example.com> wrote:\r\n{q}\r\n",
            level % 60
        ));
        for i in 0..40 {
            body.push_str(&format!(
                "{q} Line {i} of an earlier message in the thread, about the release plan.\r\n"
            ));
        }
        level = level % 5 + 1;
    }
    message("Re: Release", &body)
}

/// A short answer above Outlook's header block and 50 KB of unquoted history.
fn outlook_thread() -> Vec<u8> {
    let mut body = String::from(
        "Hi Ada,\r\n\r\nNumbers attached. Q4 is up 12% on Q3.\r\n\r\nRegards,\r\nBob\r\n\r\n\
         ________________________________\r\nFrom: Ada Lovelace <ada@example.com>\r\n\
         Sent: Tuesday, December 1, 2026 10:00 AM\r\nTo: Bob Builder <bob@contoso.com>\r\n\
         Subject: Quarterly numbers\r\n\r\n",
    );
    let mut i = 0;
    while body.len() < 50_000 {
        body.push_str(&format!(
            "Line {i} of the earlier messages, unquoted as Outlook leaves them below a reply.\r\n"
        ));
        i += 1;
    }
    message("RE: Quarterly numbers", &body)
}

/// 50 KB of new text: nothing to remove.
fn new_text() -> Vec<u8> {
    let mut body = String::new();
    let mut i = 0;
    while body.len() < 50_000 {
        body.push_str(&format!(
            "Paragraph {i}: a long new message that quotes nothing, from: nobody, to: anyone.\r\n"
        ));
        i += 1;
    }
    message("Notes", &body)
}

struct Row {
    label: String,
    text_bytes: usize,
    extract: Vec<Duration>,
    parse: Vec<Duration>,
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn parse(raw: &[u8]) -> serde_json::Value {
    parse_message(
        raw,
        &Envelope::default(),
        None,
        Provider::Smtp,
        AuthResults::default(),
        None,
        &EmailLimits::default(),
    )
    .unwrap_or_else(|e| panic!("refused: {e:?}"))
    .data
}

/// Times the extraction and the parse of `raw`, `samples` times each, interleaved.
fn measure(label: &str, raw: &[u8], samples: usize) -> Row {
    let data = parse(raw);
    let text = data["text"].as_str().unwrap_or_default().to_owned();
    let subject = data["subject"].as_str().map(str::to_owned);
    let mut extract = Vec::with_capacity(samples);
    let mut parsed = Vec::with_capacity(samples);
    for _ in 0..samples {
        let started = Instant::now();
        let reply = reply_text(black_box(&text), black_box(subject.as_deref()));
        black_box(&reply);
        extract.push(started.elapsed());
        drop(reply);
        let started = Instant::now();
        black_box(parse(black_box(raw)));
        parsed.push(started.elapsed());
    }
    extract.sort();
    parsed.sort();
    Row {
        label: label.to_owned(),
        text_bytes: text.len(),
        extract,
        parse: parsed,
    }
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    let args = Args::parse();
    let dir = args.corpus.clone().unwrap_or_else(|| {
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/email/tests/replies"
        ))
    });
    let cases = corpus(&dir);
    assert!(!cases.is_empty(), "no cases in {}", dir.display());
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    println!(
        "agentaddress-reply: {} corpus messages and three 50 KB messages, {} samples each, {build} build",
        cases.len(),
        args.samples
    );

    // The corpus: every message's extractions (and parses) pooled.
    let mut pooled = Row {
        label: format!("corpus ({} messages, pooled)", cases.len()),
        text_bytes: 0,
        extract: Vec::new(),
        parse: Vec::new(),
    };
    for (name, raw) in &cases {
        let row = measure(name, raw, args.samples);
        pooled.text_bytes = pooled.text_bytes.max(row.text_bytes);
        pooled.extract.extend(row.extract);
        pooled.parse.extend(row.parse);
    }
    pooled.extract.sort();
    pooled.parse.sort();
    let rows = [
        pooled,
        measure(
            "50 KB: answer above a Gmail thread quoted 5 deep",
            &gmail_thread(),
            args.samples,
        ),
        measure(
            "50 KB: answer above Outlook's header block",
            &outlook_thread(),
            args.samples,
        ),
        measure(
            "50 KB: new text, nothing removed",
            &new_text(),
            args.samples,
        ),
    ];
    println!();
    println!("| message | text (max) | extraction p50 | p99 | max | parse_message p50 | p99 | extraction p50 / parse p50 |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let (p50, pp50) = (quantile(&r.extract, 0.5), quantile(&r.parse, 0.5));
        println!(
            "| {} | {} B | {} | {} | {} | {} | {} | {:.3} |",
            r.label,
            r.text_bytes,
            us(p50),
            us(quantile(&r.extract, 0.99)),
            us(r.extract.last().copied().unwrap_or_default()),
            us(pp50),
            us(quantile(&r.parse, 0.99)),
            p50.as_secs_f64() / pp50.as_secs_f64().max(1e-12),
        );
    }
    let worst = rows
        .iter()
        .skip(1)
        .map(|r| quantile(&r.extract, 0.99))
        .max()
        .unwrap_or_default();
    println!();
    println!(
        "goal p99 <= 1 ms for 50 KB: {} (worst 50 KB p99 {})",
        if worst <= Duration::from_millis(1) {
            "met"
        } else {
            "NOT met"
        },
        us(worst)
    );
}
