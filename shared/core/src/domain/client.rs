//! Who "one client" is, for every per-client limit (connection caps, rates, memory shares) on
//! every door (HTTP, SMTP, the address creation rate) — docs/API.md, "Connections".
//!
//! An IPv4 client is its address. An IPv6 client is its /64 network: one host is normally
//! given a whole /64 (SLAAC, RFC 4291 §2.5.1; cloud hosts get a /64 or more), so keying on
//! the full 128-bit address would let one machine walk past every per-IP limit by changing
//! its low 64 bits. An IPv4 address carried in IPv6 (`::ffff:192.0.2.1`) is the IPv4 client.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

/// One client for the per-client limits: an IPv4 address or an IPv6 /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientKey(IpAddr);

impl ClientKey {
    pub fn of(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Self(IpAddr::V4(v4)),
            IpAddr::V6(v6) => {
                let bits = u128::from(v6) & !((1u128 << 64) - 1);
                Self(IpAddr::V6(Ipv6Addr::from(bits)))
            }
        }
    }

    /// The key of a client address given as text (the Lambda adapter's source IP); text that
    /// is not an IP address is its own key.
    pub fn of_text(ip: &str) -> String {
        match ip.parse::<IpAddr>() {
            Ok(ip) => Self::of(ip).to_string(),
            Err(_) => ip.to_owned(),
        }
    }
}

/// `192.0.2.1`, or `2001:db8:1:2::/64`.
impl fmt::Display for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}"),
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> String {
        ClientKey::of_text(s)
    }

    #[test]
    fn ipv6_clients_are_their_64() {
        assert_eq!(key("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), "2001:db8:1:2::/64");
        assert_eq!(
            key("2001:db8:1:2::1"),
            key("2001:db8:1:2:ffff:ffff:ffff:ffff")
        );
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("::1"), "::/64");
    }

    #[test]
    fn ipv4_clients_are_their_address_also_when_mapped() {
        assert_eq!(key("192.0.2.7"), "192.0.2.7");
        assert_eq!(key("::ffff:192.0.2.7"), "192.0.2.7");
        assert_ne!(key("192.0.2.7"), key("192.0.2.8"));
        assert_eq!(key("not an ip"), "not an ip");
    }
}
