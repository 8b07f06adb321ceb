//! Outbound email to confirmed contacts (docs/API.md §16): the rules written once for both
//! deployments — what a contact's email address, a subject and a text may be, the confirmation
//! code and its hash, the UTC day sends are counted in, threading, and the events a send
//! appends. Everything here is pure.

use rand::Rng;
use serde::Serialize;
use subtle::ConstantTimeEq;

use super::{ids, Invalid, Millis};

/// Digits of a confirmation code.
pub const CODE_DIGITS: usize = 6;
/// A code is valid for 30 minutes after it was mailed.
pub const CODE_VALID_MS: Millis = 30 * 60 * 1000;
/// Wrong codes tried before a code is spent (a new one must be asked for).
pub const CODE_TRIES: u32 = 5;
/// Code mails per contact per UTC day.
pub const CODE_MAILS_PER_DAY: u32 = 3;
/// `subject`: 1 to 200 characters.
pub const SUBJECT_MAX_CHARS: usize = 200;
/// `text`: at most 10,000 bytes of UTF-8.
pub const TEXT_MAX_BYTES: usize = 10_000;
/// A contact's email address: at most 254 bytes (RFC 5321's path limit less the brackets).
pub const EMAIL_MAX_BYTES: usize = 254;
/// Send ids (and the local part of a sent message's `Message-ID`): `snd_` and 128 random bits.
pub const SEND_PREFIX: &str = "snd_";
/// At most this many message ids are carried in `References`.
pub const REFERENCES_MAX: usize = 20;
/// Delivery attempts of a send before it is reported failed (docs/API.md §16).
pub const SEND_ATTEMPTS: u32 = 6;
/// How long one delivery attempt holds its claim on a send before another may take it.
pub const SEND_LEASE_MS: Millis = 5 * 60 * 1000;
const DAY_MS: Millis = 86_400_000;

/// A contact's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ContactStatus {
    Pending,
    Confirmed,
}

impl ContactStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ContactStatus::Pending => "pending",
            ContactStatus::Confirmed => "confirmed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(ContactStatus::Pending),
            "confirmed" => Some(ContactStatus::Confirmed),
            _ => None,
        }
    }
}

/// Where a send is in its delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendStatus {
    /// Recorded, not yet accepted by the relay (an attempt may be under way).
    Pending,
    /// The relay accepted it.
    Sent,
    /// Given up on, and reported as `email.send_failed`.
    Failed,
}

impl SendStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SendStatus::Pending => "pending",
            SendStatus::Sent => "sent",
            SendStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(SendStatus::Pending),
            "sent" => Some(SendStatus::Sent),
            "failed" => Some(SendStatus::Failed),
            _ => None,
        }
    }
}

/// A contact's email address as the contract takes it: `local@domain`, ASCII, at most 254
/// bytes, a dot-atom local part and a domain of letters, digits and hyphens with at least one
/// dot — no spaces, quotes, comments, brackets, control characters or RFC 2047 encoded-words,
/// so it can never carry a header of its own. Answered lower-cased: contacts are one per
/// mailbox whatever the case it is written in.
pub fn parse_contact_email(s: &str) -> Result<String, Invalid> {
    let bad = || {
        Invalid::new(format!(
            "`email`/`to` must be a plain email address like ada@example.com (ASCII, at most \
             {EMAIL_MAX_BYTES} bytes, no display name, spaces or control characters); got {:?}",
            truncate_for_message(s)
        ))
    };
    if s.is_empty() || s.len() > EMAIL_MAX_BYTES || !s.is_ascii() || s.contains("=?") {
        return Err(bad());
    }
    let (local, domain) = s.rsplit_once('@').ok_or_else(bad)?;
    let atext = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-/=?^_`{|}~".contains(&b);
    let local_ok = !local.is_empty()
        && local.len() <= 64
        && local
            .split('.')
            .all(|a| !a.is_empty() && a.bytes().all(atext));
    let domain_ok = domain.len() <= 253
        && domain.contains('.')
        && domain.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if local_ok && domain_ok {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(bad())
    }
}

/// `subject`: 1 to 200 characters, not blank, no control characters (CR and LF included: a
/// subject is one header line) and no RFC 2047 encoded-word (`=?`), which a mail reader would
/// decode into something else than what was written.
pub fn check_subject(s: &str) -> Result<(), Invalid> {
    let chars = s.chars().count();
    if chars == 0 || s.trim().is_empty() || chars > SUBJECT_MAX_CHARS {
        return Err(Invalid::new(format!(
            "`subject` must be 1 to {SUBJECT_MAX_CHARS} characters and not blank (got {chars})"
        )));
    }
    if s.chars().any(char::is_control) {
        return Err(Invalid::new(
            "`subject` may not contain control characters (CR, LF, tab…): it is one header line",
        ));
    }
    if s.contains("=?") {
        return Err(Invalid::new(
            "`subject` may not contain `=?` (an RFC 2047 encoded-word): write the text itself, \
             any Unicode is encoded for you",
        ));
    }
    Ok(())
}

/// `text`: at most 10,000 bytes, no NUL.
pub fn check_text(s: &str) -> Result<(), Invalid> {
    if s.len() > TEXT_MAX_BYTES {
        return Err(Invalid::new(format!(
            "`text` is {} bytes; at most {TEXT_MAX_BYTES} are sent",
            s.len()
        )));
    }
    if s.contains('\0') {
        return Err(Invalid::new("`text` may not contain NUL characters"));
    }
    Ok(())
}

/// The mailbox a code mail is counted against, server-wide (docs/API.md §16): the contact
/// (already lower-cased, [`parse_contact_email`]) without a `+tag` in its local part, so that
/// `Victim+1@Example.com` and `victim@example.com` are one mailbox. (Whether a mail system
/// treats `+` as a tag, or the case of local parts as significant, is its own business; for a
/// cap, counting more addresses as one only makes it bite earlier.)
pub fn recipient_key(contact: &str) -> String {
    let lower = contact.to_ascii_lowercase();
    match lower.rsplit_once('@') {
        Some((local, domain)) => {
            let base = local.split('+').next().unwrap_or(local);
            let base = if base.is_empty() { local } else { base };
            format!("{base}@{domain}")
        }
        None => lower,
    }
}

/// The scope of the daily count of code mails to one recipient mailbox ([`recipient_key`]).
pub fn code_mails_to_scope(contact: &str) -> String {
    format!("code_to:{}", recipient_key(contact))
}

/// The scope of the daily count of code mails one client asked for (its client key,
/// [`crate::domain::client::ClientKey`]).
pub fn code_mails_from_scope(client: &str) -> String {
    format!("code_from:{client}")
}

/// A new confirmation code: six decimal digits from the OS's CSPRNG.
pub fn new_code() -> String {
    let n: u32 = rand::rngs::OsRng.gen_range(0..1_000_000);
    format!("{n:0width$}", width = CODE_DIGITS)
}

/// Whether `s` looks like a code (six ASCII digits): anything else is refused before it counts
/// as a try.
pub fn is_code_shaped(s: &str) -> bool {
    s.len() == CODE_DIGITS && s.bytes().all(|b| b.is_ascii_digit())
}

/// The stored form of a code: SHA-256 over the address, the contact and the code, so a code
/// hash is worth nothing for another contact.
pub fn code_hash(address_id: &str, contact: &str, code: &str) -> String {
    ids::sha256_hex(
        format!("agentaddress-contact-code\0{address_id}\0{contact}\0{code}").as_bytes(),
    )
}

/// Constant-time equality of two code hashes.
pub fn code_hashes_equal(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// The UTC day (days since 1970-01-01) containing `now`: the window of the daily limits.
pub fn utc_day(now: Millis) -> i64 {
    now.div_euclid(DAY_MS)
}

/// Whole seconds (≥ 1) until the UTC day containing `now` ends: the `Retry-After` of a daily
/// limit.
pub fn seconds_to_next_day(now: Millis) -> u64 {
    let left = (utc_day(now) + 1) * DAY_MS - now;
    ((left + 999) / 1000).max(1) as u64
}

/// A new send id.
pub fn new_send_id() -> String {
    let bytes: [u8; 16] = rand::random();
    format!("{SEND_PREFIX}{}", hex::encode(bytes))
}

/// The `Message-ID` of a sent message: the send id at the sender's domain.
pub fn message_id(send_id: &str, sender: &str) -> String {
    let domain = sender.rsplit_once('@').map_or("localhost", |(_, d)| d);
    format!("<{send_id}@{}>", domain.trim_end_matches('>'))
}

/// The subject of a reply: `Re: ` before it unless it starts with one already.
pub fn reply_subject(subject: &str) -> String {
    let t = subject.trim_start();
    if t.len() >= 3 && t[..3].eq_ignore_ascii_case("re:") {
        subject.to_owned()
    } else {
        format!("Re: {subject}")
    }
}

/// Whether `s` is a message id fit to repeat in a header: `<…>`, printable ASCII, no spaces,
/// at most 998 bytes.
pub fn is_message_id(s: &str) -> bool {
    s.len() >= 3
        && s.len() <= 998
        && s.starts_with('<')
        && s.ends_with('>')
        && s[1..s.len() - 1]
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'<' && b != b'>')
}

/// `In-Reply-To` and `References` of a reply to a received message with `message_id` and
/// `references` (from its `email.received` event): the references followed by the message id,
/// only well-formed ids, at most [`REFERENCES_MAX`] (the newest).
pub fn threading(message_id: Option<&str>, references: &[String]) -> (Option<String>, Vec<String>) {
    let parent = message_id.filter(|m| is_message_id(m)).map(str::to_owned);
    let mut refs: Vec<String> = references
        .iter()
        .filter(|r| is_message_id(r))
        .cloned()
        .collect();
    if let Some(p) = &parent {
        refs.retain(|r| r != p);
        refs.push(p.clone());
    }
    if refs.len() > REFERENCES_MAX {
        refs.drain(..refs.len() - REFERENCES_MAX);
    }
    (parent, refs)
}

/// The `data` of an `email.sent` event (docs/API.md §16).
pub fn email_sent_data(
    to: &str, subject: &str, text: &str, message_id: &str, in_reply_to: Option<&str>,
) -> String {
    serde_json::json!({
        "to": to,
        "subject": subject,
        "text": text,
        "message_id": message_id,
        "in_reply_to": in_reply_to,
    })
    .to_string()
}

/// The `data` of an `email.send_failed` event: which send (its event), to whom, why, whether
/// the relay refused it for good, and after how many attempts.
pub fn send_failed_data(
    sent_event_id: &str, to: &str, message_id: &str, error: &str, permanent: bool, attempts: u32,
) -> String {
    serde_json::json!({
        "event_id": sent_event_id,
        "to": to,
        "message_id": message_id,
        "error": error,
        "permanent": permanent,
        "attempts": attempts,
    })
    .to_string()
}

/// The delay before attempt `attempt + 1` after `attempt` failed temporarily (1-based):
/// `base`, then 4× each time (`base` 30 s: 30 s, 2 min, 8 min, 32 min, about 2 h).
pub fn retry_delay_ms(base_ms: Millis, attempt: u32) -> Millis {
    base_ms.saturating_mul(4i64.saturating_pow(attempt.saturating_sub(1)))
}

fn truncate_for_message(s: &str) -> String {
    s.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipients_are_counted_by_mailbox() {
        assert_eq!(recipient_key("victim@example.com"), "victim@example.com");
        assert_eq!(recipient_key("Victim+1@Example.COM"), "victim@example.com");
        assert_eq!(
            recipient_key("victim+a+b@example.com"),
            "victim@example.com"
        );
        assert_eq!(recipient_key("+tag@example.com"), "+tag@example.com");
        assert_ne!(
            recipient_key("victim@example.com"),
            recipient_key("victim@example.org")
        );
        assert_ne!(
            recipient_key("victim@example.com"),
            recipient_key("victim2@example.com")
        );
        assert_eq!(code_mails_to_scope("V+x@E.com"), "code_to:v@e.com");
        assert_eq!(
            code_mails_from_scope("2001:db8::/64"),
            "code_from:2001:db8::/64"
        );
    }

    #[test]
    fn contact_emails() {
        assert_eq!(
            parse_contact_email("Ada.Lovelace+x@Example.COM").as_deref(),
            Ok("ada.lovelace+x@example.com")
        );
        for bad in [
            "",
            "ada",
            "ada@localhost",
            "Ada <ada@example.com>",
            "ada@example.com\r\nBcc: eve@example.com",
            "ada@example.com\n",
            " ada@example.com",
            "=?utf-8?q?ada?=@example.com",
            "\"a b\"@example.com",
            "a..b@example.com",
            ".a@example.com",
            "a@-x.example",
            "a@x_y.example",
            "ada@example.com,eve@example.com",
            "adá@example.com",
        ] {
            assert!(parse_contact_email(bad).is_err(), "{bad:?} accepted");
        }
        let long = format!("{}@example.com", "a".repeat(65));
        assert!(parse_contact_email(&long).is_err());
    }

    #[test]
    fn subjects_and_texts() {
        assert!(check_subject("Quarterly report — ready?").is_ok());
        assert!(check_subject(&"é".repeat(200)).is_ok());
        assert!(check_subject(&"é".repeat(201)).is_err());
        for bad in [
            "",
            "  ",
            "a\r\nBcc: x@y.z",
            "a\nb",
            "a\tb",
            "=?utf-8?b?SGk=?=",
        ] {
            assert!(check_subject(bad).is_err(), "{bad:?} accepted");
        }
        assert!(check_text(&"x".repeat(10_000)).is_ok());
        assert!(check_text(&"x".repeat(10_001)).is_err());
        assert!(check_text("a\0b").is_err());
    }

    #[test]
    fn codes() {
        for _ in 0..100 {
            let c = new_code();
            assert!(is_code_shaped(&c), "{c}");
        }
        assert!(!is_code_shaped("12345"));
        assert!(!is_code_shaped("12345a"));
        assert!(!is_code_shaped("١٢٣٤٥٦"));
        let h = code_hash("addr_a", "ada@example.com", "123456");
        assert!(code_hashes_equal(
            &h,
            &code_hash("addr_a", "ada@example.com", "123456")
        ));
        assert!(!code_hashes_equal(
            &h,
            &code_hash("addr_b", "ada@example.com", "123456")
        ));
        assert!(!code_hashes_equal(
            &h,
            &code_hash("addr_a", "ada@example.com", "123457")
        ));
    }

    #[test]
    fn days() {
        assert_eq!(utc_day(0), 0);
        assert_eq!(utc_day(DAY_MS - 1), 0);
        assert_eq!(utc_day(DAY_MS), 1);
        assert_eq!(seconds_to_next_day(DAY_MS - 1), 1);
        assert_eq!(seconds_to_next_day(0), 86_400);
    }

    #[test]
    fn threading_and_subjects() {
        assert_eq!(reply_subject("Hello"), "Re: Hello");
        assert_eq!(reply_subject("RE: Hello"), "RE: Hello");
        let (parent, refs) = threading(
            Some("<b@x>"),
            &["<a@x>".into(), "bad id".into(), "<b@x>".into()],
        );
        assert_eq!(parent.as_deref(), Some("<b@x>"));
        assert_eq!(refs, vec!["<a@x>".to_owned(), "<b@x>".to_owned()]);
        let many: Vec<String> = (0..30).map(|i| format!("<{i}@x>")).collect();
        let (_, refs) = threading(Some("<p@x>"), &many);
        assert_eq!(refs.len(), REFERENCES_MAX);
        assert_eq!(refs.last().map(String::as_str), Some("<p@x>"));
        assert!(!is_message_id("<a\r\nb@x>"));
        assert_eq!(
            message_id("snd_1", "Agents <mail@agents.example>"),
            "<snd_1@agents.example>"
        );
    }

    #[test]
    fn retry_delays_grow() {
        assert_eq!(retry_delay_ms(30_000, 1), 30_000);
        assert_eq!(retry_delay_ms(30_000, 2), 120_000);
        assert_eq!(retry_delay_ms(30_000, 5), 7_680_000);
    }
}
