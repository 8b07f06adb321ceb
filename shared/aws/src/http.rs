//! HTTP/1.1 over TLS for everything the store sends to AWS: the email bucket's S3 requests
//! and the AWS SDK's DynamoDB and SQS calls ([`sdk_http_client`]).
//!
//! Why not the SDK's own client (`aws-smithy-http-client`): with rustls it always links HTTP/2
//! (`h2`), which DynamoDB and SQS are never asked to speak; this adapter of the SDK's
//! `HttpClient` trait over hyper-util's HTTP/1.1 client takes about 0.4 MB of code out of
//! every Lambda function (docs/PERFORMANCE.md, "Lambda mode"). The stack underneath is the one
//! the SDK's client is made of: hyper, hyper-util, hyper-rustls with *ring* and the system's
//! root certificates.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector as SdkConnector, HttpConnectorFuture, HttpConnectorSettings,
    SharedHttpClient, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::retry::ErrorKind;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;

/// The connector both clients use: HTTPS (and plain HTTP, for emulators), HTTP/1.1.
pub(crate) type Https = hyper_rustls::HttpsConnector<HttpConnector>;

/// How long an idle pooled connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(20);

/// An HTTPS connector with rustls, *ring* and the system's roots, and `connect_timeout`.
pub(crate) fn https_connector(connect_timeout: Option<Duration>) -> Result<Https, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = match hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider.clone())
    {
        Ok(builder) => builder,
        Err(e) => {
            // As the SDK's client: a warning, then every HTTPS request fails its handshake
            // (requests to an emulator over plain HTTP still work).
            tracing::warn!("no root certificates: {e}");
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS configuration: {e}"))?
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config)
        }
    };
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(connect_timeout);
    http.set_nodelay(true);
    Ok(tls.https_or_http().enable_http1().wrap_connector(http))
}

/// A pooled HTTP/1.1 client over [`https_connector`] for bodies of type `B`.
pub(crate) fn client<B>(connector: Https) -> Client<Https, B>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE)
        .build(connector)
}

/// The AWS SDK's HTTP client (DynamoDB, SQS): see the module's documentation.
pub fn sdk_http_client() -> SharedHttpClient {
    SharedHttpClient::new(SdkClient::default())
}

/// The timeouts a connector is made for: (connect, read).
type Timeouts = (Option<Duration>, Option<Duration>);

/// One connector per [`Timeouts`] the SDK asks for, as its own client does.
#[derive(Debug, Default)]
struct SdkClient {
    connectors: Mutex<HashMap<Timeouts, SharedHttpConnector>>,
}

impl HttpClient for SdkClient {
    fn http_connector(
        &self, settings: &HttpConnectorSettings, _components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        let key = (settings.connect_timeout(), settings.read_timeout());
        let mut connectors = self
            .connectors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        connectors
            .entry(key)
            .or_insert_with(|| {
                SharedHttpConnector::new(SdkHttp::new(settings.connect_timeout(), key.1))
            })
            .clone()
    }
}

/// Sends the SDK's requests; failures are classified as the SDK's own client classifies them,
/// so that its retry policy sees the same errors (a dropped connection, a timeout: retried).
#[derive(Debug, Clone)]
struct SdkHttp {
    client: Result<Client<Https, SdkBody>, String>,
    read_timeout: Option<Duration>,
}

impl SdkHttp {
    fn new(connect_timeout: Option<Duration>, read_timeout: Option<Duration>) -> Self {
        Self {
            client: https_connector(connect_timeout).map(client),
            read_timeout,
        }
    }
}

impl SdkConnector for SdkHttp {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let client = match &self.client {
            Ok(client) => client.clone(),
            Err(e) => {
                return HttpConnectorFuture::ready(Err(ConnectorError::other(
                    e.clone().into(),
                    None,
                )))
            }
        };
        let request = match request.try_into_http1x() {
            Ok(request) => request,
            Err(e) => return HttpConnectorFuture::ready(Err(ConnectorError::user(e.into()))),
        };
        let read_timeout = self.read_timeout;
        HttpConnectorFuture::new(async move {
            let sent = client.request(request);
            let answer = match read_timeout {
                Some(limit) => match tokio::time::timeout(limit, sent).await {
                    Ok(answer) => answer,
                    Err(elapsed) => return Err(ConnectorError::timeout(elapsed.into())),
                },
                None => sent.await,
            };
            match answer {
                Ok(response) => HttpResponse::try_from(response.map(SdkBody::from_body_1_x))
                    .map_err(|e| ConnectorError::other(e.into(), None)),
                Err(e) => Err(classify(e)),
            }
        })
    }
}

/// A failed exchange as the SDK's own hyper client reports it.
fn classify(e: hyper_util::client::legacy::Error) -> ConnectorError {
    if e.is_connect() {
        return ConnectorError::io(e.into());
    }
    if let Some(h) = source::<hyper::Error>(&e) {
        if h.is_timeout() {
            return ConnectorError::timeout(e.into());
        }
        if h.is_user() {
            return ConnectorError::user(e.into());
        }
        if h.is_closed() || h.is_canceled() || source::<std::io::Error>(h).is_some() {
            return ConnectorError::io(e.into());
        }
        if h.is_incomplete_message() {
            return ConnectorError::other(e.into(), Some(ErrorKind::TransientError));
        }
    }
    if source::<std::io::Error>(&e).is_some() {
        return ConnectorError::io(e.into());
    }
    ConnectorError::other(e.into(), None)
}

/// The first error of type `E` in `e`'s chain of sources, `e` included.
fn source<'a, E: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a E> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<E>() {
            return Some(found);
        }
        next = e.source();
    }
    None
}
