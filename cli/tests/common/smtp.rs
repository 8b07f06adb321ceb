//! The SMTP door of `agentaddress serve` from the tests' side: the server with its door, its
//! addresses and their feeds, a raw SMTP client, and a fake DNS server for the door's SPF, DKIM
//! and DMARC checks.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdout};

/// The email domain of the SMTP tests' servers, unless a test needs another.
pub const DOMAIN: &str = "inbox.test";

/// How long the tests wait for one SMTP reply.
const REPLY_WITHIN: Duration = Duration::from_secs(30);

/// `agentaddress serve` with its SMTP door.
pub struct Serve {
    pub child: Child,
    pub base: String,
    pub smtp: SocketAddr,
    _stdout: BufReader<ChildStdout>,
    _dir: tempfile::TempDir,
}

/// `agentaddress serve --email-domain DOMAIN EXTRA…` with its SMTP door on a free port and its
/// database in a fresh temporary directory.
pub async fn serve(domain: &str, extra: &[&str]) -> Serve {
    let dir = tempfile::tempdir().expect("temp dir");
    serve_in(dir, domain, extra).await
}

/// [`serve`] with its database at `dir/smtp.db`.
pub async fn serve_in(dir: tempfile::TempDir, domain: &str, extra: &[&str]) -> Serve {
    let db = dir.path().join("smtp.db");
    let mut args = vec!["--email-domain", domain];
    args.extend_from_slice(extra);
    let (child, base, smtp, stdout) = super::spawn_serve_smtp(&db, &args).await;
    Serve {
        child,
        base,
        smtp: smtp
            .parse()
            .unwrap_or_else(|e| panic!("SMTP address {smtp}: {e}")),
        _stdout: stdout,
        _dir: dir,
    }
}

/// A server for `agents.test` that relays through `relay`'s SMTP door, from
/// `Agents <mail@agents.test>`, with `extra` flags.
pub async fn agent_server(relay: &Serve, extra: &[&str]) -> Serve {
    let url = format!("smtp://{}", relay.smtp);
    let mut args = vec![
        "--email-from",
        "Agents <mail@agents.test>",
        "--smtp-relay",
        url.as_str(),
    ];
    args.extend_from_slice(extra);
    serve("agents.test", &args).await
}

impl Serve {
    /// The SMTP door's port.
    pub fn port(&self) -> u16 {
        self.smtp.port()
    }

    /// Sends the server the signal `sig` (such as `-TERM`) with kill(1).
    pub fn signal(&self, sig: &str) {
        let pid = self.child.id().unwrap_or_else(|| panic!("no server pid"));
        let status = std::process::Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {sig} {pid}");
    }

    /// A new address of this server ([`create`] with a client of its own).
    pub async fn new_address(&self) -> Address {
        create(&reqwest::Client::new(), &self.base).await
    }
}

/// An address of a server at `base`, with its read token.
#[derive(Clone, Debug)]
pub struct Address {
    pub base: String,
    pub id: String,
    pub email: String,
    pub token: String,
}

/// Creates an address on the server at `base` (`201`).
pub async fn create(http: &reqwest::Client, base: &str) -> Address {
    let r = http
        .post(format!("{base}/api/v1/addresses"))
        .json(&json!({}))
        .send()
        .await
        .expect("create");
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.expect("create JSON");
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    Address {
        base: base.to_owned(),
        id: text(&v["address"]["id"]),
        email: text(&v["address"]["email"]),
        token: text(&v["credentials"]["read_token"]),
    }
}

/// The events of `a`'s feed on `base` (`200`), read with its read token (`wait` seconds of long
/// poll, 0 for none).
pub async fn feed(http: &reqwest::Client, base: &str, a: &Address, wait: u64) -> Vec<Value> {
    let r = http
        .get(format!(
            "{base}/api/v1/addresses/{}/events?after=0&wait={wait}",
            a.id
        ))
        .bearer_auth(&a.token)
        .send()
        .await
        .expect("GET events");
    let status = r.status();
    let body = r.text().await.expect("feed body");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("feed JSON");
    v["events"].as_array().cloned().unwrap_or_default()
}

impl Address {
    /// Every event of the feed, without a long poll.
    pub async fn events(&self) -> Vec<Value> {
        feed(&reqwest::Client::new(), &self.base, self, 0).await
    }
}

/// Asserts that `reply` starts with `prefix`.
#[track_caller]
pub fn starts(reply: &str, prefix: &str) {
    assert!(
        reply.starts_with(prefix),
        "expected a reply starting {prefix:?}, got {reply:?}"
    );
}

/// A raw SMTP client: bytes out, replies in.
pub struct Raw {
    r: BufReader<OwnedReadHalf>,
    w: OwnedWriteHalf,
}

impl Raw {
    /// Connects and returns the client with the greeting.
    pub async fn connect(to: &SocketAddr) -> (Raw, String) {
        let stream = TcpStream::connect(to)
            .await
            .unwrap_or_else(|e| panic!("connect to {to}: {e}"));
        Raw::greeted(stream).await
    }

    /// Connects from the loopback address `from` (port 0) and returns the client with the
    /// greeting.
    pub async fn connect_from(to: SocketAddr, from: [u8; 4]) -> (Raw, String) {
        Raw::greeted(super::net::connect_from(to, from, None).await).await
    }

    async fn greeted(stream: TcpStream) -> (Raw, String) {
        let (r, w) = stream.into_split();
        let mut raw = Raw {
            r: BufReader::new(r),
            w,
        };
        let greeting = raw.reply().await;
        (raw, greeting)
    }

    /// Connects from `from`, says EHLO, and starts a transaction to `rcpt`: the `DATA` reply.
    pub async fn open_data(to: SocketAddr, from: [u8; 4], rcpt: &str) -> (Raw, String) {
        let (mut c, greeting) = Raw::connect_from(to, from).await;
        starts(&greeting, "220 ");
        starts(&c.cmd("EHLO client.example").await, "250");
        let data = c.transaction(rcpt).await;
        (c, data)
    }

    /// `MAIL`, `RCPT` and `DATA` in one write (PIPELINING): the `DATA` reply.
    pub async fn transaction(&mut self, rcpt: &str) -> String {
        self.send(&format!(
            "MAIL FROM:<sender@example.com>\r\nRCPT TO:<{rcpt}>\r\nDATA\r\n"
        ))
        .await;
        starts(&self.reply().await, "250 2.1.0");
        starts(&self.reply().await, "250 2.1.5");
        self.reply().await
    }

    pub async fn send(&mut self, bytes: &str) {
        self.w.write_all(bytes.as_bytes()).await.expect("write");
    }

    /// One reply, its lines joined by `\n`; empty when the server closed the connection.
    pub async fn reply(&mut self) -> String {
        read_reply(&mut self.r).await
    }

    pub async fn cmd(&mut self, line: &str) -> String {
        self.send(&format!("{line}\r\n")).await;
        self.reply().await
    }

    /// Whether the server has closed the connection (EOF within 5 s; a reset is not).
    pub async fn closed(&mut self) -> bool {
        matches!(self.read_to_end_within_5s().await, Ok(Ok(_)))
    }

    /// Whether the server has closed the connection (EOF or a reset within 5 s).
    pub async fn closed_or_reset(&mut self) -> bool {
        self.read_to_end_within_5s().await.is_ok()
    }

    async fn read_to_end_within_5s(
        &mut self,
    ) -> Result<std::io::Result<usize>, tokio::time::error::Elapsed> {
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), self.r.read_to_end(&mut rest)).await
    }
}

/// One reply off `r`, its lines joined by `\n`; empty when the server closed the connection.
pub async fn read_reply<R: AsyncBufRead + Unpin>(r: &mut R) -> String {
    let mut all = Vec::new();
    loop {
        let mut line = String::new();
        let n = tokio::time::timeout(REPLY_WITHIN, r.read_line(&mut line))
            .await
            .unwrap_or_else(|_| panic!("no reply within {REPLY_WITHIN:?} (so far: {all:?})"))
            .expect("read");
        if n == 0 {
            return all.join("\n");
        }
        let line = line.trim_end().to_owned();
        let last = line.as_bytes().get(3) != Some(&b'-');
        all.push(line);
        if last {
            return all.join("\n");
        }
    }
}

/// Writes `line` and a CRLF to `s`, then reads the reply off `s`.
pub async fn exchange<S: AsyncBufRead + AsyncWrite + Unpin>(s: &mut S, line: &str) -> String {
    s.write_all(format!("{line}\r\n").as_bytes())
        .await
        .expect("write");
    s.flush().await.expect("flush");
    read_reply(s).await
}

/// A whole transaction on a raw connection (EHLO, `MAIL FROM:<from>`, a `RCPT` for each of
/// `rcpts`, `DATA`, `body` and the final `.`): the connection, still open, and the reply to the
/// final `.`.
pub async fn deliver_raw(
    smtp: &SocketAddr, from: &str, rcpts: &[&str], body: &str,
) -> (Raw, String) {
    let (mut c, greeting) = Raw::connect(smtp).await;
    starts(&greeting, "220 ");
    starts(&c.cmd("EHLO client.example").await, "250");
    starts(&c.cmd(&format!("MAIL FROM:<{from}>")).await, "250 2.1.0");
    for rcpt in rcpts {
        starts(&c.cmd(&format!("RCPT TO:<{rcpt}>")).await, "250 2.1.5");
    }
    starts(&c.cmd("DATA").await, "354");
    c.send(body).await;
    let reply = c.cmd(".").await;
    (c, reply)
}

/// [`deliver_raw`], then `QUIT` answered `221`: the reply to the final `.`.
pub async fn send_raw(smtp: &SocketAddr, from: &str, rcpts: &[&str], body: &str) -> String {
    let (mut c, reply) = deliver_raw(smtp, from, rcpts, body).await;
    starts(&c.cmd("QUIT").await, "221");
    reply
}

/// A DNS server on UDP for `--smtp-dns-resolver`: TXT queries for a name of `records` get its
/// strings; other queries for a known name get no answer; unknown names NXDOMAIN.
pub async fn fake_dns(
    records: Vec<(&'static str, &'static str)>,
) -> (String, tokio::task::JoinHandle<()>) {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("bind UDP");
    let addr = socket.local_addr().expect("UDP address").to_string();
    let task = tokio::spawn(async move {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            if let Some(answer) = dns_answer(&buf[..n], &records) {
                let _ = socket.send_to(&answer, from).await;
            }
        }
    });
    (addr, task)
}

/// The answer to the DNS query `q` from `records` (name, TXT string); `None` for a query it
/// cannot read.
fn dns_answer(q: &[u8], records: &[(&str, &str)]) -> Option<Vec<u8>> {
    let mut i = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*q.get(i)?);
        i += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(q.get(i..i + len)?).to_lowercase());
        i += len;
    }
    let qtype = u16::from_be_bytes([*q.get(i)?, *q.get(i + 1)?]);
    let question = q.get(12..i + 4)?;
    let name = labels.join(".");
    let known = records.iter().any(|(n, _)| *n == name);
    let answers: Vec<&str> = records
        .iter()
        .filter(|(n, _)| qtype == 16 && *n == name)
        .map(|(_, t)| *t)
        .collect();
    let mut out = Vec::new();
    out.extend_from_slice(q.get(..2)?);
    out.push(0x84 | (q.get(2)? & 0x01)); // QR, AA, RD as asked
    out.push(if known { 0x80 } else { 0x83 }); // RA; NOERROR or NXDOMAIN
    out.extend_from_slice(&[0, 1]);
    out.extend_from_slice(&u16::try_from(answers.len()).ok()?.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(question);
    for txt in answers {
        out.extend_from_slice(&[0xC0, 0x0C, 0, 16, 0, 1, 0, 0, 0, 60]);
        let len = u8::try_from(txt.len()).ok()?;
        out.extend_from_slice(&(u16::from(len) + 1).to_be_bytes());
        out.push(len);
        out.extend_from_slice(txt.as_bytes());
    }
    Some(out)
}
