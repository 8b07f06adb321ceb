//! SPF (RFC 7208), DKIM (RFC 6376) and DMARC (RFC 7489) of a received message, with the
//! mail-auth crate, when `serve --smtp-check-auth` asks for them: the verdicts go into the
//! event's `data.auth`. Nothing is refused on them: the consumer decides. What is refused is a
//! message without a single author ([`ambiguous_author`], docs/API.md §10), unless
//! `--smtp-allow-ambiguous-from`: nothing could be said of who wrote it.
//!
//! SPF checks the client's IP against the `MAIL FROM` domain (the `HELO` name for the null
//! sender); DKIM every signature of the message (`pass` when one passes); DMARC the author's
//! domain's policy against both. The author is the one mailbox of the one `From` field, as
//! `agentaddress_email::author` reads it — the same reading that gives the event its `from`,
//! so the mailbox shown is the mailbox evaluated. A message with no single author (no `From`,
//! several, several mailboxes, none parseable) is DMARC `permerror`: RFC 7489 §6.6.1 leaves
//! it outside DMARC, and it must never pass (mail-auth would call several From domains
//! `none`, the verdict of a domain without a policy). DMARC alignment compares domains exactly
//! (no public suffix list): a signature or envelope of a subdomain of the `From` domain does
//! not align.
//!
//! The lookups go to the system's resolver, or to `--smtp-dns-resolver`; all of them together
//! are bounded by [`CHECK_TIMEOUT`], past which every verdict is `temperror`.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use agentaddress_email::{author, Ambiguity, AuthResults, AuthVerdict, Author, EmailLimits};
use mail_auth::dmarc::verify::DmarcParameters;
use mail_auth::hickory_resolver::config::{NameServerConfigGroup, ResolverConfig, ResolverOpts};
use mail_auth::spf::verify::SpfParameters;
use mail_auth::{
    AuthenticatedMessage, DkimOutput, DkimResult, DmarcOutput, DmarcResult, MessageAuthenticator,
    SpfResult,
};

/// The longest the checks of one message may take together.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(20);

/// The reply to a message without a single author (RFC 7489 §6.6.1), docs/API.md §10.
pub const AMBIGUOUS_AUTHOR_REPLY: &str =
    "550 5.7.1 Message refused: its author is ambiguous (one From field with one mailbox is \
     required)";

/// Why `raw` has no single author, or `None` when it has one. A message that the bounds refuse
/// is `None` too: delivery answers it with its own refusal (docs/API.md §10). The session read
/// the message within the size limit already.
pub fn ambiguous_author(raw: &[u8]) -> Option<Ambiguity> {
    match author(raw, &unbounded_size()) {
        Ok(Author::Ambiguous(why)) => Some(why),
        _ => None,
    }
}

/// The bounds of a message, but its size: the session has bounded that.
fn unbounded_size() -> EmailLimits {
    EmailLimits {
        max_raw_bytes: usize::MAX,
        ..EmailLimits::default()
    }
}

/// The checker every session shares (it holds the resolver and its cache).
pub struct Checker {
    authenticator: MessageAuthenticator,
    /// This server's name (SPF's `%{r}` macro).
    hostname: String,
}

impl Checker {
    /// A checker that asks `resolver` (UDP and TCP on that address), or the system's resolver.
    pub fn new(resolver: Option<SocketAddr>, hostname: String) -> Result<Self, String> {
        let authenticator = match resolver {
            Some(addr) => {
                let mut options = ResolverOpts::default();
                options.timeout = Duration::from_secs(5);
                options.attempts = 2;
                let servers =
                    NameServerConfigGroup::from_ips_clear(&[addr.ip()], addr.port(), true);
                MessageAuthenticator::new(
                    ResolverConfig::from_parts(None, vec![], servers),
                    options,
                )
            }
            None => MessageAuthenticator::new_system_conf(),
        }
        .map_err(|e| format!("cannot set up the DNS resolver of --smtp-check-auth: {e}"))?;
        Ok(Self {
            authenticator,
            hostname,
        })
    }

    /// The verdicts for `raw`, received from `ip` after `HELO helo` and `MAIL FROM:<mail_from>`.
    pub async fn check(&self, raw: &[u8], ip: IpAddr, helo: &str, mail_from: &str) -> AuthResults {
        tokio::time::timeout(CHECK_TIMEOUT, self.evaluate(raw, ip, helo, mail_from))
            .await
            .unwrap_or(AuthResults {
                spf: AuthVerdict::Temperror,
                dkim: AuthVerdict::Temperror,
                dmarc: AuthVerdict::Temperror,
            })
    }

    async fn evaluate(&self, raw: &[u8], ip: IpAddr, helo: &str, mail_from: &str) -> AuthResults {
        let spf_params = if mail_from.contains('@') {
            SpfParameters::verify_mail_from(ip, helo, &self.hostname, mail_from)
        } else {
            SpfParameters::verify_ehlo(ip, helo, &self.hostname)
        };
        let spf_output = self.authenticator.verify_spf(spf_params).await;
        let spf = spf_verdict(spf_output.result());
        // The one mailbox DMARC evaluates, read as the event's `from` is; without one, DMARC
        // is `permerror`.
        let mailbox = match author(raw, &unbounded_size()) {
            Ok(Author::One { mailbox, .. }) => Some(mailbox),
            _ => None,
        };
        let Some(mut message) = AuthenticatedMessage::parse(raw) else {
            return AuthResults {
                spf,
                dkim: AuthVerdict::None,
                dmarc: AuthVerdict::Permerror,
            };
        };
        // DKIM's third-party signatures (ATPS) read the From mailboxes too: the same one.
        message.from = mailbox.into_iter().collect();
        let dkim_output = self.authenticator.verify_dkim(&message).await;
        let dkim = dkim_verdict(&dkim_output);
        if message.from.is_empty() {
            return AuthResults {
                spf,
                dkim,
                dmarc: AuthVerdict::Permerror,
            };
        }
        let mail_from_domain = mail_from.rsplit_once('@').map_or(helo, |(_, d)| d);
        let dmarc_output = self
            .authenticator
            .verify_dmarc(DmarcParameters::new(
                &message,
                &dkim_output,
                mail_from_domain,
                &spf_output,
            ))
            .await;
        AuthResults {
            spf,
            dkim,
            dmarc: dmarc_verdict(&dmarc_output),
        }
    }
}

fn spf_verdict(result: SpfResult) -> AuthVerdict {
    match result {
        SpfResult::Pass => AuthVerdict::Pass,
        SpfResult::Fail => AuthVerdict::Fail,
        SpfResult::SoftFail => AuthVerdict::Softfail,
        SpfResult::Neutral => AuthVerdict::Neutral,
        SpfResult::TempError => AuthVerdict::Temperror,
        SpfResult::PermError => AuthVerdict::Permerror,
        SpfResult::None => AuthVerdict::None,
    }
}

/// `pass` when a signature passes, else the first signature's verdict (`none`: unsigned). A
/// body that no longer matches its signature's hash is `fail` (RFC 6376 §6.1.3: the signature
/// did not verify; RFC 8601 §2.7.1), where mail-auth reports it as neutral.
fn dkim_verdict(outputs: &[DkimOutput<'_>]) -> AuthVerdict {
    if outputs.iter().any(|o| o.result() == &DkimResult::Pass) {
        return AuthVerdict::Pass;
    }
    match outputs.first().map(DkimOutput::result) {
        None | Some(DkimResult::None) | Some(DkimResult::Pass) => AuthVerdict::None,
        Some(DkimResult::Neutral(mail_auth::Error::FailedBodyHashMatch)) => AuthVerdict::Fail,
        Some(DkimResult::Neutral(_)) => AuthVerdict::Neutral,
        Some(DkimResult::Fail(_)) => AuthVerdict::Fail,
        Some(DkimResult::PermError(_)) => AuthVerdict::Permerror,
        Some(DkimResult::TempError(_)) => AuthVerdict::Temperror,
    }
}

/// `pass` when SPF or DKIM passes aligned; `none` without a DMARC record.
fn dmarc_verdict(output: &DmarcOutput) -> AuthVerdict {
    let results = [output.spf_result(), output.dkim_result()];
    if results.iter().any(|r| matches!(r, DmarcResult::Pass)) {
        return AuthVerdict::Pass;
    }
    if results
        .iter()
        .any(|r| matches!(r, DmarcResult::TempError(_)))
    {
        return AuthVerdict::Temperror;
    }
    if results
        .iter()
        .any(|r| matches!(r, DmarcResult::PermError(_)))
    {
        return AuthVerdict::Permerror;
    }
    if output.dmarc_record().is_none() {
        return AuthVerdict::None;
    }
    AuthVerdict::Fail
}
