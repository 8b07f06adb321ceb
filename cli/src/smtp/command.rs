//! SMTP commands (RFC 5321 §4.1), parsed from one line. Pure functions: no I/O.

/// Longest address in `MAIL FROM` / `RCPT TO` (RFC 5321 §4.5.3.1.3: a path is at most 256
/// octets, its angle brackets included).
pub const MAX_PATH: usize = 256;

/// One command line, parsed.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Ehlo(String),
    Helo(String),
    Mail(MailFrom),
    Rcpt(String),
    Data,
    Rset,
    Noop,
    Quit,
    Vrfy,
    Help,
    StartTls,
    /// A command of SMTP this server does not implement (EXPN, TURN, BDAT…).
    NotImplemented,
}

/// `MAIL FROM:<addr> [SIZE=n] [BODY=7BIT|8BITMIME] [SMTPUTF8]`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MailFrom {
    /// The reverse path without its brackets; empty for the null sender `<>`.
    pub address: String,
    /// The declared size, when given.
    pub size: Option<u64>,
}

/// Why a line is not a command this server accepts.
#[derive(Debug, PartialEq, Eq)]
pub enum Invalid {
    /// Not an SMTP command: `500 5.5.2`.
    Unknown,
    /// A known command with bad arguments: `501 5.5.4`.
    Syntax(&'static str),
    /// A `MAIL`/`RCPT` parameter this server does not support: `555 5.5.4`.
    Parameter,
}

/// Parses one command line (its line end already removed).
pub fn parse(line: &[u8]) -> Result<Command, Invalid> {
    let Ok(line) = std::str::from_utf8(line) else {
        return Err(Invalid::Syntax("Command line is not valid UTF-8"));
    };
    if line.chars().any(|c| c.is_control() && c != '\t') {
        return Err(Invalid::Syntax("Control characters in the command line"));
    }
    let (verb, rest) = match line.find([' ', '\t']) {
        Some(i) => (&line[..i], line[i..].trim_matches([' ', '\t'])),
        None => (line, ""),
    };
    let verb = verb.to_ascii_uppercase();
    match verb.as_str() {
        "EHLO" | "HELO" => {
            let domain = rest.split([' ', '\t']).next().unwrap_or_default();
            if domain.is_empty() {
                return Err(Invalid::Syntax("Give your domain name"));
            }
            if domain.len() > 255 {
                return Err(Invalid::Syntax("Domain name too long"));
            }
            Ok(if verb == "EHLO" {
                Command::Ehlo(domain.to_owned())
            } else {
                Command::Helo(domain.to_owned())
            })
        }
        "MAIL" => {
            let args = strip_keyword(rest, "FROM:")
                .ok_or(Invalid::Syntax("Syntax: MAIL FROM:<address>"))?;
            let (address, params) = path(args)?;
            let mut mail = MailFrom {
                address,
                size: None,
            };
            for param in params.split([' ', '\t']).filter(|p| !p.is_empty()) {
                let (key, value) = match param.split_once('=') {
                    Some((k, v)) => (k, Some(v)),
                    None => (param, None),
                };
                match (key.to_ascii_uppercase().as_str(), value) {
                    ("SIZE", Some(v)) => {
                        if v.is_empty() || v.len() > 20 || !v.bytes().all(|b| b.is_ascii_digit()) {
                            return Err(Invalid::Syntax("SIZE must be a number"));
                        }
                        // 20 digits may still overflow u64: that is over any limit anyway.
                        mail.size = Some(v.parse().unwrap_or(u64::MAX));
                    }
                    ("BODY", Some(v))
                        if v.eq_ignore_ascii_case("7BIT") || v.eq_ignore_ascii_case("8BITMIME") => {
                    }
                    ("SMTPUTF8", None) => {}
                    _ => return Err(Invalid::Parameter),
                }
            }
            Ok(Command::Mail(mail))
        }
        "RCPT" => {
            let args =
                strip_keyword(rest, "TO:").ok_or(Invalid::Syntax("Syntax: RCPT TO:<address>"))?;
            let (address, params) = path(args)?;
            if !params.trim().is_empty() {
                return Err(Invalid::Parameter);
            }
            if address.is_empty() {
                return Err(Invalid::Syntax("Give a recipient address"));
            }
            Ok(Command::Rcpt(address))
        }
        "DATA" | "RSET" | "QUIT" | "STARTTLS" if !rest.is_empty() => {
            Err(Invalid::Syntax("This command takes no argument"))
        }
        "DATA" => Ok(Command::Data),
        "RSET" => Ok(Command::Rset),
        "QUIT" => Ok(Command::Quit),
        "STARTTLS" => Ok(Command::StartTls),
        "NOOP" => Ok(Command::Noop),
        "VRFY" => Ok(Command::Vrfy),
        "HELP" => Ok(Command::Help),
        "EXPN" | "TURN" | "ETRN" | "ATRN" | "BDAT" | "AUTH" | "SEND" | "SOML" | "SAML" => {
            Ok(Command::NotImplemented)
        }
        _ => Err(Invalid::Unknown),
    }
}

/// `rest` after `keyword` (case-insensitive), with blanks after the colon allowed (a common
/// client mistake that servers accept).
fn strip_keyword<'a>(rest: &'a str, keyword: &str) -> Option<&'a str> {
    let head = rest.get(..keyword.len())?;
    if !head.eq_ignore_ascii_case(keyword) {
        return None;
    }
    Some(rest[keyword.len()..].trim_start_matches([' ', '\t']))
}

/// The address of `<addr> params…` (brackets required; source routes `<@a,@b:x@y>` are
/// dropped as RFC 5321 §4.1.1.3 allows), and the parameters after it.
fn path(args: &str) -> Result<(String, &str), Invalid> {
    let Some(inner) = args.strip_prefix('<') else {
        return Err(Invalid::Syntax(
            "Put the address in angle brackets: <address>",
        ));
    };
    let Some(end) = inner.find('>') else {
        return Err(Invalid::Syntax("Missing > after the address"));
    };
    let mut address = &inner[..end];
    let params = &inner[end + 1..];
    if !params.is_empty() && !params.starts_with([' ', '\t']) {
        return Err(Invalid::Syntax("Expected a space after the address"));
    }
    if address.len() + 2 > MAX_PATH {
        return Err(Invalid::Syntax("Address too long"));
    }
    if address.starts_with('@') {
        address = address.split_once(':').map_or("", |(_, a)| a);
    }
    if address.contains(['<', '>', ' ', '\t']) {
        return Err(Invalid::Syntax("Malformed address"));
    }
    if !address.is_empty() && !address.contains('@') {
        return Err(Invalid::Syntax("The address needs a domain: local@domain"));
    }
    Ok((address.to_owned(), params))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(line: &str) -> Result<Command, Invalid> {
        parse(line.as_bytes())
    }

    #[test]
    fn commands_parse_case_insensitively() {
        assert_eq!(
            p("ehlo client.example"),
            Ok(Command::Ehlo("client.example".into()))
        );
        assert_eq!(p("HELO x"), Ok(Command::Helo("x".into())));
        assert_eq!(p("EHLO"), Err(Invalid::Syntax("Give your domain name")));
        assert_eq!(
            p("MAIL FROM:<Ada@Example.com> SIZE=1200 BODY=8BITMIME SMTPUTF8"),
            Ok(Command::Mail(MailFrom {
                address: "Ada@Example.com".into(),
                size: Some(1200)
            }))
        );
        assert_eq!(p("mail from: <>"), Ok(Command::Mail(MailFrom::default())));
        assert_eq!(
            p("MAIL FROM:<a@b> SIZE=99999999999999999999"),
            Ok(Command::Mail(MailFrom {
                address: "a@b".into(),
                size: Some(u64::MAX)
            }))
        );
        assert_eq!(
            p("MAIL FROM:<a@b> SIZE=x"),
            Err(Invalid::Syntax("SIZE must be a number"))
        );
        assert_eq!(
            p("MAIL FROM:<a@b> BODY=BINARYMIME"),
            Err(Invalid::Parameter)
        );
        assert_eq!(p("MAIL FROM:<a@b> RET=HDRS"), Err(Invalid::Parameter));
        assert_eq!(
            p("MAIL FROM:a@b"),
            Err(Invalid::Syntax(
                "Put the address in angle brackets: <address>"
            ))
        );
        assert_eq!(
            p("MAIL TO:<a@b>"),
            Err(Invalid::Syntax("Syntax: MAIL FROM:<address>"))
        );
        assert_eq!(
            p("RCPT TO:<x@inbox.test>"),
            Ok(Command::Rcpt("x@inbox.test".into()))
        );
        assert_eq!(
            p("RCPT TO:<@relay.example:x@inbox.test>"),
            Ok(Command::Rcpt("x@inbox.test".into()))
        );
        assert_eq!(p("RCPT TO:<x@y> NOTIFY=NEVER"), Err(Invalid::Parameter));
        assert_eq!(
            p("RCPT TO:<>"),
            Err(Invalid::Syntax("Give a recipient address"))
        );
        assert_eq!(
            p("RCPT TO:<x@y>junk"),
            Err(Invalid::Syntax("Expected a space after the address"))
        );
        assert_eq!(p("data"), Ok(Command::Data));
        assert_eq!(
            p("DATA now"),
            Err(Invalid::Syntax("This command takes no argument"))
        );
        assert_eq!(p("VRFY someone"), Ok(Command::Vrfy));
        assert_eq!(p("EXPN list"), Ok(Command::NotImplemented));
        assert_eq!(p("HELLO"), Err(Invalid::Unknown));
        assert_eq!(p(""), Err(Invalid::Unknown));
        assert!(matches!(parse(b"NOOP \xff"), Err(Invalid::Syntax(_))));
        assert!(matches!(p("NOOP \u{7}"), Err(Invalid::Syntax(_))));
        let long = format!("RCPT TO:<{}@x>", "a".repeat(300));
        assert_eq!(p(&long), Err(Invalid::Syntax("Address too long")));
    }
}
