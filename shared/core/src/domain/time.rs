//! Time as milliseconds since the Unix epoch, an injectable clock, and the wire format.

use std::sync::atomic::{AtomicI64, Ordering};

/// Milliseconds since the Unix epoch (UTC).
pub type Millis = i64;

/// The source of "now". Production uses [`SystemClock`]; tests move a [`ManualClock`] to
/// expire addresses and events without waiting.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> Millis;
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Millis {
        chrono::Utc::now().timestamp_millis()
    }
}

/// A clock that only moves when told to.
#[derive(Debug)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn new(start: Millis) -> Self {
        Self(AtomicI64::new(start))
    }

    /// Starts at the current wall-clock time, so formatted times look real.
    pub fn starting_now() -> Self {
        Self::new(SystemClock.now())
    }

    pub fn advance_ms(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }

    pub fn advance_secs(&self, secs: i64) {
        self.advance_ms(secs.saturating_mul(1000));
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}

/// RFC 3339 UTC with milliseconds, e.g. `2026-11-30T11:04:10.123Z`.
pub fn format_rfc3339(ms: Millis) -> String {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        None => String::from("9999-12-31T23:59:59.999Z"),
    }
}

/// UTC to the minute, for people, e.g. `Mon 30 Nov 2026, 11:04 UTC`: the text of a page's
/// `<time>` before (or without) its script puts it in the reader's locale (docs/API.md §12).
pub fn format_utc_for_people(ms: Millis) -> String {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) => t.format("%a %-d %b %Y, %H:%M UTC").to_string(),
        None => String::from("Fri 31 Dec 9999, 23:59 UTC"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_milliseconds_and_z() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_rfc3339(1_796_036_650_123),
            "2026-11-30T11:04:10.123Z"
        );
    }

    #[test]
    fn formats_for_people_in_utc_to_the_minute() {
        assert_eq!(
            format_utc_for_people(1_796_036_650_123),
            "Mon 30 Nov 2026, 11:04 UTC"
        );
        assert_eq!(format_utc_for_people(0), "Thu 1 Jan 1970, 00:00 UTC");
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(1000);
        assert_eq!(c.now(), 1000);
        c.advance_secs(2);
        assert_eq!(c.now(), 3000);
    }
}
