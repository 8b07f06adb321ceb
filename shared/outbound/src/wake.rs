//! The wake sender (docs/API.md §19): the one HTTP client that calls a hook's URL, safe by
//! construction so a hook can never be a way into the operator's own network.
//!
//! - It resolves the host itself ([`PublicOnly`], reqwest's resolver hook) and refuses the name
//!   when any address it resolves to is not public (`agentaddress_core::domain::hooks::is_public`:
//!   loopback, private, link-local with the cloud metadata address, CGNAT, multicast,
//!   unique-local, IPv4-mapped private…), unless private receivers are allowed; reqwest then
//!   connects to exactly those checked addresses — there is no second resolution for a DNS
//!   rebinding to slip into. A literal IP host is checked by `check_hook_url` before each send.
//! - No proxy from the environment (a proxy would connect on its own), no redirect followed (a
//!   3xx is the answer), 10 s for the whole exchange, at most 64 KiB of the answer read.
//! - TLS on rustls with the platform's root certificates.
//!
//! Why reqwest: it is the well-kept Rust HTTP client already in the build (the S3 client, the
//! tests), and it has the two hooks this needs — a custom resolver whose addresses it connects
//! to, and a redirect policy of none.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentaddress_core::domain::hooks::{
    check_hook_url, is_public, HookUrlRefused, MAX_ANSWER_BYTES, WAKE_TIMEOUT,
};
use agentaddress_core::relay::HookCaller;
pub use agentaddress_core::relay::{Answered, NotSent};
use async_trait::async_trait;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// A lookup in flight: the addresses of a name (port 0).
pub type BoxedLookup =
    std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<Vec<SocketAddr>>> + Send>>;

/// Where a name's addresses come from: the system's resolver, or a test's.
pub type Lookup = Arc<dyn Fn(String) -> BoxedLookup + Send + Sync>;

/// The system's resolver (`getaddrinfo` through tokio).
pub fn system_lookup() -> Lookup {
    Arc::new(|host: String| {
        Box::pin(async move { Ok(tokio::net::lookup_host((host.as_str(), 0)).await?.collect()) })
    })
}

/// The resolver that answers only public addresses (all of a name's, or none).
#[derive(Clone)]
pub struct PublicOnly {
    pub allow_private: bool,
    lookup: Lookup,
}

impl std::fmt::Debug for PublicOnly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublicOnly")
            .field("allow_private", &self.allow_private)
            .finish_non_exhaustive()
    }
}

/// Why the resolver answered no addresses: a name that resolved to an address a wake may not
/// go to, or one that did not resolve (carried through reqwest to [`describe`]).
#[derive(Debug)]
struct NotPublic(NotSent);

impl std::fmt::Display for NotPublic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::error::Error for NotPublic {}

impl PublicOnly {
    /// Answers the public addresses `lookup` finds (all of them, when `allow_private`).
    pub fn new(allow_private: bool, lookup: Lookup) -> Self {
        Self {
            allow_private,
            lookup,
        }
    }

    /// The addresses of `host`, every one of them public (unless private ones are allowed).
    pub async fn lookup(&self, host: &str) -> Result<Vec<SocketAddr>, NotSent> {
        let addrs: Vec<SocketAddr> = (self.lookup)(host.to_owned())
            .await
            .map_err(|e| NotSent::Unreachable(format!("{host} does not resolve: {e}")))?;
        if addrs.is_empty() {
            return Err(NotSent::Unreachable(format!("{host} has no address")));
        }
        if !self.allow_private {
            if let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
                return Err(NotSent::Refused(format!(
                    "The hook URL is refused: its host {host} resolves to {}, which is not a public address.",
                    bad.ip()
                )));
            }
        }
        Ok(addrs)
    }
}

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        let this = self.clone();
        Box::pin(async move {
            match this.lookup(name.as_str()).await {
                Ok(addrs) => Ok(Box::new(addrs.into_iter()) as Addrs),
                Err(e) => Err(Box::new(NotPublic(e)) as _),
            }
        })
    }
}

/// The wake sender.
#[derive(Clone)]
pub struct WakeSender {
    client: reqwest::Client,
    resolver: PublicOnly,
}

impl WakeSender {
    /// A sender that refuses non-public receivers unless `allow_private`
    /// (`agentaddress serve --allow-private-hooks`, the template's `AllowPrivateHooks`).
    pub fn new(allow_private: bool) -> Result<Self, String> {
        Self::with_timeout(allow_private, WAKE_TIMEOUT)
    }

    /// As [`WakeSender::new`], with another time for the whole exchange (tests).
    pub fn with_timeout(allow_private: bool, timeout: Duration) -> Result<Self, String> {
        Self::with_lookup(allow_private, timeout, system_lookup())
    }

    /// As [`WakeSender::with_timeout`], names resolved by `lookup` (a test's resolver, to
    /// answer one address at creation and another at send).
    pub fn with_lookup(
        allow_private: bool, timeout: Duration, lookup: Lookup,
    ) -> Result<Self, String> {
        let resolver = PublicOnly {
            allow_private,
            lookup,
        };
        let client = reqwest::Client::builder()
            .dns_resolver(Arc::new(resolver.clone()))
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .connect_timeout(timeout)
            .pool_max_idle_per_host(1)
            .user_agent(concat!("agentaddress/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("the wake sender cannot be built: {e}"))?;
        Ok(Self { client, resolver })
    }

    /// Whether private receivers are allowed.
    pub fn allows_private(&self) -> bool {
        self.resolver.allow_private
    }

    /// Checks a hook URL when a hook is made: its form (`check_hook_url`), then every address
    /// its host resolves to.
    pub async fn check(&self, url: &str) -> Result<url::Url, HookUrlRefused> {
        let parsed = check_hook_url(url, self.resolver.allow_private)?;
        if let Some(url::Host::Domain(name)) = parsed.host() {
            match self.resolver.lookup(name).await {
                Ok(_) => {}
                Err(NotSent::Refused(why)) => return Err(HookUrlRefused(why)),
                Err(NotSent::Unreachable(why)) => {
                    return Err(HookUrlRefused(format!("The hook URL is refused: {why}.")))
                }
            }
        }
        Ok(parsed)
    }

    /// POSTs `body` with `headers` to `url` (checked again: a literal address's rule, and the
    /// resolver's for a name) and reads at most [`MAX_ANSWER_BYTES`] of the answer.
    pub async fn send(
        &self, url: &str, headers: &[(String, String)], body: Vec<u8>,
    ) -> Result<Answered, NotSent> {
        let url = check_hook_url(url, self.resolver.allow_private)
            .map_err(|e| NotSent::Refused(e.to_string()))?;
        let started = Instant::now();
        let mut request = self.client.post(url).body(body);
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let mut answer = request.send().await.map_err(|e| describe(&e))?;
        let status = answer.status().as_u16();
        let retry_after = answer
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let elapsed = started.elapsed();
        // The answer's body is read (to let the connection be reused) up to the cap, never more.
        let mut read = 0usize;
        while read < MAX_ANSWER_BYTES {
            match answer.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                Ok(None) | Err(_) => break,
            }
        }
        Ok(Answered {
            status,
            retry_after,
            elapsed,
        })
    }
}

#[async_trait]
impl HookCaller for WakeSender {
    fn allows_private(&self) -> bool {
        WakeSender::allows_private(self)
    }

    async fn check(&self, url: &str) -> Result<(), HookUrlRefused> {
        WakeSender::check(self, url).await.map(|_| ())
    }

    async fn call(
        &self, url: &str, headers: &[(String, String)], body: Vec<u8>,
    ) -> Result<Answered, NotSent> {
        self.send(url, headers, body).await
    }
}

/// Why a send got no answer, without the URL (which may hold a secret path).
fn describe(e: &reqwest::Error) -> NotSent {
    let mut source: Option<&dyn std::error::Error> = Some(e);
    while let Some(s) = source {
        if let Some(not_public) = s.downcast_ref::<NotPublic>() {
            return not_public.0.clone();
        }
        source = s.source();
    }
    let what = if e.is_timeout() {
        "no answer within the time allowed".to_owned()
    } else if e.is_connect() {
        "the connection failed".to_owned()
    } else {
        "the request failed".to_owned()
    };
    let mut detail = String::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        detail = s.to_string();
        source = s.source();
    }
    if detail.is_empty() {
        NotSent::Unreachable(what)
    } else {
        NotSent::Unreachable(format!("{what}: {detail}"))
    }
}

#[cfg(test)]
mod tests;
