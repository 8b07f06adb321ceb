//! HTTP/1.1 answers read off raw sockets, for the tests that speak to `serve` byte by byte.

use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Path part of an absolute URL.
pub fn path_of(url: &str) -> String {
    let rest = url
        .split_once("://")
        .map(|(_, r)| r)
        .unwrap_or_else(|| panic!("not an absolute URL: {url}"));
    rest.find('/')
        .map(|i| rest[i..].to_owned())
        .unwrap_or_else(|| panic!("no path in {url}"))
}

/// One answer: status, lower-cased headers, body (what has arrived of it).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// `Content-Length`, 0 when absent.
    pub fn content_length(&self) -> usize {
        self.header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "the answer ({}) is not JSON ({e}): {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The API's JSON error with `status` and `code`.
    #[track_caller]
    pub fn expect_error(&self, status: u16, code: &str, what: &str) {
        let body = self.json();
        assert_eq!(self.status, status, "{what}: {body}");
        assert_eq!(body["error"]["code"], code, "{what}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{what}: {body}"
        );
        let ct = self.header("content-type").unwrap_or_default();
        assert!(ct.starts_with("application/json"), "{what}: {ct}");
    }
}

/// The answer at the start of `bytes`, once its head is complete.
pub fn parse_answer(bytes: &[u8]) -> Option<Answer> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&bytes[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Some(Answer {
        status,
        headers,
        body: bytes[end + 4..].to_vec(),
    })
}

/// Reads one whole answer (its `Content-Length` body included) within `limit`.
pub async fn read_answer(sock: &mut TcpStream, limit: Duration) -> Answer {
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        if let Some(mut a) = parse_answer(&got) {
            let len = a.content_length();
            if a.body.len() >= len {
                a.body.truncate(len);
                return a;
            }
        }
        let left = limit.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, sock.read(&mut buf)).await {
            Err(_) => panic!(
                "no whole answer within {limit:?}; got {:?}",
                String::from_utf8_lossy(&got)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => panic!(
                "the connection closed before a whole answer; got {:?}",
                String::from_utf8_lossy(&got)
            ),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}
