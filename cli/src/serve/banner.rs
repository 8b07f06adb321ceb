//! The start-up banner: what a person who just ran `agentaddress serve` wants to know — where
//! the API, the inbox viewer and the MCP endpoint are, where the data is — in plain words, on
//! stderr (README, "The two commands"). The machine-read lines stay alone on stdout.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::dbfile::DbPlace;

/// What the banner shows.
pub struct Banner<'a> {
    /// The HTTP listener's address.
    pub local: SocketAddr,
    /// `--public-url`, when set.
    pub public_url: Option<&'a str>,
    pub smtp: Option<SocketAddr>,
    pub email_domain: &'a str,
    pub metrics: Option<SocketAddr>,
    pub db: &'a DbPlace,
}

impl Banner<'_> {
    /// The base of the URLs shown: the public URL, else the listening address — a wildcard
    /// listener (`0.0.0.0`, `[::]`) shown as this machine's loopback address, which reaches it.
    pub fn base(&self) -> String {
        match self.public_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => format!("http://{}", reachable(self.local)),
        }
    }

    /// The banner's lines.
    pub fn lines(&self) -> Vec<String> {
        let base = self.base();
        let mut lines = vec![
            "agentaddress is ready.".to_owned(),
            format!("  API root:      {base}/api/v1"),
            format!("  Inbox viewer:  {base}/inbox   (open it in a browser)"),
            format!("  MCP endpoint:  {base}/api/mcp"),
            format!("  Agent guide:   {base}/skill.md"),
        ];
        if let Some(smtp) = self.smtp {
            lines.push(format!(
                "  SMTP door:     {smtp}   (mail to {{address_id}}@{})",
                self.email_domain
            ));
        }
        if let Some(metrics) = self.metrics {
            lines.push(format!("  Metrics:       http://{metrics}/metrics"));
        }
        lines.push(format!("  Database:      {}", self.db.describe()));
        if self.public_url.is_some() {
            lines.push(format!(
                "  Listening on:  {} (the URLs above use --public-url)",
                self.local
            ));
        } else if self.local.ip().is_unspecified() {
            lines.push(format!(
                "  Listening on:  {}, every interface (the URLs above are this machine's own; \
                 set --public-url for the address others reach)",
                self.local
            ));
        }
        lines.push("Stop it with Ctrl-C (requests in flight finish first).".to_owned());
        lines
    }
}

/// `addr`, with a wildcard IP replaced by the loopback address of its family.
fn reachable(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), addr.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), addr.port())
        }
        _ => addr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn urls_from_the_listener_or_the_public_url() {
        let db = DbPlace::File(PathBuf::from("/data/agentaddress.db"));
        let mut b = Banner {
            local: addr("127.0.0.1:8080"),
            public_url: None,
            smtp: None,
            email_domain: "inbox.localhost",
            metrics: None,
            db: &db,
        };
        let text = b.lines().join("\n");
        assert!(
            text.contains("API root:      http://127.0.0.1:8080/api/v1"),
            "{text}"
        );
        assert!(
            text.contains("Inbox viewer:  http://127.0.0.1:8080/inbox"),
            "{text}"
        );
        assert!(
            text.contains("MCP endpoint:  http://127.0.0.1:8080/api/mcp"),
            "{text}"
        );
        assert!(
            text.contains("Database:      /data/agentaddress.db"),
            "{text}"
        );
        assert!(!text.contains("Listening on"), "{text}");
        assert!(!text.contains("SMTP"), "{text}");

        b.local = addr("0.0.0.0:8080");
        b.smtp = Some(addr("0.0.0.0:2525"));
        let text = b.lines().join("\n");
        assert!(text.contains("http://127.0.0.1:8080/inbox"), "{text}");
        assert!(
            text.contains("Listening on:  0.0.0.0:8080, every interface"),
            "{text}"
        );
        assert!(text.contains("SMTP door:     0.0.0.0:2525"), "{text}");
        b.local = addr("[::]:8080");
        assert_eq!(b.base(), "http://[::1]:8080");

        b.public_url = Some("https://agents.example.com");
        let text = b.lines().join("\n");
        assert!(
            text.contains("https://agents.example.com/api/mcp"),
            "{text}"
        );
        assert!(text.contains("Listening on:  [::]:8080 (the URLs above use --public-url)"));

        let memory = DbPlace::Memory;
        b.db = &memory;
        assert!(b
            .lines()
            .join("\n")
            .contains("Database:      in memory (:memory:)"));
    }
}
