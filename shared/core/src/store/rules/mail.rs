//! The rules of outbound mail (docs/API.md §16) that a store applies inside its own atomic
//! step: a contact's confirmation code (its tries, expiry and daily mails), the caps on
//! contacts, code mails and sends, and when a send may be claimed for an attempt. Each store
//! reads what a rule needs, asks it, and persists what it decides (on DynamoDB the same rule is
//! also the condition of the write, so a lost race decides again on a fresh read).

use crate::domain::mail_out::{
    code_mails_from_scope, code_mails_to_scope, seconds_to_next_day, utc_day, ContactStatus,
    SendStatus, CODE_MAILS_PER_DAY, CODE_TRIES,
};
use crate::domain::{Limits, Millis};
use crate::store::{
    CodeCheck, CodeMailCap, ContactRecord, NewCode, SendRecord, StoreError, StoreResult,
};

/// Where a code try stands before its hash is compared.
#[derive(Debug, Clone, PartialEq)]
pub enum CodeTry {
    /// The try is answered without comparing: confirmed before, expired (or no code), spent.
    Decided(CodeCheck),
    /// The code is pending, unexpired and has tries left: the try counts, and its hash is
    /// compared with the stored one.
    Compare,
}

/// Where a try at `contact`'s code stands at `now`, in this order: already confirmed, expired
/// (or none mailed), every one of [`CODE_TRIES`] tries used, else compare.
pub fn code_try(contact: &ContactRecord, now: Millis) -> CodeTry {
    if contact.status == ContactStatus::Confirmed {
        return CodeTry::Decided(CodeCheck::AlreadyConfirmed(contact.clone()));
    }
    match (&contact.code_hash, contact.code_expires_at) {
        (Some(_), Some(expires_at)) if expires_at > now => {}
        _ => return CodeTry::Decided(CodeCheck::Expired),
    }
    if contact.code_tries >= CODE_TRIES {
        CodeTry::Decided(CodeCheck::Spent)
    } else {
        CodeTry::Compare
    }
}

/// A wrong code, once `tries_counted` tries of it (this one included) are counted.
pub fn wrong_code(tries_counted: u32) -> CodeCheck {
    CodeCheck::Wrong {
        tries_left: CODE_TRIES.saturating_sub(tries_counted),
    }
}

/// The code mails `contact` was sent on `now`'s UTC day before this one; a fourth of the day is
/// [`StoreError::DailyLimit`] until the next UTC midnight.
pub fn contact_code_mails(contact: &ContactRecord, now: Millis) -> StoreResult<u32> {
    let mails = if contact.code_day == utc_day(now) {
        contact.code_mails
    } else {
        0
    };
    if mails >= CODE_MAILS_PER_DAY {
        return Err(StoreError::DailyLimit {
            retry_after_seconds: seconds_to_next_day(now),
        });
    }
    Ok(mails)
}

/// The contact limit: a new contact beside `contacts` others is [`StoreError::QuotaExceeded`]
/// at `limits.max_contacts`.
pub fn contact_quota(contacts: u64, limits: &Limits) -> StoreResult<()> {
    if contacts >= limits.max_contacts {
        Err(StoreError::QuotaExceeded)
    } else {
        Ok(())
    }
}

/// One server-wide daily count a code mail is counted against (docs/API.md §16).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeMailCount {
    /// The counter's scope (with the UTC day, its key).
    pub scope: String,
    pub cap: CodeMailCap,
    /// The most code mails of the day the scope may count.
    pub max: u64,
}

/// The daily counts a code mail is checked and counted against, in the order they refuse:
/// the recipient's mailbox, then the client asking.
pub fn code_mail_counts(code: &NewCode, limits: &Limits) -> [CodeMailCount; 2] {
    [
        CodeMailCount {
            scope: code_mails_to_scope(&code.email),
            cap: CodeMailCap::Recipient,
            max: limits.code_mails_per_recipient_per_day,
        },
        CodeMailCount {
            scope: code_mails_from_scope(&code.client),
            cap: CodeMailCap::Client,
            max: limits.code_mails_per_client_per_day,
        },
    ]
}

/// The refusal of a code mail past `cap`, until the next UTC midnight.
pub fn code_mail_capped(cap: CodeMailCap, now: Millis) -> StoreError {
    StoreError::CodeMailCap {
        cap,
        retry_after_seconds: seconds_to_next_day(now),
    }
}

/// Whether `count` code mails of the day leave room for one more under `count`'s cap.
pub fn code_mail_allowed(count: &CodeMailCount, today: u64, now: Millis) -> StoreResult<()> {
    if today >= count.max {
        Err(code_mail_capped(count.cap, now))
    } else {
        Ok(())
    }
}

/// A send goes only to a confirmed contact: else [`StoreError::ContactNotConfirmed`].
pub fn send_recipient(contact: Option<&ContactRecord>) -> StoreResult<()> {
    if contact.is_some_and(|c| c.status == ContactStatus::Confirmed) {
        Ok(())
    } else {
        Err(StoreError::ContactNotConfirmed)
    }
}

/// The daily send limit: the `limits.sends_per_day`-th send of the UTC day after `today` others
/// is [`StoreError::DailyLimit`] until the next UTC midnight.
pub fn daily_sends(today: u64, limits: &Limits, now: Millis) -> StoreResult<()> {
    if today >= limits.sends_per_day {
        Err(StoreError::DailyLimit {
            retry_after_seconds: seconds_to_next_day(now),
        })
    } else {
        Ok(())
    }
}

/// How long a send recorded at `now` is kept: as long as its event, and at least until the end
/// of the day after the one it is counted in.
pub fn send_expires_at(limits: &Limits, now: Millis, address_expires_at: Option<Millis>) -> Millis {
    limits
        .event_expiry(now, address_expires_at)
        .max(day_counted_until(now))
}

/// Until when the daily send count of `now`'s UTC day is kept: the end of the next day.
pub fn day_counted_until(now: Millis) -> Millis {
    (utc_day(now) + 2) * 86_400_000
}

/// Whether a send may be claimed for an attempt at `now`: pending, its next attempt due, and
/// no other attempt's lease running.
pub fn claimable(send: &SendRecord, now: Millis) -> bool {
    send.status == SendStatus::Pending
        && send.next_attempt_at.unwrap_or(0) <= now
        && send.lease_until.unwrap_or(0) <= now
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(tries: u32, expires_at: Option<Millis>) -> ContactRecord {
        ContactRecord {
            email: "a@example.com".into(),
            status: ContactStatus::Pending,
            created_at: 0,
            confirmed_at: None,
            code_hash: Some("h".into()),
            code_expires_at: expires_at,
            code_tries: tries,
            code_day: 0,
            code_mails: 1,
        }
    }

    #[test]
    fn a_code_try_is_decided_in_order_confirmed_expired_spent() {
        let mut confirmed = pending(CODE_TRIES, Some(0));
        confirmed.status = ContactStatus::Confirmed;
        assert!(matches!(
            code_try(&confirmed, 10),
            CodeTry::Decided(CodeCheck::AlreadyConfirmed(_))
        ));
        assert_eq!(
            code_try(&pending(CODE_TRIES, Some(10)), 10),
            CodeTry::Decided(CodeCheck::Expired)
        );
        let mut no_code = pending(0, Some(20));
        no_code.code_hash = None;
        assert_eq!(code_try(&no_code, 10), CodeTry::Decided(CodeCheck::Expired));
        assert_eq!(
            code_try(&pending(CODE_TRIES, Some(20)), 10),
            CodeTry::Decided(CodeCheck::Spent)
        );
        assert_eq!(
            code_try(&pending(CODE_TRIES - 1, Some(20)), 10),
            CodeTry::Compare
        );
        assert_eq!(
            wrong_code(1),
            CodeCheck::Wrong {
                tries_left: CODE_TRIES - 1
            }
        );
        assert_eq!(
            wrong_code(CODE_TRIES + 1),
            CodeCheck::Wrong { tries_left: 0 }
        );
    }

    #[test]
    fn a_contact_gets_three_code_mails_a_day() {
        let day_ms = 86_400_000;
        let mut c = pending(0, None);
        c.code_day = 1;
        c.code_mails = CODE_MAILS_PER_DAY - 1;
        assert_eq!(
            contact_code_mails(&c, day_ms + 5),
            Ok(CODE_MAILS_PER_DAY - 1)
        );
        c.code_mails = CODE_MAILS_PER_DAY;
        assert_eq!(
            contact_code_mails(&c, day_ms + 5),
            Err(StoreError::DailyLimit {
                retry_after_seconds: seconds_to_next_day(day_ms + 5)
            })
        );
        // Another day counts afresh.
        assert_eq!(contact_code_mails(&c, 2 * day_ms), Ok(0));
    }

    #[test]
    fn a_send_is_claimable_when_pending_due_and_unleased() {
        let mut send = SendRecord {
            id: "s".into(),
            address_id: "a".into(),
            event: crate::store::EventRef {
                sequence: 1,
                id: "e".into(),
            },
            message: crate::store::OutboundMessage {
                to: "b@example.com".into(),
                reply_to: "a@example.com".into(),
                subject: "s".into(),
                text: "t".into(),
                message_id: "<m@example.com>".into(),
                in_reply_to: None,
                references: vec![],
            },
            status: SendStatus::Pending,
            attempts: 0,
            next_attempt_at: Some(10),
            last_error: None,
            lease_until: None,
        };
        assert!(!claimable(&send, 9));
        assert!(claimable(&send, 10));
        send.lease_until = Some(11);
        assert!(!claimable(&send, 10));
        send.lease_until = Some(10);
        send.status = SendStatus::Sent;
        assert!(!claimable(&send, 10));
    }
}
