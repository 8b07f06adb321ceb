//! The outbound mail relays of docs/API.md §16: [`build_message`] turns a
//! [`agentaddress_core::relay::Mail`] into an RFC 5322 message (lettre encodes every header:
//! non-ASCII subjects as encoded-words, addresses checked again), and [`SmtpRelay`] hands it
//! to the operator's SMTP smarthost — `agentaddress serve --smtp-relay URL`. [`wake`] is the
//! HTTP client that sends wake hooks (§19).
#![forbid(unsafe_code)]

pub mod wake;

use std::time::Duration;

use agentaddress_core::relay::{Mail, Relay, RelayError};
use async_trait::async_trait;
use lettre::message::header::ContentType;
use lettre::message::Mailbox;
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

/// How long one SMTP conversation may take before it counts as a temporary failure.
pub const SMTP_TIMEOUT: Duration = Duration::from_secs(30);

/// The message of `mail`, ready to send: `From`, `To`, `Reply-To`, `Subject`, `Date`,
/// `Message-ID`, `In-Reply-To`, `References`, and the text as `text/plain; charset=utf-8`
/// (quoted-printable or base64 when it needs to be). A field lettre will not take is a
/// permanent failure: sending it again would fail again.
pub fn build_message(mail: &Mail) -> Result<Message, RelayError> {
    let mailbox = |what: &str, s: &str| {
        s.parse::<Mailbox>().map_err(|e| {
            RelayError::Permanent(format!("the {what} address {s:?} is not valid: {e}"))
        })
    };
    let mut b = Message::builder()
        .from(mailbox("sender", &mail.from)?)
        .to(mailbox("recipient", &mail.to)?)
        .subject(mail.subject.clone())
        .message_id(Some(mail.message_id.clone()))
        .date_now()
        .header(ContentType::TEXT_PLAIN);
    if let Some(reply_to) = &mail.reply_to {
        b = b.reply_to(mailbox("Reply-To", reply_to)?);
    }
    if let Some(parent) = &mail.in_reply_to {
        b = b.in_reply_to(parent.clone());
    }
    if !mail.references.is_empty() {
        b = b.references(mail.references.join(" "));
    }
    b.body(mail.text.clone())
        .map_err(|e| RelayError::Permanent(format!("the message cannot be built: {e}")))
}

/// Checks the operator's sender (`mail@agents.example` or `Agents <mail@agents.example>`) as
/// the message builder will read it, so a bad one fails at start-up rather than at each send.
pub fn check_sender(sender: &str) -> Result<(), String> {
    sender
        .parse::<Mailbox>()
        .map(|_| ())
        .map_err(|e| format!("the sender {sender:?} is not a valid mailbox: {e}"))
}

/// The SMTP smarthost `serve` relays through.
pub struct SmtpRelay {
    transport: AsyncSmtpTransport<Tokio1Executor>,
}

/// The relay's URL, checked: `smtp://host[:port]` (plain; for a relay on the same machine or
/// network), `smtp://host[:port]?tls=required` (STARTTLS, port 587 by default) or
/// `smtps://host[:port]` (implicit TLS, port 465 by default), with an optional user
/// (`smtp://user@host…`). A password in the URL is refused: it would show in process lists and
/// logs; it comes from a file or the environment ([`SmtpRelay::new`]).
pub fn check_relay_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("smtps://")
        .or_else(|| url.strip_prefix("smtp://"))
        .ok_or("the SMTP relay URL must start with smtp:// or smtps://")?;
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    if let Some((userinfo, _)) = authority.rsplit_once('@') {
        if userinfo.contains(':') {
            return Err("the SMTP relay URL may not hold a password: give it in \
                        AGENTADDRESS_SMTP_RELAY_PASSWORD or --smtp-relay-password-file"
                .into());
        }
    }
    if authority.rsplit('@').next().unwrap_or("").is_empty() {
        return Err("the SMTP relay URL names no host".into());
    }
    Ok(())
}

/// How a relay URL asks for TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TlsMode {
    None,
    StartTlsRequired,
    StartTlsOpportunistic,
    Implicit,
}

fn tls_mode(url: &str) -> TlsMode {
    if url.starts_with("smtps://") {
        return TlsMode::Implicit;
    }
    let query = url.split_once('?').map_or("", |(_, q)| q);
    match query
        .split('&')
        .find_map(|kv| kv.strip_prefix("tls="))
        .unwrap_or("")
    {
        "required" => TlsMode::StartTlsRequired,
        "opportunistic" => TlsMode::StartTlsOpportunistic,
        _ => TlsMode::None,
    }
}

fn host_of(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let host_port = authority.rsplit('@').next()?;
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => host_port.split(':').next()?,
    };
    (!host.is_empty()).then(|| host.to_owned())
}

impl SmtpRelay {
    /// A relay at `url` ([`check_relay_url`]); with `password`, the URL's user logs in with it
    /// (AUTH PLAIN or LOGIN, only over TLS unless the URL is plain `smtp://`). With `ca_pem`
    /// (PEM certificates), the relay's certificate may also chain to those (a private CA, or a
    /// relay's self-signed certificate), besides the usual public roots; the URL must ask for
    /// TLS.
    pub fn new(url: &str, password: Option<&str>, ca_pem: Option<&[u8]>) -> Result<Self, String> {
        use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
        check_relay_url(url)?;
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
            .map_err(|e| format!("the SMTP relay URL is not usable: {e}"))?
            .timeout(Some(SMTP_TIMEOUT));
        if let Some(pem) = ca_pem {
            let mode = tls_mode(url);
            if mode == TlsMode::None {
                return Err("a relay CA file needs a TLS relay URL (smtps://… or \
                            smtp://…?tls=required)"
                    .into());
            }
            let host = host_of(url).ok_or("the SMTP relay URL names no host")?;
            let certificate = Certificate::from_pem(pem)
                .map_err(|e| format!("the relay CA file holds no usable certificate: {e}"))?;
            let params = TlsParameters::builder(host)
                .add_root_certificate(certificate)
                .build_rustls()
                .map_err(|e| format!("the relay's TLS settings: {e}"))?;
            builder = builder.tls(match mode {
                TlsMode::Implicit => Tls::Wrapper(params),
                TlsMode::StartTlsOpportunistic => Tls::Opportunistic(params),
                _ => Tls::Required(params),
            });
        }
        if let Some(password) = password {
            let user = user_of(url)
                .ok_or("a relay password needs a user in the URL (smtp://user@host…)".to_owned())?;
            builder = builder.credentials(Credentials::new(user, password.to_owned()));
        }
        Ok(Self {
            transport: builder.build(),
        })
    }
}

fn user_of(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let (user, _) = authority.rsplit_once('@')?;
    (!user.is_empty()).then(|| user.to_owned())
}

#[async_trait]
impl Relay for SmtpRelay {
    fn kind(&self) -> &'static str {
        "smtp"
    }

    async fn send(&self, mail: &Mail) -> Result<(), RelayError> {
        let message = build_message(mail)?;
        match self.transport.send(message).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_permanent() => Err(RelayError::Permanent(e.to_string())),
            Err(e) => Err(RelayError::Temporary(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mail() -> Mail {
        Mail {
            from: "Agents <mail@agents.example>".into(),
            to: "ada@example.com".into(),
            reply_to: Some("addr_x@inbox.example".into()),
            subject: "Re: Quarterly — ready?".into(),
            text: "Line one\nLine two\n".into(),
            message_id: "<snd_1@agents.example>".into(),
            in_reply_to: Some("<b@x>".into()),
            references: vec!["<a@x>".into(), "<b@x>".into()],
        }
    }

    #[test]
    fn messages_carry_threading_and_encoded_subjects() {
        let raw =
            String::from_utf8(build_message(&mail()).expect("builds").formatted()).expect("ASCII");
        for header in [
            "From: Agents <mail@agents.example>\r\n",
            "To: ada@example.com\r\n",
            "Reply-To: addr_x@inbox.example\r\n",
            "Message-ID: <snd_1@agents.example>\r\n",
            "In-Reply-To: <b@x>\r\n",
            "References: <a@x> <b@x>\r\n",
        ] {
            assert!(raw.contains(header), "{header:?} missing in\n{raw}");
        }
        assert!(
            raw.contains("Subject: Re: Quarterly =?utf-8?b?4oCU?= ready?\r\n"),
            "{raw}"
        );
        assert!(!raw.contains("Bcc"));
    }

    #[test]
    fn bad_addresses_are_permanent_failures() {
        let mut m = mail();
        m.to = "not an address".into();
        assert!(matches!(build_message(&m), Err(RelayError::Permanent(_))));
    }

    #[test]
    fn relay_urls() {
        assert!(check_relay_url("smtp://127.0.0.1:2525").is_ok());
        assert!(check_relay_url("smtps://user@mail.example").is_ok());
        assert!(check_relay_url("smtp://mail.example:587?tls=required").is_ok());
        assert!(check_relay_url("smtp://user:secret@mail.example").is_err());
        assert!(check_relay_url("http://mail.example").is_err());
        assert!(check_relay_url("smtp://").is_err());
        assert_eq!(
            user_of("smtps://me%40x@mail.example:465").as_deref(),
            Some("me%40x")
        );
        assert!(
            SmtpRelay::new("smtp://127.0.0.1:2525", Some("pw"), None).is_err(),
            "no user"
        );
        assert!(
            SmtpRelay::new("smtp://127.0.0.1:2525", None, Some(b"x")).is_err(),
            "a CA without TLS"
        );
        assert_eq!(tls_mode("smtps://h"), TlsMode::Implicit);
        assert_eq!(
            tls_mode("smtp://h:587?tls=required"),
            TlsMode::StartTlsRequired
        );
        assert_eq!(tls_mode("smtp://h:25"), TlsMode::None);
        assert_eq!(
            host_of("smtp://u@mail.example:587?tls=required").as_deref(),
            Some("mail.example")
        );
        assert_eq!(host_of("smtps://[::1]:465").as_deref(), Some("::1"));
    }
}

/// SES v2 as the relay (feature `ses`): the Lambda functions that send on AWS.
#[cfg(feature = "ses")]
pub mod ses {
    use agentaddress_core::relay::{Mail, Relay, RelayError};
    use async_trait::async_trait;
    use aws_sdk_sesv2::error::SdkError;
    use aws_sdk_sesv2::operation::send_email::SendEmailError;
    use aws_sdk_sesv2::primitives::Blob;
    use aws_sdk_sesv2::types::{Destination, EmailContent, RawMessage};

    /// `SendEmail` of the raw message [`super::build_message`] builds, so the headers are the
    /// same as over SMTP. The function's role may send only from the configured identity.
    pub struct SesRelay {
        client: aws_sdk_sesv2::Client,
        configuration_set: Option<String>,
    }

    impl SesRelay {
        pub fn new(sdk: &aws_types::SdkConfig, configuration_set: Option<String>) -> Self {
            Self {
                client: aws_sdk_sesv2::Client::new(sdk),
                configuration_set,
            }
        }
    }

    #[async_trait]
    impl Relay for SesRelay {
        fn kind(&self) -> &'static str {
            "ses"
        }

        async fn send(&self, mail: &Mail) -> Result<(), RelayError> {
            let raw = super::build_message(mail)?.formatted();
            let content = RawMessage::builder()
                .data(Blob::new(raw))
                .build()
                .map_err(|e| RelayError::Permanent(e.to_string()))?;
            // The envelope sender: the address of the `From` mailbox, as the message has it.
            let sender = mail
                .from
                .parse::<lettre::message::Mailbox>()
                .map_err(|e| RelayError::Permanent(format!("the sender is not valid: {e}")))?
                .email
                .to_string();
            let mut request = self
                .client
                .send_email()
                .from_email_address(&sender)
                .destination(Destination::builder().to_addresses(&mail.to).build())
                .content(EmailContent::builder().raw(content).build());
            if let Some(set) = &self.configuration_set {
                request = request.configuration_set_name(set);
            }
            match request.send().await {
                Ok(_) => Ok(()),
                Err(SdkError::ServiceError(e)) => {
                    let error = e.err();
                    let text = format!("SES: {error}");
                    match error {
                        SendEmailError::MessageRejected(_)
                        | SendEmailError::BadRequestException(_)
                        | SendEmailError::NotFoundException(_)
                        | SendEmailError::MailFromDomainNotVerifiedException(_) => {
                            Err(RelayError::Permanent(text))
                        }
                        _ => Err(RelayError::Temporary(text)),
                    }
                }
                Err(e) => Err(RelayError::Temporary(format!("SES: {e}"))),
            }
        }
    }
}
