//! The limits of docs/API.md §6. Every deployment reads them from the same configuration.

use serde::Serialize;

/// Bytes of metadata counted for every state key (docs/API.md §7).
pub const STATE_KEY_OVERHEAD: u64 = 64;

/// Limits and retention. Defaults are the contract's; all are configurable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Limits {
    /// Largest inbox body accepted, in bytes.
    pub max_inbox_bytes: u64,
    /// Events an address may retain before deliveries and state writes answer `quota_exceeded`.
    pub max_retained_events: u64,
    /// Seconds an event is retained after it was received.
    pub event_retention_seconds: u64,
    /// State keys per address.
    pub max_state_keys: u64,
    /// State bytes per address, metadata included.
    pub max_state_bytes: u64,
    /// `GET events` requests per address per minute.
    pub polls_per_minute: u64,
    /// Address creations per client IP per minute.
    pub creations_per_minute: u64,
    /// Longest long-poll wait, in seconds.
    pub max_wait_seconds: u64,
    /// Seconds a deleted or expired address answers `address_gone` before it is forgotten.
    pub tombstone_seconds: u64,
    /// Largest raw email message accepted, in bytes (docs/API.md §10).
    pub max_email_bytes: u64,
    /// Raw bytes of retained email messages an address may keep before more mail is refused
    /// (temporarily: retention frees them).
    pub max_stored_email_bytes: u64,
    /// Recipients one message may name (RCPT TO commands, or `rcpt` parameters).
    pub max_email_recipients: u64,
    /// Open requests for a person an address may have (docs/API.md §12).
    pub max_open_requests: u64,
    /// Contacts an address may have (docs/API.md §16).
    pub max_contacts: u64,
    /// Emails an address may send per UTC day (docs/API.md §16).
    pub sends_per_day: u64,
    /// Contact code mails one recipient mailbox may be sent per UTC day, by all addresses
    /// together (docs/API.md §16; the mailbox as [`crate::domain::mail_out::recipient_key`]).
    pub code_mails_per_recipient_per_day: u64,
    /// Contact code mails one client (an IPv4 address or an IPv6 /64) may ask for per UTC day,
    /// for all addresses together (docs/API.md §16).
    pub code_mails_per_client_per_day: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_inbox_bytes: 1_000_000,
            max_retained_events: 1_000,
            event_retention_seconds: 30 * 24 * 3600,
            max_state_keys: 32,
            max_state_bytes: 65_536,
            polls_per_minute: 30,
            creations_per_minute: 20,
            max_wait_seconds: 25,
            tombstone_seconds: 30 * 24 * 3600,
            max_email_bytes: 10_000_000,
            max_stored_email_bytes: 100_000_000,
            max_email_recipients: 100,
            max_open_requests: 20,
            max_contacts: 10,
            sends_per_day: 20,
            code_mails_per_recipient_per_day: 5,
            code_mails_per_client_per_day: 20,
        }
    }
}

impl Limits {
    pub fn retention_ms(&self) -> i64 {
        i64::try_from(self.event_retention_seconds.saturating_mul(1000)).unwrap_or(i64::MAX)
    }

    pub fn tombstone_ms(&self) -> i64 {
        i64::try_from(self.tombstone_seconds.saturating_mul(1000)).unwrap_or(i64::MAX)
    }

    /// When an event received at `received_at` stops being retained: its retention period, cut
    /// short by the address's expiry.
    pub fn event_expiry(&self, received_at: i64, address_expires_at: Option<i64>) -> i64 {
        let by_retention = received_at.saturating_add(self.retention_ms());
        match address_expires_at {
            Some(e) => by_retention.min(e),
            None => by_retention,
        }
    }
}
