//! Bounded reading off an SMTP connection: command lines (at most [`MAX_COMMAND_LINE`] bytes)
//! and the message after `DATA` (dot-unstuffed, at most the raw email limit). Both accept
//! bare LF line endings as well as CRLF.

use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Longest command line, its CRLF included (RFC 5321 §4.5.3.1.4 says 512 for commands; 1,000
/// is the text line limit, and leaves room for long `MAIL FROM` parameter lists).
pub const MAX_COMMAND_LINE: usize = 1000;

/// An over-long command line is discarded up to its end; past this many bytes without a line
/// end the client is not speaking SMTP, and the connection is closed.
pub const MAX_DISCARD: usize = 64 * 1024;

/// One command line.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// The line, without its line end.
    Command(Vec<u8>),
    /// The line was longer than the limit; it was read and discarded up to its end.
    TooLong,
    /// Over [`MAX_DISCARD`] bytes without a line end.
    Flood,
    /// The client closed the connection (a last line without a line end is dropped).
    Eof,
}

/// Reads one command line of at most `max` bytes (line end included).
pub async fn read_command<R: AsyncBufRead + Unpin>(r: &mut R, max: usize) -> io::Result<Line> {
    let mut line = Vec::new();
    let mut seen = 0usize;
    loop {
        let available = r.fill_buf().await?;
        if available.is_empty() {
            return Ok(Line::Eof);
        }
        let (chunk, ends) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..=i], true),
            None => (available, false),
        };
        let n = chunk.len();
        seen = seen.saturating_add(n);
        if seen <= max {
            line.extend_from_slice(chunk);
        }
        r.consume(n);
        if ends {
            if seen > max {
                return Ok(Line::TooLong);
            }
            strip_line_end(&mut line);
            return Ok(Line::Command(line));
        }
        if seen > MAX_DISCARD {
            return Ok(Line::Flood);
        }
    }
}

/// How the message after `DATA` ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Data {
    /// The message, dot-unstuffed, its line ends as sent.
    Message(Vec<u8>),
    /// The message was over the limit: read to its end and discarded.
    TooLarge,
    /// Over the limit and then as much again without its end: the connection is closed.
    Flood,
    /// The client closed the connection before the end of the message.
    Eof,
}

/// Reads a message up to the line `.` (CRLF or bare LF), undoing dot-stuffing. At most `max`
/// bytes are kept; past them the rest is read and discarded up to the end ([`Data::TooLarge`]),
/// unless twice `max` bytes in all arrive without it ([`Data::Flood`]).
pub async fn read_data<R: AsyncBufRead + Unpin>(r: &mut R, max: usize) -> io::Result<Data> {
    let mut message = Vec::new();
    let mut over = false;
    // Every byte read, line ends and stuffing dots included.
    let mut seen = 0usize;
    // The current line: all of it while the message is within its limit, else only its first
    // 3 bytes (enough to recognise the terminator `.\r\n`); and its length.
    let mut line: Vec<u8> = Vec::new();
    let mut line_len = 0usize;
    loop {
        let available = r.fill_buf().await?;
        if available.is_empty() {
            return Ok(Data::Eof);
        }
        let (chunk, ends) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..=i], true),
            None => (available, false),
        };
        let n = chunk.len();
        seen = seen.saturating_add(n);
        line_len = line_len.saturating_add(n);
        if over {
            let room = 3usize.saturating_sub(line.len()).min(n);
            line.extend_from_slice(&chunk[..room]);
        } else {
            line.extend_from_slice(chunk);
        }
        r.consume(n);
        if ends {
            if line_len <= 3 && matches!(line.as_slice(), b".\r\n" | b".\n") {
                return Ok(if over {
                    Data::TooLarge
                } else {
                    Data::Message(message)
                });
            }
            if !over {
                let body = line.strip_prefix(b".").unwrap_or(line.as_slice());
                if message.len().saturating_add(body.len()) > max {
                    over = true;
                    message = Vec::new();
                } else {
                    message.extend_from_slice(body);
                }
            }
            line.clear();
            line_len = 0;
        } else if !over && message.len().saturating_add(line.len()) > max.saturating_add(1) {
            // A line not yet ended is already too long (even without a stuffing dot).
            over = true;
            message = Vec::new();
            line.truncate(3);
        }
        if over && seen > max.saturating_mul(2) {
            return Ok(Data::Flood);
        }
    }
}

fn strip_line_end(line: &mut Vec<u8>) {
    if line.last() == Some(&b'\n') {
        line.pop();
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn commands(input: &[u8], max: usize) -> Vec<Line> {
        let mut r = input;
        let mut out = Vec::new();
        loop {
            let line = read_command(&mut r, max)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let eof = line == Line::Eof;
            out.push(line);
            if eof {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn command_lines_end_in_crlf_or_lf_and_are_bounded() {
        let lines = commands(b"EHLO a\r\nNOOP\nxxxxxxxxxx\r\nQUIT\r\npartial", 8).await;
        assert_eq!(
            lines,
            vec![
                Line::Command(b"EHLO a".to_vec()),
                Line::Command(b"NOOP".to_vec()),
                Line::TooLong,
                Line::Command(b"QUIT".to_vec()),
                Line::Eof,
            ]
        );
        let flood = vec![b'x'; MAX_DISCARD + 10];
        assert_eq!(commands(&flood, 8).await[0], Line::Flood);
    }

    async fn data(input: &[u8], max: usize) -> (Data, Vec<u8>) {
        let mut r = input;
        let d = read_data(&mut r, max)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        (d, r.to_vec())
    }

    #[tokio::test]
    async fn data_is_unstuffed_and_ends_at_the_dot_line() {
        let (d, rest) = data(b"a\r\n..b\r\n.c\n\r\n.\r\nQUIT\r\n", 100).await;
        assert_eq!(d, Data::Message(b"a\r\n.b\r\nc\n\r\n".to_vec()));
        assert_eq!(rest, b"QUIT\r\n");
        let (d, rest) = data(b"a\n.\nNOOP\n", 100).await;
        assert_eq!(d, Data::Message(b"a\n".to_vec()));
        assert_eq!(rest, b"NOOP\n");
        // ". " and ".x" are not the end.
        let (d, _) = data(b". \r\n.x\r\n.\r\n", 100).await;
        assert_eq!(d, Data::Message(b" \r\nx\r\n".to_vec()));
        let (d, _) = data(b".\r\n", 100).await;
        assert_eq!(d, Data::Message(Vec::new()));
    }

    #[tokio::test]
    async fn data_over_the_limit_is_read_to_its_end() {
        let (d, rest) = data(b"0123456789\r\n0123456789\r\n.\r\nQUIT\r\n", 15).await;
        assert_eq!(d, Data::TooLarge);
        assert_eq!(rest, b"QUIT\r\n");
        // One long line without an end: over the limit, and then over it again.
        let (d, _) = data(&[b'x'; 100], 15).await;
        assert_eq!(d, Data::Flood);
        let (d, _) = data(b"abc", 15).await;
        assert_eq!(d, Data::Eof);
        // Exactly at the limit is fine.
        let (d, _) = data(b"0123456789\r\n.\r\n", 12).await;
        assert_eq!(d, Data::Message(b"0123456789\r\n".to_vec()));
    }
}
