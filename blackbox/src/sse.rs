//! A small client of the event stream (`GET {root}/events/stream`, docs/API.md §14) that
//! reads the wire as it comes: each `id:` / `event:` / `data:` block and each comment line, so
//! that tests can check the format itself, not only what a lenient parser makes of it.
//! It reads the body with reqwest's `chunk()`, so no SSE library is needed.

use std::time::Duration;

use serde_json::Value;

use crate::Address;

/// What the stream sent next.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// A block with its fields, in the order sent (`("id", "7")`, `("event", "t")`, …).
    Event(SseEvent),
    /// A comment line, without the leading `:` (`" keep-alive"`).
    Comment(String),
}

/// One event block.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub fields: Vec<(String, String)>,
}

impl SseEvent {
    /// The value of `name` (the first, if sent more than once).
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// `id:` as a sequence; panics if it is not one.
    pub fn id(&self) -> u64 {
        self.field("id")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("an event's id is a sequence: {self:?}"))
    }

    /// `data:` as JSON; panics if it is not.
    pub fn data(&self) -> Value {
        let data = self
            .field("data")
            .unwrap_or_else(|| panic!("an event has data: {self:?}"));
        serde_json::from_str(data).unwrap_or_else(|e| panic!("data is JSON ({e}): {data}"))
    }
}

/// An open stream.
pub struct Stream {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    response: reqwest::Response,
    buffer: Vec<u8>,
    /// The fields of the block being read.
    fields: Vec<(String, String)>,
    /// The body as received so far, for messages.
    pub raw: Vec<u8>,
}

/// A client for streams: no overall timeout (a stream is long), a connect timeout only.
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(0)
        .build()
        .expect("cannot build an HTTP client")
}

impl Stream {
    /// `GET {root}/events/stream{query}` with the address's token and these extra headers.
    pub async fn open(
        http: &reqwest::Client, a: &Address, query: &str, headers: &[(&str, &str)],
    ) -> Stream {
        Self::open_with_token(http, a, query, Some(&a.token), headers).await
    }

    pub async fn open_with_token(
        http: &reqwest::Client, a: &Address, query: &str, token: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Stream {
        Self::try_open_with_token(http, a, query, token, headers)
            .await
            .expect("GET events/stream")
    }

    /// [`Stream::open`], with a failure to send (e.g. a connection the server refused as it
    /// connected, at its connection cap) as an error rather than a panic.
    pub async fn try_open(http: &reqwest::Client, a: &Address) -> Result<Stream, reqwest::Error> {
        Self::try_open_with_token(http, a, "", Some(&a.token), &[]).await
    }

    async fn try_open_with_token(
        http: &reqwest::Client, a: &Address, query: &str, token: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Result<Stream, reqwest::Error> {
        let mut req = http.get(format!("{}/stream{query}", a.events_url));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let response = req.send().await?;
        Ok(Stream {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            response,
            buffer: Vec::new(),
            fields: Vec::new(),
            raw: Vec::new(),
        })
    }

    /// An error answer (not a stream), read whole as JSON.
    pub async fn error_json(self) -> Value {
        let bytes = self
            .response
            .bytes()
            .await
            .expect("reading an error answer");
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("an error answer is JSON ({e}): {bytes:?}"))
    }

    /// The next item; `None` when the server ended the stream. Panics on a transport error or
    /// a line that is not SSE as docs/API.md §14 sends it.
    pub async fn next(&mut self) -> Option<Item> {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                let line =
                    String::from_utf8(line[..line.len() - 1].to_vec()).expect("a line is UTF-8");
                assert!(!line.contains('\r'), "lines end with LF alone: {line:?}");
                if line.is_empty() {
                    if self.fields.is_empty() {
                        continue;
                    }
                    return Some(Item::Event(SseEvent {
                        fields: std::mem::take(&mut self.fields),
                    }));
                }
                if let Some(comment) = line.strip_prefix(':') {
                    assert!(self.fields.is_empty(), "a comment inside a block: {line:?}");
                    // The blank line that ends a comment's block is skipped above.
                    return Some(Item::Comment(comment.to_owned()));
                }
                let (name, value) = line
                    .split_once(": ")
                    .unwrap_or_else(|| panic!("a field line is `name: value`: {line:?}"));
                self.fields.push((name.to_owned(), value.to_owned()));
                continue;
            }
            match self.response.chunk().await {
                Ok(Some(chunk)) => {
                    self.raw.extend_from_slice(&chunk);
                    self.buffer.extend_from_slice(&chunk);
                }
                Ok(None) => {
                    assert!(
                        self.buffer.is_empty() && self.fields.is_empty(),
                        "the stream ended inside a block: {:?}",
                        String::from_utf8_lossy(&self.buffer)
                    );
                    return None;
                }
                Err(e) => panic!("reading the stream: {e}"),
            }
        }
    }

    /// The next event, skipping comments; `None` at the stream's end.
    pub async fn next_event(&mut self) -> Option<SseEvent> {
        loop {
            match self.next().await? {
                Item::Event(e) => return Some(e),
                Item::Comment(_) => continue,
            }
        }
    }

    /// [`Stream::next`] within `limit`, else panics naming `what`.
    pub async fn next_within(&mut self, limit: Duration, what: &str) -> Option<Item> {
        tokio::time::timeout(limit, self.next())
            .await
            .unwrap_or_else(|_| panic!("{what}: nothing within {limit:?}"))
    }

    /// [`Stream::next_event`] within `limit`, else panics naming `what`.
    pub async fn next_event_within(&mut self, limit: Duration, what: &str) -> Option<SseEvent> {
        tokio::time::timeout(limit, self.next_event())
            .await
            .unwrap_or_else(|_| panic!("{what}: no event within {limit:?}"))
    }
}
