//! `agentaddress wait TASK`: prints TASK's events as they arrive, one JSON line each, woken by
//! the wake-up socket (docs/API.md §17) where the server offers one, else by long polls. The
//! feed (`GET events?after=N`) stays the one source of events: the socket only says when to
//! read it, so a socket that closes (the AWS deployment closes each within 2 hours) is opened
//! again and subscribed with the cursor, and nothing is lost or printed twice.
//!
//! Like `poll`, `wait` never moves the saved cursor (`ack` does).

use std::cell::Cell;
use std::io::Write;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, SinkExt, StreamExt};
use reqwest::Method;
use serde_json::{json, Value};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use super::api::{self, Api};
use super::creds::Credentials;
use super::error::{CliError, Result};
use super::{connect, redact, ServerArg};

/// How long a long poll waits (the contract's most).
const LONG_POLL_SECONDS: u64 = 25;
/// How often the socket says `ping`: API Gateway closes a socket idle for 10 minutes.
const PING_EVERY: Duration = Duration::from_secs(5 * 60);
/// The first pause before reconnecting, doubled after each failure up to [`MAX_BACKOFF`], and
/// reset by a successful `subscribe`.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long opening the socket (TCP, TLS, upgrade) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the answer to `subscribe` may take before the socket is opened again.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest frame or message accepted from the server (its frames are a few hundred bytes):
/// the server is untrusted too.
const MAX_INCOMING: usize = 64 * 1024;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

#[derive(Debug, clap::Args)]
pub struct WaitArgs {
    /// Task name (as given to `create`).
    task: String,
    /// Print the events after this sequence instead of the saved cursor (the saved cursor is
    /// unchanged).
    #[arg(long, value_name = "SEQUENCE")]
    after: Option<u64>,
    /// Exit (0) once this many events are printed. Default: wait until interrupted.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// Exit with code 8 (`timed_out`) when no event arrives for this many seconds.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    timeout: Option<u64>,
    /// Only events of this type or pattern (`email.*`, `request.answered`; repeatable): the
    /// others are passed over, and on the socket only matching appends notify.
    #[arg(long = "type", value_name = "PATTERN")]
    types: Vec<String>,
    /// Wait with long polls even where the server offers the wake-up socket.
    #[arg(long)]
    no_socket: bool,
    #[command(flatten)]
    server: ServerArg,
}

/// Runs `wait`: events on stdout as they arrive, until `--count`, `--timeout`, an error or
/// Ctrl-C.
pub async fn wait(args: WaitArgs, secret: &mut Option<String>) -> Result<()> {
    let (_, saved, api) = connect(&args.task, &args.server, secret)?;
    let timeout = args.timeout.map(Duration::from_secs);
    // When the last event was printed (or `wait` started): `--timeout` counts from there.
    let last_event = Rc::new(Cell::new(Instant::now()));
    let mut waiter = Waiter {
        api,
        cursor: args.after.unwrap_or(saved.cursor),
        types: super::types_param(&args.types),
        saved,
        printed: 0,
        count: args.count,
        last_event: Rc::clone(&last_event),
    };
    let work = waiter.run(args.no_socket);
    tokio::pin!(work);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let deadline = timeout.map(|t| last_event.get() + t);
        tokio::select! {
            outcome = &mut work => return outcome,
            _ = &mut ctrl_c => {
                return Err(CliError::new("interrupted", "interrupted (Ctrl-C)"));
            }
            () = sleep_until(deadline) => {
                // An event may have been printed meanwhile: the deadline moved.
                if timeout.is_some_and(|t| last_event.get().elapsed() >= t) {
                    let secs = args.timeout.unwrap_or_default();
                    return Err(CliError::new(
                        "timed_out",
                        format!("no event arrived within {secs} s"),
                    ));
                }
            }
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Says on stderr (one JSON line, beside the errors' format) how `wait` waits.
fn notice(mode: &str, message: &str, secret: &str) {
    let line = json!({"notice": {"mode": mode, "message": message}}).to_string();
    let _ = writeln!(std::io::stderr(), "{}", redact(&line, Some(secret)));
}

/// Why a socket session ended without ending `wait`.
enum Closed {
    /// The socket closed or failed, or the feed could not be read for now: reconnect.
    Retry(String),
    /// The server refused the socket for this address (`quota_exceeded`): long polls.
    Refused(String),
}

/// The error of a `gone` frame: the one a 410 from the feed gives.
fn gone() -> CliError {
    use agentaddress_api::error::ErrorCode;
    CliError::new(
        "address_gone",
        ErrorCode::AddressGone.default_message().to_owned(),
    )
}

/// Errors worth waiting out: the server or the network is briefly away.
fn transient(e: &CliError) -> bool {
    matches!(e.code(), "unreachable" | "unavailable" | "internal")
}

/// The pause a `rate_limited` (or `unavailable`) answer asks for.
fn retry_after(e: &CliError) -> Duration {
    let secs = e
        .get("retry_after_seconds")
        .and_then(Value::as_u64)
        .unwrap_or(1);
    Duration::from_secs(secs.clamp(1, 120))
}

struct Waiter {
    api: Api,
    saved: Credentials,
    /// The last sequence printed or passed over (or `--after` / the saved cursor): reads start
    /// after it.
    cursor: u64,
    /// `--type`'s patterns as the `types` query parameter.
    types: Option<(&'static str, String)>,
    printed: u64,
    count: Option<u64>,
    last_event: Rc<Cell<Instant>>,
}

impl Waiter {
    fn token(&self) -> &str {
        &self.saved.read_token
    }

    fn done(&self) -> bool {
        self.count.is_some_and(|n| self.printed >= n)
    }

    async fn run(&mut self, no_socket: bool) -> Result<()> {
        // `GET {root}`: the address lives, the token works, and where its socket is.
        let details = self
            .api
            .call(
                Method::GET,
                &format!("addresses/{}", self.saved.address_id),
                &[],
                Some(self.token()),
                None,
                Duration::ZERO,
            )
            .await?;
        let ws_url = api::optional_string(&details, &["endpoints", "ws_url"]);
        let url = match ws_url {
            Some(url) if !no_socket => url,
            Some(_) => {
                notice(
                    "long_poll",
                    "--no-socket: waiting with long polls",
                    self.token(),
                );
                return self.long_polls().await;
            }
            None => {
                notice(
                    "long_poll",
                    "no socket offered; waiting with long polls",
                    self.token(),
                );
                return self.long_polls().await;
            }
        };
        let tls = tls_config()?;
        let ws = match open(&url, &tls).await {
            Ok(ws) => ws,
            Err(e) => {
                notice(
                    "long_poll",
                    &format!(
                        "the socket at {url} cannot be reached ({e}); waiting with long polls"
                    ),
                    self.token(),
                );
                return self.long_polls().await;
            }
        };
        notice(
            "socket",
            &format!("waiting on the socket at {url}"),
            self.token(),
        );
        self.socket(&url, &tls, ws).await
    }

    /// The socket, reopened with back-off whenever it closes.
    async fn socket(&mut self, url: &str, tls: &Arc<rustls::ClientConfig>, ws: Ws) -> Result<()> {
        let mut backoff = FIRST_BACKOFF;
        let mut ws = Some(ws);
        loop {
            let socket = match ws.take() {
                Some(socket) => socket,
                None => match open(url, tls).await {
                    Ok(socket) => socket,
                    Err(e) => {
                        notice(
                            "socket",
                            &format!(
                                "cannot reopen the socket at {url} ({e}); retrying in {} ms",
                                backoff.as_millis()
                            ),
                            self.token(),
                        );
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        continue;
                    }
                },
            };
            match self.session(socket, &mut backoff).await? {
                None => return Ok(()),
                Some(Closed::Refused(why)) => {
                    notice(
                        "long_poll",
                        &format!("the socket refused the address ({why}); waiting with long polls"),
                        self.token(),
                    );
                    return self.long_polls().await;
                }
                Some(Closed::Retry(why)) => {
                    notice(
                        "socket",
                        &format!(
                            "the socket closed ({why}); reopening in {} ms",
                            backoff.as_millis()
                        ),
                        self.token(),
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// One socket: subscribe with the cursor, read the feed on `subscribed` and on each
    /// `notify` past the cursor. `Ok(None)`: `--count` is reached.
    async fn session(&mut self, mut ws: Ws, backoff: &mut Duration) -> Result<Option<Closed>> {
        let mut subscribe = json!({
            "action": "subscribe",
            "address_id": self.saved.address_id,
            "read_token": self.token(),
            "after": self.cursor,
        });
        // Only matching appends notify (docs/API.md §21).
        if let (Some((_, types)), Some(frame)) = (&self.types, subscribe.as_object_mut()) {
            frame.insert("types".into(), json!(types.split(',').collect::<Vec<_>>()));
        }
        if let Err(e) = ws.send(Message::Text(subscribe.to_string().into())).await {
            return Ok(Some(Closed::Retry(e.to_string())));
        }
        let mut ping = tokio::time::interval_at(Instant::now() + PING_EVERY, PING_EVERY);
        let mut subscribed = false;
        let unanswered = tokio::time::sleep(SUBSCRIBE_TIMEOUT);
        tokio::pin!(unanswered);
        loop {
            let frame = tokio::select! {
                frame = ws.next() => frame,
                () = &mut unanswered, if !subscribed => {
                    return Ok(Some(Closed::Retry("no answer to subscribe".to_owned())));
                }
                _ = ping.tick() => {
                    let ping = json!({"action": "ping"}).to_string();
                    if let Err(e) = ws.send(Message::Text(ping.into())).await {
                        return Ok(Some(Closed::Retry(e.to_string())));
                    }
                    continue;
                }
            };
            let text = match frame {
                Some(Ok(Message::Text(t))) => t,
                // tungstenite answers pings itself.
                Some(Ok(Message::Binary(_) | Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(Message::Frame(_))) => continue,
                Some(Ok(Message::Close(frame))) => {
                    let why = frame.map_or_else(
                        || "closed by the server".to_owned(),
                        |f| format!("closed by the server: {} {}", u16::from(f.code), f.reason),
                    );
                    return Ok(Some(Closed::Retry(why)));
                }
                Some(Err(e)) => return Ok(Some(Closed::Retry(e.to_string()))),
                None => return Ok(Some(Closed::Retry("closed".to_owned()))),
            };
            let Ok(msg) = serde_json::from_str::<Value>(text.as_str()) else {
                continue;
            };
            let mine = msg["address_id"] == self.saved.address_id.as_str();
            let last = msg["last_sequence"].as_u64().unwrap_or(0);
            let read = match msg["type"].as_str().unwrap_or("") {
                "subscribed" if mine => {
                    subscribed = true;
                    *backoff = FIRST_BACKOFF;
                    // After every (re)subscribe the feed is read once: what came while no
                    // socket was open is there.
                    true
                }
                "notify" if mine => last > self.cursor,
                "gone" if mine => return Err(gone()),
                "error" => {
                    let code = msg["code"].as_str().unwrap_or("").to_owned();
                    let message = msg["message"].as_str().unwrap_or("").to_owned();
                    match code.as_str() {
                        "unauthorized" => {
                            use agentaddress_api::error::ErrorCode;
                            return Err(CliError::new(
                                "unauthorized",
                                ErrorCode::Unauthorized.default_message().to_owned(),
                            ));
                        }
                        "quota_exceeded" => {
                            return Ok(Some(Closed::Refused(format!("{code}: {message}"))))
                        }
                        _ => return Ok(Some(Closed::Retry(format!("{code}: {message}")))),
                    }
                }
                _ => false,
            };
            if !read {
                continue;
            }
            // Notifies already waiting are covered by this read.
            while let Some(Some(Ok(Message::Text(t)))) = ws.next().now_or_never() {
                let v: Value = serde_json::from_str(t.as_str()).unwrap_or(Value::Null);
                if v["type"] == "gone" && v["address_id"] == self.saved.address_id.as_str() {
                    return Err(gone());
                }
            }
            match self.read_feed().await {
                Ok(()) if self.done() => return Ok(None),
                Ok(()) => {}
                Err(e) if transient(&e) => {
                    return Ok(Some(Closed::Retry(format!(
                        "the feed could not be read: {}",
                        e.code()
                    ))))
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads the feed after the cursor until it has no more (or `--count` is reached),
    /// printing each event; waits out `rate_limited`.
    async fn read_feed(&mut self) -> Result<()> {
        loop {
            match self.page(0).await {
                Ok(true) if !self.done() => {}
                Ok(_) => return Ok(()),
                Err(e) if e.code() == "rate_limited" => {
                    tokio::time::sleep(retry_after(&e)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits with long polls (`GET events?after=cursor&wait=25`).
    async fn long_polls(&mut self) -> Result<()> {
        let mut backoff = FIRST_BACKOFF;
        while !self.done() {
            match self.page(LONG_POLL_SECONDS).await {
                Ok(_) => backoff = FIRST_BACKOFF,
                Err(e) if e.code() == "rate_limited" => {
                    tokio::time::sleep(retry_after(&e)).await;
                }
                Err(e) if transient(&e) => {
                    let pause = if e.get("retry_after_seconds").is_some() {
                        retry_after(&e)
                    } else {
                        backoff
                    };
                    tokio::time::sleep(pause).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// One page after the cursor (waiting up to `wait` seconds for a first event): prints its
    /// events and advances the cursor. `true`: the server has more.
    async fn page(&mut self, wait: u64) -> Result<bool> {
        let mut query = vec![("after", self.cursor.to_string())];
        if wait > 0 {
            query.push(("wait", wait.to_string()));
        }
        query.extend(self.types.clone());
        let page = self
            .api
            .call(
                Method::GET,
                &format!("addresses/{}/events", self.saved.address_id),
                &query,
                Some(self.token()),
                None,
                Duration::from_secs(wait),
            )
            .await?;
        let events = api::field(&page, &["events"])?
            .as_array()
            .ok_or_else(|| CliError::new("bad_response", "'events' is not a list"))?;
        let before = self.cursor;
        for event in events {
            let sequence = event["sequence"].as_u64().ok_or_else(|| {
                CliError::new(
                    "bad_response",
                    "an event in the server's answer has no sequence number",
                )
            })?;
            // Never an event twice, whatever the server answers.
            if sequence <= self.cursor {
                continue;
            }
            print_event(event, self.token())?;
            self.cursor = sequence;
            self.printed += 1;
            self.last_event.set(Instant::now());
            if self.done() {
                return Ok(false);
            }
        }
        // A filtered page passes over the events that did not match (docs/API.md §21).
        if self.types.is_some() {
            if let Some(next) = page["next_cursor"].as_u64() {
                self.cursor = self.cursor.max(next);
            }
        }
        let has_more = page["has_more"].as_bool().unwrap_or(false);
        // A page that moved nothing cannot be followed by another.
        Ok(has_more && self.cursor > before)
    }
}

/// One event, one line of JSON on stdout (the event as the feed gives it).
fn print_event(event: &Value, secret: &str) -> Result<()> {
    let line = redact(&event.to_string(), Some(secret));
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .map_err(|e| CliError::new("output_error", format!("cannot write stdout: {e}")))
}

/// `wss://` over rustls with *ring* and the Mozilla root certificates, as the client's HTTPS
/// requests (reqwest's `rustls-tls`).
fn tls_config() -> Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| CliError::new("internal", format!("cannot set up TLS: {e}")))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Opens the socket at `url` (TCP, TLS for `wss://`, the upgrade), within [`CONNECT_TIMEOUT`].
async fn open(url: &str, tls: &Arc<rustls::ClientConfig>) -> std::result::Result<Ws, String> {
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_INCOMING))
        .max_frame_size(Some(MAX_INCOMING));
    let connector = tokio_tungstenite::Connector::Rustls(Arc::clone(tls));
    let connecting =
        tokio_tungstenite::connect_async_tls_with_config(url, Some(config), true, Some(connector));
    match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
        Ok(Ok((ws, _))) => Ok(ws),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_is_ring_with_mozilla_roots() {
        assert!(tls_config().is_ok());
    }

    #[test]
    fn retry_after_is_bounded() {
        let e = CliError::new("rate_limited", "x").with("retry_after_seconds", 7.into());
        assert_eq!(retry_after(&e), Duration::from_secs(7));
        let e = CliError::new("rate_limited", "x").with("retry_after_seconds", 100_000.into());
        assert_eq!(retry_after(&e), Duration::from_secs(120));
        assert_eq!(
            retry_after(&CliError::new("rate_limited", "x")),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn transient_errors() {
        for code in ["unreachable", "unavailable", "internal"] {
            assert!(transient(&CliError::new(code, "x")), "{code}");
        }
        for code in [
            "address_gone",
            "unauthorized",
            "invalid_request",
            "bad_response",
        ] {
            assert!(!transient(&CliError::new(code, "x")), "{code}");
        }
    }
}
