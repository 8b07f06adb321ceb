//! Sender rules of an address's inbound email (docs/API.md §10, "Sender rules"): an
//! `email_policy` of `{"allow": [patterns], "require_auth": null | "spf_or_dkim" | "dmarc"}`.
//! Pure code: parsing and validating the policy, and the two checks every door applies —
//! [`EmailPolicy::allows`] on the envelope's sender (`MAIL FROM`, at `RCPT` on the SMTP door)
//! and [`EmailPolicy::allows_message`] on the message's author and authentication verdicts.
//!
//! **Patterns.** `local@domain`, compared with the sender case-insensitively:
//! - the local part is `*` (any local part) or exactly one local part (no other wildcard; a
//!   `+tag` is part of it: `ada@example.com` does not match `ada+x@example.com`);
//! - the domain is exactly one domain, or `*.` and a domain, which matches every subdomain of
//!   it at any depth but not the domain itself (list both to allow both).
//!
//! A pattern is 3 to [`PATTERN_MAX_CHARS`] ASCII characters: a local part of 1 to 64 of
//! RFC 5322's `atext` and `.` (not `*`), or `*`; one `@`; a domain of at least two labels of
//! letters, digits and `-` (1 to 63 each, not starting or ending with `-`; an internationalised
//! domain in its `xn--` form). `allow` holds 1 to [`MAX_PATTERNS`] of them; `[]` is refused
//! (an empty list reads as "nobody" to some and "no rule" to others: omit `allow` for no rule).
//!
//! **The null sender** (`MAIL FROM:<>`, bounces) has no address to match: the envelope check
//! lets it through, and the message is judged by its author like any other.

use serde::Serialize;
use serde_json::{json, Value};

use super::Invalid;

/// Most patterns one `allow` holds.
pub const MAX_PATTERNS: usize = 100;
/// The shortest pattern, in characters (`a@b` has no domain of two labels, but the length rule
/// comes first).
pub const PATTERN_MIN_CHARS: usize = 3;
/// The longest pattern, in characters (the longest forward path of RFC 5321 §4.5.3.1.3 without
/// its angle brackets).
pub const PATTERN_MAX_CHARS: usize = 254;
/// The longest local part (RFC 5321 §4.5.3.1.1).
const LOCAL_MAX_CHARS: usize = 64;
/// The longest domain (RFC 1035 §2.3.4, without the root's dot).
const DOMAIN_MAX_CHARS: usize = 253;
/// The longest label of a domain.
const LABEL_MAX_CHARS: usize = 63;

/// Which authentication a message must pass ([`EmailPolicy::require_auth`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequireAuth {
    /// SPF (of the envelope's sender domain) or DKIM (any valid signature) is `pass`.
    SpfOrDkim,
    /// DMARC of the author's domain is `pass` (SPF or DKIM aligned with the `From` domain).
    Dmarc,
}

impl RequireAuth {
    pub const ALL: [RequireAuth; 2] = [RequireAuth::SpfOrDkim, RequireAuth::Dmarc];

    pub fn as_str(self) -> &'static str {
        match self {
            RequireAuth::SpfOrDkim => "spf_or_dkim",
            RequireAuth::Dmarc => "dmarc",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

impl Serialize for RequireAuth {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Which verdicts of the receiving side were `pass` (the email crate's `AuthResults`, read as
/// the rules need them). A door that evaluates nothing passes nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderAuth {
    pub spf: bool,
    pub dkim: bool,
    /// DMARC of the message's single author (never for a message without one).
    pub dmarc: bool,
}

/// The rule a message broke ([`EmailPolicy::check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum PolicyFailure {
    /// The envelope's sender (`MAIL FROM`) matches no `allow` pattern.
    #[error("the envelope sender matches no allowed pattern")]
    EnvelopeSender,
    /// The message's author (`From`) matches no `allow` pattern, or it has no single author.
    #[error("the message's author matches no allowed pattern")]
    Author,
    /// The authentication `require_auth` names did not pass (or was not evaluated).
    #[error("the message did not pass the required authentication")]
    Auth,
}

/// One `allow` pattern, lower-cased.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Pattern {
    /// `None`: `*`, any local part.
    local: Option<String>,
    /// The domain, without the `*.` of a subdomain pattern.
    domain: String,
    /// `*.domain`: any subdomain of `domain` (not `domain` itself).
    subdomains: bool,
}

impl Pattern {
    fn parse(text: &str) -> Result<Self, &'static str> {
        if !(PATTERN_MIN_CHARS..=PATTERN_MAX_CHARS).contains(&text.chars().count()) {
            return Err("must be 3 to 254 characters long");
        }
        if !text.is_ascii() {
            return Err("must be ASCII (an internationalised domain in its `xn--` form)");
        }
        let Some((local, domain)) = text.split_once('@') else {
            return Err("must have the form `local@domain` (`*@domain` for any local part)");
        };
        if domain.contains('@') {
            return Err("must have exactly one `@`");
        }
        let local = match local {
            "*" => None,
            _ => {
                if local.is_empty() || local.len() > LOCAL_MAX_CHARS {
                    return Err("must have a local part of 1 to 64 characters, or `*`");
                }
                if !local.bytes().all(is_local_char) {
                    return Err("must have a local part of letters, digits, `.` and \
                                `!#$%&'+-/=?^_`{|}~` (no other wildcard than a whole `*`)");
                }
                Some(local.to_ascii_lowercase())
            }
        };
        let (subdomains, domain) = match domain.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, domain),
        };
        if !is_domain(domain) {
            return Err(
                "must have a domain of at least two labels of letters, digits and `-` \
                        (optionally after `*.`, for its subdomains)",
            );
        }
        Ok(Self {
            local,
            domain: domain.to_ascii_lowercase(),
            subdomains,
        })
    }

    fn text(&self) -> String {
        format!(
            "{}@{}{}",
            self.local.as_deref().unwrap_or("*"),
            if self.subdomains { "*." } else { "" },
            self.domain
        )
    }

    /// Whether the mailbox `local`@`domain` (both lower-cased) matches.
    fn matches(&self, local: &str, domain: &str) -> bool {
        if self.local.as_deref().is_some_and(|l| l != local) {
            return false;
        }
        if self.subdomains {
            domain
                .strip_suffix(self.domain.as_str())
                .and_then(|head| head.strip_suffix('.'))
                .is_some_and(|head| !head.is_empty())
        } else {
            domain == self.domain
        }
    }
}

/// RFC 5322 `atext` and `.`, without `*` (the wildcard).
fn is_local_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'+-/=?^_`{|}~.".contains(&b)
}

fn is_domain(domain: &str) -> bool {
    let labels: Vec<&str> = domain.split('.').collect();
    !domain.is_empty()
        && domain.len() <= DOMAIN_MAX_CHARS
        && labels.len() >= 2
        && labels.iter().all(|l| {
            !l.is_empty()
                && l.len() <= LABEL_MAX_CHARS
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// A mailbox as received (`ada@example.com`, `<ada@example.com>`), lower-cased and split at
/// its last `@` (a quoted local part may hold one); `None` when it has no `local@domain`.
fn mailbox(text: &str) -> Option<(String, String)> {
    let text = text.trim();
    let text = text
        .strip_prefix('<')
        .and_then(|t| t.strip_suffix('>'))
        .unwrap_or(text);
    let (local, domain) = text.rsplit_once('@')?;
    let domain = domain.strip_suffix('.').unwrap_or(domain);
    if local.is_empty() || domain.is_empty() {
        return None;
    }
    Some((local.to_lowercase(), domain.to_lowercase()))
}

/// An address's sender rules. At least one of the two is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmailPolicy {
    /// The senders allowed (the envelope's and the author alike); `None`: any sender.
    allow: Option<Vec<Pattern>>,
    /// The authentication a message must pass; `None`: none.
    require_auth: Option<RequireAuth>,
}

/// The policy as the API shows it (`GET {root}`, the create answer, `PUT`'s answer): both
/// members always, `null` for a rule not set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct EmailPolicyView {
    /// The allowed sender patterns, lower-cased; `null`: any sender.
    pub allow: Option<Vec<String>>,
    /// `spf_or_dkim` or `dmarc`; `null`: no authentication required.
    #[schema(value_type = Option<String>, example = "dmarc")]
    pub require_auth: Option<RequireAuth>,
}

impl EmailPolicy {
    /// Parses the JSON object of the create body's `email_policy` and of `PUT
    /// {root}/email/policy`: `{"allow"?: [patterns], "require_auth"?: "spf_or_dkim" | "dmarc"}`
    /// (`null` for a member is absent; unknown members are ignored; at least one is set). The
    /// messages name the member and the rule broken.
    pub fn from_json(value: &Value) -> Result<Self, Invalid> {
        let Some(object) = value.as_object() else {
            return Err(Invalid::new("The email policy must be a JSON object."));
        };
        let member = |name: &str| object.get(name).filter(|v| !v.is_null());
        let allow = match member("allow") {
            None => None,
            Some(Value::Array(items)) => {
                if items.is_empty() {
                    return Err(Invalid::new(
                        "`allow` must list at least one pattern; to allow every sender, omit it \
                         (or send null).",
                    ));
                }
                if items.len() > MAX_PATTERNS {
                    return Err(Invalid::new(format!(
                        "`allow` may list at most {MAX_PATTERNS} patterns."
                    )));
                }
                let mut patterns = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let Value::String(text) = item else {
                        return Err(Invalid::new(format!("`allow[{i}]` must be a string.")));
                    };
                    let pattern = Pattern::parse(text)
                        .map_err(|rule| Invalid::new(format!("`allow[{i}]` {rule}.")))?;
                    patterns.push(pattern);
                }
                Some(patterns)
            }
            Some(_) => {
                return Err(Invalid::new(
                    "`allow` must be an array of sender patterns such as \"*@example.com\".",
                ))
            }
        };
        let require_auth = match member("require_auth") {
            None => None,
            Some(Value::String(s)) => Some(RequireAuth::parse(s).ok_or_else(require_auth_rule)?),
            Some(_) => return Err(require_auth_rule()),
        };
        if allow.is_none() && require_auth.is_none() {
            return Err(Invalid::new(
                "The email policy must set `allow` or `require_auth`; to remove the policy, \
                 DELETE it.",
            ));
        }
        Ok(Self {
            allow,
            require_auth,
        })
    }

    pub fn require_auth(&self) -> Option<RequireAuth> {
        self.require_auth
    }

    /// The envelope check: whether the envelope's sender `mail_from` (empty for the null
    /// sender) may send to the address. With no `allow`, any may; the null sender always passes
    /// here (the message is then judged by its author, [`EmailPolicy::allows_message`]).
    pub fn allows(&self, mail_from: &str) -> bool {
        let Some(patterns) = &self.allow else {
            return true;
        };
        let trimmed = mail_from.trim();
        if trimmed.is_empty() || trimmed == "<>" {
            return true;
        }
        matches_any(patterns, trimmed)
    }

    /// The message check: the message's single `author` (its `From` mailbox; `None` when it
    /// has none) must match `allow` when set, and the verdicts `require_auth` names must pass.
    pub fn allows_message(&self, author: Option<&str>, auth: SenderAuth) -> bool {
        self.message_failure(author, auth).is_none()
    }

    /// Which rule a message breaks, if any: the envelope check first, then the author, then
    /// authentication.
    pub fn check(
        &self, mail_from: &str, author: Option<&str>, auth: SenderAuth,
    ) -> Result<(), PolicyFailure> {
        if !self.allows(mail_from) {
            return Err(PolicyFailure::EnvelopeSender);
        }
        match self.message_failure(author, auth) {
            Some(failure) => Err(failure),
            None => Ok(()),
        }
    }

    fn message_failure(&self, author: Option<&str>, auth: SenderAuth) -> Option<PolicyFailure> {
        if let Some(patterns) = &self.allow {
            if !author.is_some_and(|a| matches_any(patterns, a)) {
                return Some(PolicyFailure::Author);
            }
        }
        let passed = match self.require_auth {
            None => true,
            Some(RequireAuth::SpfOrDkim) => auth.spf || auth.dkim,
            Some(RequireAuth::Dmarc) => auth.dmarc,
        };
        (!passed).then_some(PolicyFailure::Auth)
    }

    pub fn view(&self) -> EmailPolicyView {
        EmailPolicyView {
            allow: self
                .allow
                .as_ref()
                .map(|p| p.iter().map(Pattern::text).collect()),
            require_auth: self.require_auth,
        }
    }

    /// The stored form: compact JSON, the same in both stores.
    pub fn to_stored(&self) -> String {
        let view = self.view();
        json!({"allow": view.allow, "require_auth": view.require_auth}).to_string()
    }

    /// Reads [`EmailPolicy::to_stored`]'s form back (`None` when it does not parse: a corrupted
    /// record, which the stores report as an internal error).
    pub fn from_stored(stored: &str) -> Option<Self> {
        let value: Value = serde_json::from_str(stored).ok()?;
        Self::from_json(&value).ok()
    }
}

fn require_auth_rule() -> Invalid {
    Invalid::new("`require_auth` must be null, \"spf_or_dkim\" or \"dmarc\".")
}

fn matches_any(patterns: &[Pattern], sender: &str) -> bool {
    match mailbox(sender) {
        Some((local, domain)) => patterns.iter().any(|p| p.matches(&local, &domain)),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(v: Value) -> EmailPolicy {
        EmailPolicy::from_json(&v).unwrap_or_else(|e| panic!("{v}: {e}"))
    }

    fn refused(v: Value) -> String {
        match EmailPolicy::from_json(&v) {
            Ok(p) => panic!("{v} was accepted: {p:?}"),
            Err(e) => e.0,
        }
    }

    const NONE: SenderAuth = SenderAuth {
        spf: false,
        dkim: false,
        dmarc: false,
    };

    #[test]
    fn patterns_match_case_insensitively_and_exactly() {
        let p = policy(json!({"allow": ["*@Example.com", "Ada@other.example"]}));
        for ok in [
            "bob@example.com",
            "BOB@EXAMPLE.COM",
            "<bob@example.com>",
            "bob@example.com.",
            "ada@other.example",
            "ADA@Other.Example",
            "\"a@b\"@example.com",
        ] {
            assert!(p.allows(ok), "{ok}");
            assert!(p.allows_message(Some(ok), NONE), "{ok}");
        }
        for no in [
            "bob@example.org",
            "bob@sub.example.com",
            "bob@example.com.evil",
            "bob@notexample.com",
            "grace@other.example",
            "ada+tag@other.example",
            "ada@sub.other.example",
            "example.com",
            "bob@",
            "@example.com",
        ] {
            assert!(!p.allows(no), "{no}");
            assert!(!p.allows_message(Some(no), NONE), "{no}");
        }
    }

    #[test]
    fn a_subdomain_pattern_matches_subdomains_at_any_depth_not_the_domain() {
        let p = policy(json!({"allow": ["*@*.example.com", "ops@*.corp.example"]}));
        assert!(p.allows("a@mail.example.com"));
        assert!(p.allows("a@x.y.EXAMPLE.com"));
        assert!(!p.allows("a@example.com"));
        assert!(!p.allows("a@badexample.com"));
        assert!(!p.allows("a@.example.com"));
        assert!(p.allows("ops@eu.corp.example"));
        assert!(!p.allows("dev@eu.corp.example"));
        assert!(!p.allows("ops@corp.example"));
    }

    #[test]
    fn the_null_sender_passes_the_envelope_and_is_judged_by_its_author() {
        let p = policy(json!({"allow": ["*@example.com"]}));
        assert!(p.allows(""));
        assert!(p.allows("<>"));
        assert_eq!(p.check("", Some("mailer-daemon@example.com"), NONE), Ok(()));
        assert_eq!(
            p.check("", Some("mailer-daemon@bounce.example.org"), NONE),
            Err(PolicyFailure::Author)
        );
    }

    #[test]
    fn without_a_single_author_an_allow_rule_refuses() {
        let p = policy(json!({"allow": ["*@example.com"]}));
        assert_eq!(
            p.check("ada@example.com", None, NONE),
            Err(PolicyFailure::Author)
        );
        // No allow rule: the author does not matter.
        let p = policy(json!({"require_auth": "spf_or_dkim"}));
        let spf = SenderAuth { spf: true, ..NONE };
        assert_eq!(p.check("x@y.example", None, spf), Ok(()));
    }

    #[test]
    fn the_envelope_is_checked_before_the_author() {
        let p = policy(json!({"allow": ["*@example.com"]}));
        assert_eq!(
            p.check("eve@evil.example", Some("ada@example.com"), NONE),
            Err(PolicyFailure::EnvelopeSender)
        );
        assert_eq!(
            p.check("ada@example.com", Some("eve@evil.example"), NONE),
            Err(PolicyFailure::Author)
        );
        assert_eq!(
            p.check("ada@example.com", Some("bob@example.com"), NONE),
            Ok(())
        );
    }

    #[test]
    fn required_authentication_needs_its_verdicts_to_pass() {
        let spf_or_dkim = policy(json!({"require_auth": "spf_or_dkim"}));
        let dmarc = policy(json!({"allow": null, "require_auth": "dmarc"}));
        let with = |spf, dkim, dmarc| SenderAuth { spf, dkim, dmarc };
        // Nothing evaluated (a door that does not check): fail closed.
        assert!(!spf_or_dkim.allows_message(Some("a@b.example"), NONE));
        assert!(!dmarc.allows_message(Some("a@b.example"), NONE));
        assert!(spf_or_dkim.allows_message(None, with(true, false, false)));
        assert!(spf_or_dkim.allows_message(None, with(false, true, false)));
        assert!(!dmarc.allows_message(None, with(true, true, false)));
        assert!(dmarc.allows_message(Some("a@b.example"), with(false, false, true)));
        assert_eq!(
            dmarc.check("a@b.example", Some("a@b.example"), with(true, true, false)),
            Err(PolicyFailure::Auth)
        );
        // The envelope check never looks at authentication.
        assert!(dmarc.allows("anyone@anywhere.example"));
    }

    #[test]
    fn the_view_and_the_stored_form_round_trip() {
        let p = policy(
            json!({"allow": ["Ada@Example.COM", "*@*.Example.org"], "require_auth": "dmarc", "other": 1}),
        );
        assert_eq!(
            serde_json::to_value(p.view()).expect("view"),
            json!({"allow": ["ada@example.com", "*@*.example.org"], "require_auth": "dmarc"})
        );
        assert_eq!(EmailPolicy::from_stored(&p.to_stored()), Some(p));
        let q = policy(json!({"require_auth": "spf_or_dkim"}));
        assert_eq!(
            serde_json::to_value(q.view()).expect("view"),
            json!({"allow": null, "require_auth": "spf_or_dkim"})
        );
        assert_eq!(EmailPolicy::from_stored(&q.to_stored()), Some(q));
        assert_eq!(EmailPolicy::from_stored("{not json"), None);
    }

    #[test]
    fn every_bad_input_is_refused_naming_its_rule() {
        let long_local = format!("{}@example.com", "a".repeat(65));
        let long = format!("{}@example.com", "a".repeat(988));
        let long_label = format!("*@{}.com", "a".repeat(64));
        let too_many: Vec<String> = (0..=MAX_PATTERNS)
            .map(|i| format!("u{i}@example.com"))
            .collect();
        let cases: Vec<(Value, &str)> = vec![
            (json!([]), "must be a JSON object"),
            (json!("*@example.com"), "must be a JSON object"),
            (json!({}), "must set `allow` or `require_auth`"),
            (
                json!({"allow": null, "require_auth": null}),
                "must set `allow` or `require_auth`",
            ),
            (json!({"allow": []}), "at least one pattern"),
            (
                json!({"allow": "*@example.com"}),
                "`allow` must be an array",
            ),
            (json!({"allow": {"a": 1}}), "`allow` must be an array"),
            (json!({"allow": [1]}), "`allow[0]` must be a string"),
            (
                json!({"allow": ["*@example.com", null]}),
                "`allow[1]` must be a string",
            ),
            (json!({"allow": [""]}), "`allow[0]` must be 3 to 254"),
            (json!({"allow": ["*"]}), "`allow[0]` must be 3 to 254"),
            (json!({"allow": ["***"]}), "`allow[0]` must have the form"),
            (json!({"allow": ["*@*"]}), "`allow[0]` must have a domain"),
            (json!({"allow": ["*@*.*"]}), "`allow[0]` must have a domain"),
            (json!({"allow": ["ada@*"]}), "`allow[0]` must have a domain"),
            (
                json!({"allow": ["example.com"]}),
                "`allow[0]` must have the form",
            ),
            (json!({"allow": ["@example.com"]}), "local part of 1 to 64"),
            (json!({"allow": ["ada@"]}), "`allow[0]` must have a domain"),
            (json!({"allow": ["a@b@example.com"]}), "exactly one `@`"),
            (json!({"allow": ["a*@example.com"]}), "no other wildcard"),
            (json!({"allow": ["a b@example.com"]}), "no other wildcard"),
            (json!({"allow": ["<a@example.com>"]}), "no other wildcard"),
            (json!({"allow": ["*@localhost"]}), "at least two labels"),
            (json!({"allow": ["*@example..com"]}), "at least two labels"),
            (json!({"allow": ["*@example.com."]}), "at least two labels"),
            (json!({"allow": ["*@-bad.example"]}), "at least two labels"),
            (json!({"allow": ["*@ex_ample.com"]}), "at least two labels"),
            (json!({"allow": ["*@*example.com"]}), "at least two labels"),
            (
                json!({"allow": ["*@sub.*.example.com"]}),
                "at least two labels",
            ),
            (json!({"allow": ["jos\u{e9}@example.com"]}), "must be ASCII"),
            (json!({"allow": ["*@b\u{fc}cher.example"]}), "must be ASCII"),
            (json!({"allow": [long_local]}), "local part of 1 to 64"),
            (json!({"allow": [long_label]}), "at least two labels"),
            (json!({"allow": [long]}), "must be 3 to 254"),
            (json!({"allow": too_many}), "at most 100 patterns"),
            (json!({"require_auth": "spf"}), "`require_auth` must be"),
            (json!({"require_auth": "DMARC"}), "`require_auth` must be"),
            (json!({"require_auth": true}), "`require_auth` must be"),
            (
                json!({"allow": ["*@example.com"], "require_auth": 1}),
                "`require_auth` must be",
            ),
        ];
        for (input, rule) in cases {
            let message = refused(input.clone());
            assert!(
                message.contains(rule),
                "{input}: {message:?} lacks {rule:?}"
            );
        }
        // The bounds themselves are accepted.
        let max: Vec<String> = (0..MAX_PATTERNS)
            .map(|i| format!("u{i}@example.com"))
            .collect();
        policy(json!({"allow": max}));
        let longest = format!(
            "{}@{}.{}.{}.{}",
            "a".repeat(64),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(40),
            "e".repeat(20)
        );
        assert_eq!(longest.len(), PATTERN_MAX_CHARS);
        policy(json!({"allow": [longest]}));
        policy(json!({"allow": ["a@b.co", "o'brien+x@xn--bcher-kva.example"]}));
    }

    proptest::proptest! {
        /// Any text is a pattern or a refusal, never a panic; a pattern accepted reads back
        /// as itself (lower-cased), and matches itself as a sender when it has no wildcard.
        #[test]
        fn any_text_parses_or_is_refused(text in "[*a-zA-Z0-9.@+-]{0,40}|\\PC{0,40}") {
            if let Ok(p) = EmailPolicy::from_json(&json!({"allow": [text.clone()]})) {
                let shown = p.view().allow.unwrap_or_default();
                proptest::prop_assert_eq!(shown.clone(), vec![text.to_ascii_lowercase()]);
                proptest::prop_assert_eq!(EmailPolicy::from_stored(&p.to_stored()), Some(p.clone()));
                if !text.contains('*') {
                    proptest::prop_assert!(p.allows(&text.to_uppercase()));
                }
            }
        }

        /// Any sender is matched or not, never a panic; the null sender always passes.
        #[test]
        fn any_sender_is_judged(sender in "\\PC{0,80}") {
            let p = policy(json!({"allow": ["*@example.com", "ada@*.example.org"]}));
            let _ = p.allows(&sender);
            let _ = p.allows_message(Some(&sender), NONE);
            proptest::prop_assert!(p.allows(""));
        }
    }
}
