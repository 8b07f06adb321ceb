//! Bounded reading off an SMTP connection: command lines (at most [`MAX_COMMAND_LINE`] bytes,
//! ending in CRLF or a bare LF) and the message after `DATA` ([`DataReader`]: dot-unstuffed,
//! at most the raw email limit, ended only by `<CR><LF>.<CR><LF>`).

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

/// Reads one command line of at most `max` bytes (line end included). A bare LF ends a command
/// line as CRLF does: before `DATA` nothing is stored, so there is nothing to smuggle.
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
    /// The message, dot-unstuffed, its line ends as sent (all CRLF).
    Message(Vec<u8>),
    /// A bare CR or a bare LF was in it: read to its end and discarded (`550 5.6.0`).
    BareLineEnd,
    /// The message was over the limit: read to its end and discarded.
    TooLarge,
    /// The message was dropped on the way ([`DataReader::drop_message`]) and read to its end.
    Dropped,
    /// Over the limit and then as much again without its end: the connection is closed.
    Flood,
}

/// Where the reader is in the data stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// At the start of a line: after a CRLF, or at the start of the data.
    LineStart,
    /// After a `.` at the start of a line (held back: a stuffing dot, or the terminator's).
    Dot,
    /// After `.` and CR at the start of a line (both held back).
    DotCr,
    /// Inside a line.
    Inside,
    /// After a CR inside a line (kept; bare unless an LF follows).
    Cr,
}

/// The message after `DATA`, read from the bytes pushed into it, up to the line `.`.
///
/// Only `<CR><LF>.<CR><LF>` ends the data (RFC 5321 §4.1.1.4), the start of the data counting as
/// after a CRLF. A bare LF (not after a CR) or a bare CR (not before an LF) anywhere taints the
/// message (RFC 5321 §2.3.8): it is read on to the real terminator and refused whole
/// ([`Data::BareLineEnd`]), so that a `<LF>.<LF>` — which other servers may take for the end —
/// never lets commands pipelined behind it through as a second, smuggled message. Postfix's
/// `smtpd_forbid_bare_newline` is the precedent (docs/API.md §10, "The SMTP door").
///
/// At most `max` bytes are kept (after unstuffing); past them the rest is read and discarded
/// up to the end ([`Data::TooLarge`]), unless twice `max` bytes in all arrive without it
/// ([`Data::Flood`]). CR and LF may be split across pushes.
#[derive(Debug)]
pub struct DataReader {
    max: usize,
    /// The message so far, while it is kept.
    message: Vec<u8>,
    /// Whether the bytes are still kept: not once the message is over `max`, tainted or
    /// dropped.
    keeping: bool,
    /// The message's length so far, kept or not (line ends included, stuffing dots not).
    len: usize,
    /// Every byte pushed, line ends and stuffing dots included.
    seen: usize,
    at: At,
    bare: bool,
    over: bool,
    dropped: bool,
}

impl DataReader {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            message: Vec::new(),
            keeping: true,
            len: 0,
            seen: 0,
            at: At::LineStart,
            bare: false,
            over: false,
            dropped: false,
        }
    }

    /// Whether the message is still kept (its bytes need memory).
    pub fn keeping(&self) -> bool {
        self.keeping
    }

    /// The bytes kept so far.
    pub fn kept(&self) -> usize {
        self.message.len()
    }

    /// Stops keeping the message (no memory for it): it is read to its end all the same, and
    /// ends as [`Data::Dropped`] unless it is refused for another reason.
    pub fn drop_message(&mut self) {
        self.dropped = true;
        self.stop_keeping();
    }

    fn stop_keeping(&mut self) {
        self.keeping = false;
        self.message = Vec::new();
    }

    /// Reads from `input`: returns how many of its bytes were taken (all of them unless the
    /// message ended, or flooded, within them) and how the message ended, if it did.
    pub fn push(&mut self, input: &[u8]) -> (usize, Option<Data>) {
        let mut i = 0;
        while i < input.len() {
            if self.at == At::Inside {
                // The fast path: everything up to the next CR or LF is the message's.
                let run = input[i..]
                    .iter()
                    .position(|&b| b == b'\r' || b == b'\n')
                    .unwrap_or(input.len() - i);
                if run > 0 {
                    self.seen = self.seen.saturating_add(run);
                    self.emit(&input[i..i + run]);
                    i += run;
                    if let Some(flood) = self.flooded() {
                        return (i, Some(flood));
                    }
                    continue;
                }
            }
            let b = input[i];
            i += 1;
            self.seen = self.seen.saturating_add(1);
            if let Some(end) = self.step(b) {
                return (i, Some(end));
            }
            if let Some(flood) = self.flooded() {
                return (i, Some(flood));
            }
        }
        (i, None)
    }

    /// One byte through the state machine; the end of the message when it is its last.
    fn step(&mut self, b: u8) -> Option<Data> {
        match (self.at, b) {
            (At::LineStart, b'.') => self.at = At::Dot,
            (At::Dot, b'\r') => self.at = At::DotCr,
            (At::DotCr, b'\n') => return Some(self.end()),
            (At::DotCr, _) => {
                // `.` then a CR not before an LF: the dot was stuffing, the CR is bare.
                self.taint();
                self.emit(b"\r");
                self.at = At::Inside;
                self.inside(b);
            }
            // A stuffing dot: dropped; what follows is the line's.
            (At::Dot, _) => {
                self.at = At::Inside;
                self.inside(b);
            }
            (At::Cr, b'\n') => {
                self.emit(b"\n");
                self.at = At::LineStart;
            }
            (At::Cr, _) => {
                // The CR before was bare.
                self.taint();
                self.at = At::Inside;
                self.inside(b);
            }
            (At::LineStart | At::Inside, _) => {
                self.at = At::Inside;
                self.inside(b);
            }
        }
        None
    }

    /// A byte inside a line.
    fn inside(&mut self, b: u8) {
        self.emit(&[b]);
        match b {
            b'\r' => self.at = At::Cr,
            b'\n' => self.taint(),
            _ => {}
        }
    }

    fn emit(&mut self, bytes: &[u8]) {
        self.len = self.len.saturating_add(bytes.len());
        if self.len > self.max && !self.over {
            self.over = true;
            self.stop_keeping();
        }
        if self.keeping {
            self.message.extend_from_slice(bytes);
        }
    }

    fn taint(&mut self) {
        if !self.bare {
            self.bare = true;
            self.stop_keeping();
        }
    }

    fn flooded(&self) -> Option<Data> {
        (self.over && self.seen > self.max.saturating_mul(2)).then_some(Data::Flood)
    }

    fn end(&mut self) -> Data {
        if self.bare {
            Data::BareLineEnd
        } else if self.over {
            Data::TooLarge
        } else if self.dropped {
            Data::Dropped
        } else {
            Data::Message(std::mem::take(&mut self.message))
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

    /// The data of `input` pushed in chunks of `chunk` bytes: how it ended (`None`: not yet)
    /// and what is left after it.
    fn data_in_chunks(input: &[u8], max: usize, chunk: usize) -> (Option<Data>, Vec<u8>) {
        let mut reader = DataReader::new(max);
        let mut at = 0;
        while at < input.len() {
            let end = (at + chunk).min(input.len());
            let (taken, ended) = reader.push(&input[at..end]);
            at += taken;
            if ended.is_some() {
                return (ended, input[at..].to_vec());
            }
            assert_eq!(at, end, "all of a chunk is taken unless the data ended");
        }
        (None, Vec::new())
    }

    /// [`data_in_chunks`] in one chunk, and in every chunk size from 1 to 7 with the same
    /// outcome (a CR and its LF, or `.` and its CRLF, split across pushes). After a flood the
    /// connection is closed: what is left then does not matter.
    fn data(input: &[u8], max: usize) -> (Option<Data>, Vec<u8>) {
        let whole = data_in_chunks(input, max, input.len().max(1));
        for chunk in 1..8 {
            let split = data_in_chunks(input, max, chunk);
            let shown = String::from_utf8_lossy(input);
            assert_eq!(split.0, whole.0, "in chunks of {chunk}: {shown:?}");
            if whole.0 != Some(Data::Flood) {
                assert_eq!(split.1, whole.1, "in chunks of {chunk}: {shown:?}");
            }
        }
        whole
    }

    #[test]
    fn data_is_unstuffed_and_ends_at_the_dot_line() {
        let (d, rest) = data(b"a\r\n..b\r\n.c\r\n\r\n.\r\nQUIT\r\n", 100);
        assert_eq!(d, Some(Data::Message(b"a\r\n.b\r\nc\r\n\r\n".to_vec())));
        assert_eq!(rest, b"QUIT\r\n");
        // ". " and ".x" are not the end.
        let (d, _) = data(b". \r\n.x\r\n.\r\n", 100);
        assert_eq!(d, Some(Data::Message(b" \r\nx\r\n".to_vec())));
        // The start of the data counts as after a CRLF: an empty message.
        let (d, rest) = data(b".\r\nNOOP\r\n", 100);
        assert_eq!(d, Some(Data::Message(Vec::new())));
        assert_eq!(rest, b"NOOP\r\n");
        // "..\r\n" is a line with one dot, not the end.
        let (d, _) = data(b"..\r\n.\r\n", 100);
        assert_eq!(d, Some(Data::Message(b".\r\n".to_vec())));
        // Without its terminator the message has not ended.
        let (d, _) = data(b"abc\r\n.", 100);
        assert_eq!(d, None);
    }

    /// Each shape that other servers may take for the end of the data: not the end here; the
    /// message is read on to the real `<CR><LF>.<CR><LF>` and refused whole, and what was
    /// pipelined behind the false end (a whole second transaction) went with it.
    #[test]
    fn a_bare_line_end_taints_the_message_and_only_crlf_dot_crlf_ends_it() {
        let smuggled =
            b"MAIL FROM:<e@x>\r\nRCPT TO:<a@y>\r\nDATA\r\nSubject: SMUGGLED\r\n\r\nHi\r\n";
        for shape in [
            &b"\n.\n"[..],
            b"\r\n.\n",
            b"\n.\r\n",
            b"\r.\r\n",
            b"\r\n.\r\r\n",
        ] {
            let mut input = b"Subject: Cover\r\n\r\nText".to_vec();
            input.extend_from_slice(shape);
            input.extend_from_slice(smuggled);
            input.extend_from_slice(b".\r\nNOOP\r\n");
            let (d, rest) = data(&input, 1000);
            let shape = String::from_utf8_lossy(shape);
            assert_eq!(d, Some(Data::BareLineEnd), "{shape:?}");
            assert_eq!(rest, b"NOOP\r\n", "{shape:?}");
        }
        // A bare LF or a bare CR anywhere, also first or last before the terminator.
        for input in [
            &b"a\nb\r\n.\r\n"[..],
            b"a\rb\r\n.\r\n",
            b"\n.\r\n.\r\n",
            b"\r\r\n.\r\n",
            b"a\r\r\n.\r\n",
            b"a\n\r\n.\r\n",
            b".\n\r\n.\r\n",
            b"..\n\r\n.\r\n",
        ] {
            let (d, rest) = data(input, 1000);
            let shown = String::from_utf8_lossy(input);
            assert_eq!(d, Some(Data::BareLineEnd), "{shown:?}");
            assert!(rest.is_empty(), "{shown:?}");
        }
        // A tainted message never ends at a bare `.` line: without CRLF.CRLF it goes on, also
        // when a CRLF follows (the dot is not at the start of a line after a CRLF).
        for input in [&b"a\n.\nNOOP\n"[..], b".\n.\r\n", b"a\n.\r\n", b"\r.\r\n"] {
            let (d, _) = data(input, 1000);
            assert_eq!(d, None, "{:?}", String::from_utf8_lossy(input));
        }
        // A tainted message over the limit is still bounded by the flood rule.
        let mut flood = b"a\n".to_vec();
        flood.extend_from_slice(&[b'x'; 100]);
        let (d, _) = data(&flood, 15);
        assert_eq!(d, Some(Data::Flood));
    }

    #[test]
    fn a_tainted_message_keeps_nothing() {
        let mut reader = DataReader::new(1000);
        let (_, ended) = reader.push(b"Subject: x\r\n\r\nabc");
        assert_eq!(ended, None);
        assert!(reader.keeping());
        assert_eq!(reader.kept(), 17);
        let (_, ended) = reader.push(b"\ndef");
        assert_eq!(ended, None);
        assert!(!reader.keeping());
        assert_eq!(reader.kept(), 0);
        let (_, ended) = reader.push(b"\r\n.\r\n");
        assert_eq!(ended, Some(Data::BareLineEnd));
    }

    #[test]
    fn data_over_the_limit_is_read_to_its_end() {
        let (d, rest) = data(b"0123456789\r\n0123456789\r\n.\r\nQUIT\r\n", 15);
        assert_eq!(d, Some(Data::TooLarge));
        assert_eq!(rest, b"QUIT\r\n");
        // One long line without an end: over the limit, and then over it again.
        let (d, _) = data(&[b'x'; 100], 15);
        assert_eq!(d, Some(Data::Flood));
        let (d, _) = data(b"abc", 15);
        assert_eq!(d, None);
        // Exactly at the limit is fine; a stuffing dot does not count.
        let (d, _) = data(b"0123456789\r\n.\r\n", 12);
        assert_eq!(d, Some(Data::Message(b"0123456789\r\n".to_vec())));
        let (d, _) = data(b"..23456789\r\n.\r\n", 12);
        assert_eq!(d, Some(Data::Message(b".23456789\r\n".to_vec())));
        let (d, _) = data(b"01234567890\r\n.\r\n", 12);
        assert_eq!(d, Some(Data::TooLarge));
    }

    #[test]
    fn a_dropped_message_is_read_to_its_end() {
        let mut reader = DataReader::new(100);
        let (_, ended) = reader.push(b"Subject: x\r\n");
        assert_eq!(ended, None);
        reader.drop_message();
        assert!(!reader.keeping());
        let (taken, ended) = reader.push(b"\r\nbody\r\n.\r\nQUIT\r\n");
        assert_eq!(ended, Some(Data::Dropped));
        assert_eq!(taken, 11);
        // Refused for another reason: that reason wins.
        let mut reader = DataReader::new(100);
        reader.drop_message();
        assert_eq!(reader.push(b"a\nb\r\n.\r\n").1, Some(Data::BareLineEnd));
    }
}
