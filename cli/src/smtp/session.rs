//! One SMTP session (RFC 5321, with PIPELINING, SIZE, 8BITMIME, SMTPUTF8,
//! ENHANCEDSTATUSCODES and STARTTLS): commands in, replies out, a message handed to
//! `agentaddress_email::deliver_email` at the end of `DATA`.
//!
//! Replies (docs/API.md §10, "The SMTP door"):
//!
//! | situation                                              | reply                |
//! |--------------------------------------------------------|----------------------|
//! | unknown recipient, or a deleted/expired address        | `550 5.1.1`          |
//! | more recipients than `--max-email-recipients`          | `452 4.5.3`          |
//! | `SIZE=` or the message over `--max-email-bytes`        | `552 5.3.4`          |
//! | a bare CR or LF in the message (read to its end)       | `550 5.6.0`          |
//! | no single author (`From`), with --smtp-check-auth      | `550 5.7.1`          |
//! | the address's sender rules (at `RCPT`, after `DATA`)   | `550 5.7.1`          |
//! | the address's feed or stored email is full             | `452 4.2.2`          |
//! | `DATA` with no memory within the command timeout       | `452 4.3.1`          |
//! | a message that could not grow (read to its end)        | `452 4.3.1`          |
//! | `MAIL` past the client's messages per minute           | `450 4.7.1`          |
//! | store unavailable                                      | `451 4.3.0`          |
//! | command out of sequence                                | `503 5.5.1`          |
//! | `DATA` with no accepted recipient                      | `554 5.5.1`          |
//! | unknown command                                        | `500 5.5.2`          |
//! | not implemented (EXPN, BDAT, AUTH…)                    | `502 5.5.1`          |
//! | bad arguments                                          | `501 5.5.4`          |
//! | unsupported `MAIL`/`RCPT` parameter                    | `555 5.5.4`          |
//! | command line over 1,000 bytes                          | `500 5.5.6`          |
//! | command or DATA timeout; a message stalled or too slow | `421 4.4.2`, closed  |
//! | too many errors or commands                            | `421 4.7.0`, closed  |
//! | shutting down                                          | `421 4.3.2`, closed  |
//!
//! **Bare CR and LF.** Command lines may end in a bare LF, but only `<CR><LF>.<CR><LF>` ends
//! the data (RFC 5321 §4.1.1.4; the start of the data counts as after a CRLF). A bare LF or a
//! bare CR anywhere in the data taints the message: it is read on (and discarded, within the
//! size bounds) to the real terminator, refused whole with `550 5.6.0`, and the session goes
//! on. Servers that end the data at `<LF>.<LF>` let a client smuggle a second message — the
//! commands pipelined behind that false end — past whatever checked the first (SMTP
//! smuggling); here those commands are swallowed as the refused message's data, so nothing of
//! it is stored. Postfix's `smtpd_forbid_bare_newline` is the precedent. `BDAT` (CHUNKING) is
//! not implemented (`502 5.5.1`), so `DATA` is the only way in.
//!
//! **Memory and rate.** A message holds memory by the bytes received (`super::DataMemory`),
//! from its first step, taken before `354`, to its delivery; its client must keep sending
//! (`DataClock`). Time spent waiting for memory does not count against the client.
//!
//! Pipelining needs nothing special: commands are read from a buffer, one line at a time, and
//! each is answered in order. After `STARTTLS` whatever the client pipelined behind it in
//! plain text is discarded (RFC 3207 §4.2: a man in the middle could have injected it), and
//! the session starts afresh.
//!
//! **Sender rules** (docs/API.md §10, "Sender rules"). At `RCPT` an address whose rules refuse
//! the envelope's sender (`MAIL FROM`) — or that require authentication this server does not
//! evaluate (no `--smtp-check-auth`: fail closed) — is refused `550 5.7.1` and its refusal
//! counted, once per transaction and address. The author and the verdicts are judged after
//! `DATA`, by `deliver_email`.
//!
//! The stored message is byte for byte what the client sent after dot-unstuffing: no
//! `Received` header is added, so a retry of a message without `Message-ID` (whose `email_id`
//! is a hash of its bytes) is still recognised as the same message.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agentaddress_core::domain::client::ClientKey;
use agentaddress_email::{AuthResults, Inbound, Provider, Refusal};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use super::command::{self, Command, Invalid, MailFrom};
use super::line::{self, Data, DataReader, Line};
use super::{Reservation, Shared};
use crate::transport::{Lingering, LINGER};

/// A connection, plain or TLS.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

type Conn = BufReader<Box<dyn Io>>;

/// The reply to a `DATA` without memory, or to a message that could not grow.
const NO_MEMORY: &str = "452 4.3.1 Insufficient system resources, try again later";

/// The reply to a message with a bare CR or LF (docs/API.md §10). ASCII only, as reply text
/// must be.
const BARE_LINE_END: &str =
    "550 5.6.0 Message contains a bare CR or LF (RFC 5321 section 2.3.8); nothing was stored";

/// How the message after `354` ended, as [`Session::receive`] read it.
enum Received {
    Data(Data),
    /// The client closed the connection first.
    Eof,
    /// No byte for the stall time, or slower than the least rate after it.
    Slow,
}

/// The data rate of a message being received, as for HTTP bodies (docs/API.md §T): no byte for
/// `stall`, or after `stall` fewer than `min_rate` bytes a second on average, and it is too slow.
struct DataClock {
    started: Instant,
    last_byte: Instant,
    bytes: u64,
    stall: Duration,
    min_rate: u64,
}

impl DataClock {
    fn new(stall: Duration, min_rate: u64) -> Self {
        let now = Instant::now();
        Self {
            started: now,
            last_byte: now,
            bytes: 0,
            stall,
            min_rate,
        }
    }

    fn received(&mut self, n: usize) {
        if n > 0 {
            self.bytes = self
                .bytes
                .saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
            self.last_byte = Instant::now();
        }
    }

    /// Time the server spent (waiting for memory) is not the client's.
    fn pause(&mut self, spent: Duration) {
        self.started += spent;
        self.last_byte += spent;
    }

    fn deadline(&self) -> Instant {
        let stalled = self.last_byte + self.stall;
        if self.min_rate == 0 {
            return stalled;
        }
        let earned = Duration::from_millis(self.bytes.saturating_mul(1000) / self.min_rate);
        (self.started + self.stall)
            .checked_add(earned)
            .map_or(stalled, |slow| slow.min(stalled))
    }
}

/// What to do after a command.
enum Flow {
    Continue,
    Close,
    StartTls(TlsAcceptor),
}

struct Session {
    peer: SocketAddr,
    shared: Arc<Shared>,
    /// The client's EHLO/HELO name; `None` before it (and after STARTTLS).
    helo: Option<String>,
    /// The transaction: `MAIL FROM` given (empty: the null sender), and recipients accepted.
    mail_from: Option<String>,
    rcpts: Vec<String>,
    /// The addresses whose sender rules refused this transaction at `RCPT` (counted once each).
    refused: Vec<String>,
    tls: bool,
    commands: u64,
    errors: u64,
}

/// Serves one connection to its end.
pub async fn run(
    stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let _open = agentaddress_core::metrics::smtp_session();
    let mut conn: Conn = BufReader::new(Box::new(stream) as Box<dyn Io>);
    let mut session = Session {
        peer,
        shared,
        helo: None,
        mail_from: None,
        rcpts: Vec::new(),
        refused: Vec::new(),
        tls: false,
        commands: 0,
        errors: 0,
    };
    tracing::debug!(%peer, "SMTP session opened");
    let ended = session.serve(&mut conn, &mut shutdown).await;
    if let Err(e) = ended {
        tracing::debug!(%peer, error = %e, "SMTP session ended by an I/O error");
    }
    close(conn).await;
    tracing::debug!(%peer, "SMTP session closed");
}

/// Closes with `transport`'s lingering close, so that the session's last reply is not lost to a
/// reset: shuts the sending side, then reads and discards until the client closes, all within
/// [`LINGER`] (the shutdown included).
async fn close(conn: Conn) {
    let mut conn = Lingering::new(conn);
    let _ = tokio::time::timeout(LINGER, conn.shutdown()).await;
}

impl Session {
    async fn serve(
        &mut self, conn: &mut Conn, shutdown: &mut watch::Receiver<bool>,
    ) -> io::Result<()> {
        if *shutdown.borrow() {
            return self.shutting_down(conn).await;
        }
        let greeting = format!("220 {} ESMTP agentaddress", self.shared.hostname);
        self.reply(conn, &greeting).await?;
        loop {
            enum Next {
                Line(io::Result<Line>),
                Timeout,
                Shutdown,
            }
            let next = tokio::select! {
                biased;
                _ = shutdown.wait_for(|stop| *stop) => Next::Shutdown,
                read = tokio::time::timeout(
                    self.shared.command_timeout,
                    line::read_command(conn, line::MAX_COMMAND_LINE),
                ) => read.map_or(Next::Timeout, Next::Line),
            };
            let line = match next {
                Next::Shutdown => return self.shutting_down(conn).await,
                Next::Timeout => {
                    tracing::info!(peer = %self.peer, "SMTP command timeout");
                    let reply = format!(
                        "421 4.4.2 {} Timeout waiting for a command, closing connection",
                        self.shared.hostname
                    );
                    return self.reply(conn, &reply).await;
                }
                Next::Line(line) => line?,
            };
            self.commands += 1;
            if self.commands > self.shared.max_commands {
                tracing::info!(peer = %self.peer, "SMTP session over its command cap");
                return self
                    .reply(conn, "421 4.7.0 Too many commands, closing connection")
                    .await;
            }
            let flow = match line {
                Line::Eof => return Ok(()),
                Line::Flood => {
                    return self.reply(conn, "500 5.5.6 Line too long").await;
                }
                Line::TooLong => self.fail(conn, "500 5.5.6 Line too long").await?,
                Line::Command(bytes) => match command::parse(&bytes) {
                    Ok(cmd) => self.command(conn, cmd).await?,
                    Err(Invalid::Unknown) => {
                        self.fail(conn, "500 5.5.2 Command unrecognized").await?
                    }
                    Err(Invalid::Syntax(why)) => {
                        self.fail(conn, &format!("501 5.5.4 {why}")).await?
                    }
                    Err(Invalid::Parameter) => {
                        self.fail(conn, "555 5.5.4 Unsupported parameter").await?
                    }
                },
            };
            match flow {
                Flow::Continue => {}
                Flow::Close => return Ok(()),
                Flow::StartTls(acceptor) => {
                    self.start_tls(conn, acceptor).await?;
                }
            }
        }
    }

    async fn command(&mut self, conn: &mut Conn, cmd: Command) -> io::Result<Flow> {
        match cmd {
            Command::Ehlo(name) => {
                self.reset();
                let mut lines = vec![
                    format!("{} Hello {name}", self.shared.hostname),
                    format!("SIZE {}", self.shared.limits.max_email_bytes),
                    "PIPELINING".to_owned(),
                    "8BITMIME".to_owned(),
                    "SMTPUTF8".to_owned(),
                    "ENHANCEDSTATUSCODES".to_owned(),
                ];
                if self.shared.tls.is_some() && !self.tls {
                    lines.push("STARTTLS".to_owned());
                }
                lines.push("HELP".to_owned());
                self.helo = Some(name);
                let last = lines.len() - 1;
                let reply: Vec<String> = lines
                    .iter()
                    .enumerate()
                    .map(|(i, l)| format!("250{}{l}", if i == last { ' ' } else { '-' }))
                    .collect();
                self.reply(conn, &reply.join("\r\n")).await?;
            }
            Command::Helo(name) => {
                self.reset();
                self.helo = Some(name);
                let reply = format!("250 {}", self.shared.hostname);
                self.reply(conn, &reply).await?;
            }
            Command::Mail(mail) => return self.mail(conn, mail).await,
            Command::Rcpt(rcpt) => return self.rcpt(conn, rcpt).await,
            Command::Data => return self.data(conn).await,
            Command::Rset => {
                self.reset();
                self.reply(conn, "250 2.0.0 OK").await?;
            }
            Command::Noop => self.reply(conn, "250 2.0.0 OK").await?,
            Command::Quit => {
                self.reply(conn, "221 2.0.0 Bye").await?;
                return Ok(Flow::Close);
            }
            Command::Vrfy => {
                self.reply(
                    conn,
                    "252 2.5.2 Cannot VRFY user, but will accept message and attempt delivery",
                )
                .await?;
            }
            Command::Help => {
                let tls = if self.shared.tls.is_some() {
                    " STARTTLS"
                } else {
                    ""
                };
                let reply = format!(
                    "214 2.0.0 Commands: EHLO HELO MAIL RCPT DATA RSET NOOP QUIT VRFY HELP{tls}"
                );
                self.reply(conn, &reply).await?;
            }
            Command::StartTls => {
                let Some(acceptor) = self.shared.tls.clone() else {
                    return self
                        .fail(conn, "502 5.5.1 STARTTLS is not offered here")
                        .await;
                };
                if self.tls {
                    return self.fail(conn, "503 5.5.1 TLS is already active").await;
                }
                self.reply(conn, "220 2.0.0 Ready to start TLS").await?;
                return Ok(Flow::StartTls(acceptor));
            }
            Command::NotImplemented => {
                return self.fail(conn, "502 5.5.1 Command not implemented").await;
            }
        }
        Ok(Flow::Continue)
    }

    async fn mail(&mut self, conn: &mut Conn, mail: MailFrom) -> io::Result<Flow> {
        if self.helo.is_none() {
            return self.fail(conn, "503 5.5.1 Send EHLO or HELO first").await;
        }
        if self.mail_from.is_some() {
            return self.fail(conn, "503 5.5.1 Nested MAIL command").await;
        }
        if mail
            .size
            .is_some_and(|size| size > self.shared.limits.max_email_bytes)
        {
            return self
                .fail(
                    conn,
                    "552 5.3.4 Message size exceeds fixed maximum message size",
                )
                .await;
        }
        if let Some(limit) = self.shared.messages_per_minute_per_ip {
            // The store's fixed one-minute windows, as for address creations over HTTP. A store
            // that cannot count does not stop mail.
            let scope = format!("smtp-ip:{}", ClientKey::of(self.peer.ip()));
            let now = self.shared.clock.now();
            if let Ok(Some(seconds)) = self.shared.store.hit_rate_limit(&scope, limit, now).await {
                tracing::info!(peer = %self.peer, "SMTP client over its messages per minute");
                let reply = format!(
                    "450 4.7.1 Too many messages from your address; try again in {seconds} s"
                );
                return self.fail(conn, &reply).await;
            }
        }
        self.mail_from = Some(mail.address);
        self.reply(conn, "250 2.1.0 OK").await?;
        Ok(Flow::Continue)
    }

    async fn rcpt(&mut self, conn: &mut Conn, rcpt: String) -> io::Result<Flow> {
        let Some(mail_from) = self.mail_from.clone() else {
            return self.fail(conn, "503 5.5.1 Send MAIL first").await;
        };
        let max = usize::try_from(self.shared.limits.max_email_recipients).unwrap_or(usize::MAX);
        if self.rcpts.len() >= max {
            // Temporary, and not an error of the client's: it sends the rest in another
            // transaction (RFC 5321 §4.5.3.1.10).
            self.reply(conn, "452 4.5.3 Too many recipients").await?;
            return Ok(Flow::Continue);
        }
        let now = self.shared.clock.now();
        let resolved = agentaddress_email::resolve(
            self.shared.store.as_ref(),
            &rcpt,
            &self.shared.domain,
            now,
        )
        .await;
        let refused = match resolved {
            Ok((address, _)) => {
                // The address's sender rules, as far as the envelope shows (docs/API.md §10).
                let checks_auth = self.shared.auth.is_some();
                match agentaddress_email::Rejection::at_rcpt(&address, &mail_from, checks_auth) {
                    None => None,
                    Some(refused) => {
                        if !self.refused.contains(&address.id) {
                            let store = self.shared.store.as_ref();
                            if let Err(e) = store.count_email_refusal(&address.id, now).await {
                                tracing::warn!(address = %address.id, error = %e, "counting a refused email failed");
                            }
                            self.refused.push(address.id);
                        }
                        Some(refused)
                    }
                }
            }
            Err(rejection) => Some(rejection),
        };
        match refused {
            None => {
                self.rcpts.push(rcpt);
                self.reply(conn, "250 2.1.5 OK").await?;
                Ok(Flow::Continue)
            }
            Some(rejection) => {
                let reply = rejection.smtp_reply();
                tracing::info!(peer = %self.peer, %rcpt, %reply, "SMTP recipient refused");
                if reply.code >= 500 {
                    self.fail(conn, &reply.to_string()).await
                } else {
                    self.reply(conn, &reply.to_string()).await?;
                    Ok(Flow::Continue)
                }
            }
        }
    }

    async fn data(&mut self, conn: &mut Conn) -> io::Result<Flow> {
        let Some(mail_from) = self.mail_from.clone() else {
            return self.fail(conn, "503 5.5.1 Send MAIL first").await;
        };
        if self.rcpts.is_empty() {
            return self.fail(conn, "554 5.5.1 No valid recipients").await;
        }
        // The message's first step of the memory budget, held (and grown) until it is
        // delivered or discarded. Without one the transaction stays as it is: the client may
        // send DATA again, or later.
        let client = ClientKey::of(self.peer.ip());
        let Some(mut memory) = self
            .shared
            .data_memory
            .reserve(client, self.shared.command_timeout)
            .await
        else {
            tracing::warn!(peer = %self.peer, "SMTP DATA refused: the memory budget is in use");
            self.reply(conn, NO_MEMORY).await?;
            return Ok(Flow::Continue);
        };
        self.reply(conn, "354 End data with <CR><LF>.<CR><LF>")
            .await?;
        let max = usize::try_from(self.shared.limits.max_email_bytes).unwrap_or(usize::MAX);
        let read = tokio::time::timeout(
            self.shared.data_timeout,
            self.receive(conn, &mut memory, max),
        )
        .await;
        let rcpts = std::mem::take(&mut self.rcpts);
        self.reset();
        let too_large = Refusal::TooLarge {
            size: 0,
            limit: max,
        }
        .smtp_reply()
        .to_string();
        let raw = match read {
            Err(_) => {
                tracing::info!(peer = %self.peer, "SMTP DATA timeout: nothing stored");
                let reply = format!(
                    "421 4.4.2 {} Timeout waiting for the message, closing connection",
                    self.shared.hostname
                );
                self.reply(conn, &reply).await?;
                return Ok(Flow::Close);
            }
            Ok(read) => match read? {
                Received::Data(Data::Message(raw)) => raw,
                Received::Eof => {
                    tracing::info!(
                        peer = %self.peer,
                        "SMTP client closed the connection during DATA: nothing stored"
                    );
                    return Ok(Flow::Close);
                }
                Received::Slow => {
                    tracing::info!(
                        peer = %self.peer,
                        "SMTP message stalled or below the least data rate: nothing stored"
                    );
                    let reply = format!(
                        "421 4.4.2 {} Message arriving too slowly, closing connection",
                        self.shared.hostname
                    );
                    self.reply(conn, &reply).await?;
                    return Ok(Flow::Close);
                }
                Received::Data(Data::BareLineEnd) => {
                    tracing::info!(
                        peer = %self.peer,
                        "SMTP message with a bare CR or LF refused: nothing stored"
                    );
                    return self.fail(conn, BARE_LINE_END).await;
                }
                Received::Data(Data::TooLarge) => {
                    tracing::info!(peer = %self.peer, max, "SMTP message over the size limit");
                    return self.fail(conn, &too_large).await;
                }
                Received::Data(Data::Flood) => {
                    tracing::info!(peer = %self.peer, max, "SMTP message far over the size limit");
                    self.reply(conn, &too_large).await?;
                    return Ok(Flow::Close);
                }
                Received::Data(Data::Dropped) => {
                    tracing::warn!(
                        peer = %self.peer,
                        "SMTP message discarded: the memory budget stayed in use as it grew"
                    );
                    self.reply(conn, NO_MEMORY).await?;
                    return Ok(Flow::Continue);
                }
            },
        };
        if self.shared.refuse_ambiguous_from {
            if let Some(why) = super::auth::ambiguous_author(&raw) {
                let why = why.as_str();
                tracing::info!(peer = %self.peer, why, "SMTP message refused: no single author");
                return self.fail(conn, super::auth::AMBIGUOUS_AUTHOR_REPLY).await;
            }
        }
        let auth = match &self.shared.auth {
            Some(checker) => {
                let helo = self.helo.as_deref().unwrap_or_default();
                checker
                    .check(&raw, self.peer.ip().to_canonical(), helo, &mail_from)
                    .await
            }
            None => AuthResults::default(),
        };
        let now = self.shared.clock.now();
        let delivery = agentaddress_email::deliver_email(
            self.shared.store.as_ref(),
            &Inbound {
                raw: &raw,
                mail_from: &mail_from,
                rcpt_to: &rcpts,
                provider: Provider::Smtp,
                auth,
                email_id_hint: None,
            },
            &self.shared.domain,
            &self.shared.limits,
            now,
        )
        .await;
        // `deliver_email` has returned: every accepted recipient's event is committed.
        //
        // SMTP has one reply to DATA for all the recipients. When every recipient failed, it
        // is the first failure's reply (temporary or permanent, the client acts on it for
        // all). When some succeeded and others failed now although they were accepted at RCPT
        // (their address was deleted or its feed filled in between — rare), the reply must be
        // 250, or the client would send again to those who have the message; RFC 5321 then
        // wants a bounce for the permanent failures. This server sends no mail, so it answers
        // 250 and logs each failed recipient instead (a message to an address deleted in that
        // instant is lost without a bounce; a full feed is too, where a bounce would have
        // invited a later retry).
        if delivery.accepted.is_empty() {
            let reply = delivery.rejected.first().map_or_else(
                || "451 4.3.0 Temporary failure, try again later".to_owned(),
                |r| r.rejection.smtp_reply().to_string(),
            );
            tracing::info!(peer = %self.peer, size = raw.len(), %reply, "SMTP message refused");
            if reply.starts_with('5') {
                return self.fail(conn, &reply).await;
            }
            self.reply(conn, &reply).await?;
            return Ok(Flow::Continue);
        }
        for rejected in &delivery.rejected {
            tracing::warn!(
                peer = %self.peer,
                rcpt = %rejected.rcpt,
                reply = %rejected.rejection.smtp_reply(),
                "SMTP recipient failed after DATA although others got the message: no bounce is sent"
            );
        }
        tracing::info!(
            peer = %self.peer,
            size = raw.len(),
            delivered = delivery.accepted.len(),
            duplicate = delivery.accepted.iter().all(|a| a.duplicate),
            "SMTP message delivered"
        );
        self.reply(conn, "250 2.0.0 OK").await?;
        Ok(Flow::Continue)
    }

    /// Reads the message after `354` into a [`DataReader`], holding its bytes in `memory` (grown
    /// as the message grows; given back when the message is not kept), and holding the client
    /// to the data rate ([`DataClock`]).
    async fn receive(
        &self, conn: &mut Conn, memory: &mut Reservation, max: usize,
    ) -> io::Result<Received> {
        let mut reader = DataReader::new(max);
        let mut clock = DataClock::new(self.shared.data_stall, self.shared.data_min_rate);
        loop {
            let n = match tokio::time::timeout_at(clock.deadline(), conn.fill_buf()).await {
                Err(_) => return Ok(Received::Slow),
                Ok(available) => available?.len(),
            };
            if n == 0 {
                return Ok(Received::Eof);
            }
            // Memory for what these bytes may add, before they are kept. The wait is the
            // server's, not the client's: it does not count against the data rate.
            let need = u64::try_from(reader.kept().saturating_add(n).min(max)).unwrap_or(u64::MAX);
            while reader.keeping() && memory.bytes() < need {
                let held = memory.bytes();
                let waiting = Instant::now();
                let grown = memory.grow(self.shared.command_timeout).await;
                clock.pause(waiting.elapsed());
                if !grown || memory.bytes() == held {
                    reader.drop_message();
                }
            }
            let available = conn.fill_buf().await?;
            let (taken, ended) = reader.push(available);
            conn.consume(taken);
            clock.received(taken);
            if !reader.keeping() {
                memory.release();
            }
            if let Some(data) = ended {
                return Ok(Received::Data(data));
            }
        }
    }

    async fn start_tls(&mut self, conn: &mut Conn, acceptor: TlsAcceptor) -> io::Result<()> {
        // Swap the connection out; `into_inner` drops what was pipelined behind STARTTLS.
        let placeholder: Conn = BufReader::new(Box::new(tokio::io::empty()) as Box<dyn Io>);
        let plain = std::mem::replace(conn, placeholder);
        if !plain.buffer().is_empty() {
            tracing::info!(
                peer = %self.peer,
                "SMTP: discarding plain-text commands sent behind STARTTLS"
            );
        }
        let stream = plain.into_inner();
        let tls = tokio::time::timeout(self.shared.command_timeout, acceptor.accept(stream))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timeout"))??;
        *conn = BufReader::new(Box::new(tls) as Box<dyn Io>);
        self.tls = true;
        self.helo = None;
        self.reset();
        Ok(())
    }

    /// Ends the transaction (RSET, EHLO, after DATA).
    fn reset(&mut self) {
        self.mail_from = None;
        self.rcpts.clear();
        self.refused.clear();
    }

    /// A failed command: its reply, or `421 4.7.0` and the end of the session when it is one
    /// failure too many.
    async fn fail(&mut self, conn: &mut Conn, reply: &str) -> io::Result<Flow> {
        self.errors += 1;
        if self.errors >= self.shared.max_errors {
            tracing::info!(peer = %self.peer, errors = self.errors, "SMTP session over its error cap");
            self.reply(conn, "421 4.7.0 Too many errors, closing connection")
                .await?;
            return Ok(Flow::Close);
        }
        self.reply(conn, reply).await?;
        Ok(Flow::Continue)
    }

    async fn shutting_down(&mut self, conn: &mut Conn) -> io::Result<()> {
        let reply = format!(
            "421 4.3.2 {} Service shutting down, closing connection",
            self.shared.hostname
        );
        self.reply(conn, &reply).await
    }

    /// Writes one reply (lines separated by CRLF, without the last CRLF), within the command
    /// timeout.
    async fn reply(&mut self, conn: &mut Conn, reply: &str) -> io::Result<()> {
        if let Some(code) = reply.get(..3).and_then(|c| c.parse::<u16>().ok()) {
            if code >= 400 {
                agentaddress_core::metrics::smtp_refusal(code);
            }
        }
        let write = async {
            conn.write_all(reply.as_bytes()).await?;
            conn.write_all(b"\r\n").await?;
            conn.flush().await
        };
        tokio::time::timeout(self.shared.command_timeout, write)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "SMTP reply write timeout"))?
    }
}
