//! The email phase (agentaddress only: etcd has no mail door): `serve --smtp-listen`, 16
//! concurrent SMTP senders of 10 KB messages with one 50 KB attachment, each transaction timed
//! from `MAIL FROM` to the `250` after the data; then the delivery delay from that `250` to a
//! waiting long poll's answer, on 8 feeds.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lettre::message::header::ContentType;
use lettre::message::{Attachment, Mailbox, MultiPart, SinglePart};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use super::http::Http;
use super::measure::{delay_result, phase, Tally, DELAY_FEEDS, DELAY_GAP};
use super::{Config, Delay, Throughput};

/// What the email phase measured.
#[derive(Debug, Default, Clone, Copy)]
pub struct EmailFigures {
    /// Accepted messages per second, and the SMTP transaction's latency.
    pub smtp: Throughput,
    /// From the `250` to the waiting long poll's answer.
    pub delay: Delay,
}

/// One address the phase mails.
#[derive(Debug, Clone)]
pub(super) struct MailTarget {
    pub root: String,
    pub token: String,
    pub email: String,
}

fn transport(smtp: &str) -> Result<AsyncSmtpTransport<Tokio1Executor>, String> {
    let (host, port) = smtp
        .rsplit_once(':')
        .ok_or_else(|| format!("no port in the SMTP address {smtp}"))?;
    let port: u16 = port
        .parse()
        .map_err(|e| format!("bad SMTP port in {smtp}: {e}"))?;
    Ok(
        AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
            .port(port)
            .timeout(Some(Duration::from_secs(30)))
            .build(),
    )
}

/// A 10 KB text message with a 50 KB attachment, whose subject is `subject`.
fn message(to: &str, subject: &str, attachment: &[u8]) -> Result<Message, String> {
    let from: Mailbox = "Bench <bench@bench.test>"
        .parse()
        .map_err(|e| format!("from: {e}"))?;
    let to: Mailbox = to.parse().map_err(|e| format!("to {to}: {e}"))?;
    let text = "The quarterly figures are attached. ".repeat(10_000 / 36);
    let octets = ContentType::parse("application/octet-stream").map_err(|e| e.to_string())?;
    Message::builder()
        .from(from)
        .to(to)
        .subject(subject)
        .message_id(Some(format!("<{subject}@bench.test>")))
        .multipart(
            MultiPart::mixed()
                .singlepart(SinglePart::plain(text))
                .singlepart(
                    Attachment::new("figures.bin".into()).body(attachment.to_vec(), octets),
                ),
        )
        .map_err(|e| format!("message: {e}"))
}

pub(super) async fn email_phase(
    cfg: &Config, pid: u32, smtp: &str, http: &Http, boxes: &[MailTarget], errors: &mut Vec<String>,
) -> Result<EmailFigures, String> {
    let attachment: Vec<u8> = (0..50_000u32).map(|n| (n % 251) as u8).collect();
    let c = cfg.clients;
    let (smtp_figures, _) = phase(cfg, pid, c, errors, |i, deadline| {
        let to = boxes[i % boxes.len()].email.clone();
        let attachment = attachment.clone();
        let mailer = transport(smtp);
        async move {
            let mut t = Tally::new();
            let mailer = match mailer {
                Ok(m) => m,
                Err(e) => {
                    t.error(e);
                    return t;
                }
            };
            let mut n = 0u64;
            while Instant::now() < deadline {
                n += 1;
                let m = match message(&to, &format!("bench-{i}-{n}"), &attachment) {
                    Ok(m) => m,
                    Err(e) => {
                        t.error(e);
                        return t;
                    }
                };
                let started = Instant::now();
                match mailer.send(m).await {
                    Ok(r) if r.is_positive() => {
                        t.time(started);
                        t.ok += 1;
                    }
                    Ok(r) => t.error(format!("smtp: {:?}", r.code())),
                    Err(e) => t.error(format!("smtp: {e}")),
                }
            }
            t
        }
    })
    .await;

    // Delay: consumers wait on 8 feeds; one paced sender.
    let feeds: Vec<MailTarget> = boxes.iter().take(DELAY_FEEDS).cloned().collect();
    let consumers: Vec<_> = feeds
        .iter()
        .map(|b| {
            let b = b.clone();
            let http = http.clone();
            tokio::spawn(async move {
                let mut seen = HashMap::new();
                // Only what arrives from now on: start after the throughput phase's mail.
                let mut after = match http.get(&b.root, &b.token).await {
                    Ok((200, v)) => v["usage"]["last_sequence"].as_u64().unwrap_or(0),
                    Ok((s, v)) => return Err(format!("email delay: GET root {s} {v}")),
                    Err(e) => return Err(format!("email delay: {e}")),
                };
                loop {
                    let r = http
                        .get(
                            &format!("{}/events?after={after}&wait=25", b.root),
                            &b.token,
                        )
                        .await;
                    let now = Instant::now();
                    let v = match r {
                        Ok((200, v)) => v,
                        Ok((s, v)) => return Err(format!("email delay poll: {s} {v}")),
                        Err(e) => return Err(format!("email delay poll: {e}")),
                    };
                    after = v["next_cursor"].as_u64().unwrap_or(after);
                    for e in v["events"].as_array().into_iter().flatten() {
                        let subject = e["data"]["subject"].as_str().unwrap_or_default();
                        if subject == "bench-stop" {
                            return Ok(seen);
                        }
                        seen.insert(subject.to_owned(), now);
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mailer = transport(smtp)?;
    let mut sent = HashMap::new();
    let samples = (cfg.delay_samples / 10).max(20);
    let mut tick = tokio::time::interval(DELAY_GAP * 5);
    for s in 0..samples {
        tick.tick().await;
        let to = &feeds[s % feeds.len()].email;
        let subject = format!("bench-delay-{s}");
        match mailer.send(message(to, &subject, &attachment)?).await {
            Ok(r) if r.is_positive() => {
                sent.insert(subject, Instant::now());
            }
            Ok(r) => errors.push(format!("email delay: {:?}", r.code())),
            Err(e) => errors.push(format!("email delay: {e}")),
        }
    }
    for b in &feeds {
        mailer
            .send(message(&b.email, "bench-stop", b"")?)
            .await
            .map_err(|e| format!("email stop: {e}"))?;
    }
    let delay = delay_result(consumers, &sent, "long poll (email)", errors).await;
    Ok(EmailFigures {
        smtp: smtp_figures,
        delay,
    })
}
