//! The email bucket (docs/API.md §10–§11, "on AWS"): where the raw messages live. Nothing of a
//! message beyond its event's `data` goes into DynamoDB.
//!
//! | key | written by | read by | removed |
//! |---|---|---|---|
//! | `inbound/{ses-message-id}` | SES's receipt rule (S3 action) | the `email` function, replay | by the `email` function once delivered; else by the lifecycle rule |
//! | `mail/{address_id}/{email_id}/{nonce}` | the store, before the append that names it | attachment and raw downloads | with the address (purge), else by the lifecycle rule |
//! | `mail/{address_id}/{email_id}/download-{nonce}` | a download over [`crate::INLINE_DOWNLOAD_MAX`] bytes | the client, through a presigned URL | with the address (purge), else by the lifecycle rule |
//!
//! Each address has its own copy of a message, so purging one address never removes another's.
//! The nonce makes every write a new object: a message appended twice concurrently (the same
//! `email_id`) never overwrites the object the winning event names; the loser's copy is
//! deleted, or left to the lifecycle rule.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_dynamodb::config::{ProvideCredentials, SharedCredentialsProvider};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use rusty_s3::actions::{ListObjectsV2, ObjectIdentifier, S3Action};
use rusty_s3::UrlStyle;

use crate::store::{StoreError, StoreResult};

/// Where the store keeps raw messages: the email bucket ([`EmailBucket`], S3). A trait object,
/// so that only the programs that hand one to the store ([`crate::DynamoStore::with_email_bucket`]:
/// the `email`, `email-api` and `purge` functions, `agentaddress purge-worker`, the tools) link
/// the S3 client; every other Lambda function stays without it (docs/PERFORMANCE.md, "Lambda
/// mode").
#[async_trait]
pub trait MessageBucket: std::fmt::Debug + Send + Sync {
    /// The bucket's name (S3 notifications name it).
    fn name(&self) -> &str;
    /// The object's bytes; `None` when there is no such object. An object over `max_bytes` is
    /// [`StoreError::Internal`].
    async fn get(&self, key: &str, max_bytes: u64) -> StoreResult<Option<Vec<u8>>>;
    /// Writes `body` at `key`.
    async fn put(&self, key: &str, body: Vec<u8>) -> StoreResult<()>;
    /// Removes `key` (no error when it does not exist).
    async fn delete(&self, key: &str) -> StoreResult<()>;
    /// Removes the objects under `prefix`, up to about `budget` of them; returns how many were
    /// removed and whether any remain.
    async fn delete_prefix(&self, prefix: &str, budget: usize) -> StoreResult<(u64, bool)>;
    /// A URL that reads `key` without credentials for `ttl`, answered with `content_type` and
    /// `disposition` (a presigned `GetObject`).
    async fn download_url(
        &self, key: &str, content_type: &str, disposition: &str, ttl: std::time::Duration,
    ) -> StoreResult<String>;
}

/// Where SES writes received messages.
pub const INBOUND_PREFIX: &str = "inbound/";
/// Where the store keeps each address's messages.
pub const MAIL_PREFIX: &str = "mail/";

/// Attempts per S3 request, retries included: the SDK's standard retry mode, which the bucket
/// used before it had its own client. Only transient failures are retried (see [`Failure`]).
const S3_MAX_ATTEMPTS: u32 = 3;

/// First retry delay; each retry doubles it (full jitter), up to [`S3_MAX_BACKOFF`].
const S3_INITIAL_BACKOFF: Duration = Duration::from_millis(200);

/// Longest delay between two attempts.
const S3_MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Time to open a connection (TCP, and TLS over it) to S3.
const S3_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Time for one attempt at a request, its answer's body included: a 10 MB `PutObject` or
/// `GetObject` (the largest message) fits with room to spare.
const S3_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a signature of one of our own requests is valid (S3 checks it on arrival).
const REQUEST_SIGNATURE_TTL: Duration = Duration::from_secs(300);

/// The longest a presigned URL may be valid (SigV4's limit).
const MAX_PRESIGNED_TTL: Duration = Duration::from_secs(7 * 86_400);

/// The most bytes read of an answer other than an object: a `ListObjectsV2` page of 1,000 keys
/// of 1 KB each is about 1.5 MB.
const MAX_ANSWER_BYTES: u64 = 16 << 20;

/// The most bytes of an error answer kept for its code and message.
const MAX_ERROR_BYTES: u64 = 64 << 10;

/// Credentials without an expiry (environment variables) are read again after this long.
const CREDENTIALS_TTL: Duration = Duration::from_secs(15 * 60);

/// Credentials are refreshed when less than this remains of them.
const CREDENTIALS_REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);

/// The S3 error codes that mean "try again" (besides every 5xx and 429).
const TRANSIENT_CODES: &[&str] = &[
    "SlowDown",
    "InternalError",
    "ServiceUnavailable",
    "RequestTimeout",
];

/// The email bucket and its S3 client.
///
/// Not the AWS SDK's S3 client: that one (with `aws-smithy-checksums` and `crc-fast`) made
/// each function that reaches the bucket about 0.18 MB larger zipped (docs/PERFORMANCE.md,
/// "The email bucket without the S3 SDK"). Requests are signed (SigV4, in the query string), built and parsed by `rusty-s3`,
/// which does no I/O, and sent by hyper-util's client over hyper-rustls with *ring*: the HTTP
/// stack the SDK's own client is made of, so the functions carry no second one.
#[derive(Debug, Clone)]
pub struct EmailBucket {
    name: String,
    s3: Arc<S3>,
}

/// What the bucket's requests need: where the bucket is, credentials, and an HTTP client.
struct S3 {
    /// The bucket's base URL and region; an error when the configuration names none.
    bucket: Result<rusty_s3::Bucket, String>,
    credentials: Option<SharedCredentialsProvider>,
    /// The last credentials and when to read them again.
    cached: tokio::sync::Mutex<Option<(Arc<rusty_s3::Credentials>, SystemTime)>>,
    /// Made on first use: loading the system's root certificates takes a few milliseconds.
    http: OnceLock<HttpClient>,
}

type HttpClient = Client<crate::http::Https, Full<Bytes>>;

impl std::fmt::Debug for S3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3")
            .field(
                "base_url",
                &self.bucket.as_ref().map(|b| b.base_url().as_str()),
            )
            .finish_non_exhaustive()
    }
}

/// The prefix of one address's stored messages.
pub fn mail_prefix(address_id: &str) -> String {
    format!("{MAIL_PREFIX}{address_id}/")
}

/// A new object key for `email_id`'s copy at `address_id`.
pub fn mail_key(address_id: &str, email_id: &str) -> String {
    format!(
        "{}{email_id}/{}",
        mail_prefix(address_id),
        crate::retry::uuid_like()
    )
}

/// A new object key for a download of `email_id`'s copy at `address_id` too large to answer
/// from a function (docs/API.md §11): beside the copy, so that purging the address removes it.
pub fn download_key(address_id: &str, email_id: &str) -> String {
    format!(
        "{}{email_id}/download-{}",
        mail_prefix(address_id),
        crate::retry::uuid_like()
    )
}

/// The key SES wrote message `ses_id` at, when `ses_id` can be one (SES ids are lower-case
/// letters and digits; `.`, `_` and `-` are allowed for other providers' ids).
pub fn inbound_key(ses_id: &str) -> Option<String> {
    let ok = !ses_id.is_empty()
        && ses_id.len() <= 200
        && ses_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    ok.then(|| format!("{INBOUND_PREFIX}{ses_id}"))
}

impl EmailBucket {
    /// [`EmailBucket::new`] as the store takes it.
    pub fn shared(sdk: &SdkConfig, name: impl Into<String>) -> Arc<dyn MessageBucket> {
        Arc::new(Self::new(sdk, name))
    }

    /// The bucket `name`, with the region and credentials of `sdk`. With an endpoint from the
    /// environment (`AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`: an emulator), requests use
    /// path-style addressing (`http://host/bucket/key`), which emulators on `127.0.0.1` need;
    /// otherwise virtual-hosted style at `https://{name}.s3.{region}.amazonaws.com`. A
    /// configuration without a region, or with an endpoint that is no URL, fails every request.
    pub fn new(sdk: &SdkConfig, name: impl Into<String>) -> Self {
        let endpoint = ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()));
        Self::with_endpoint(sdk, name.into(), endpoint)
    }

    /// [`EmailBucket::new`] with the endpoint given (`None`: AWS's own).
    fn with_endpoint(sdk: &SdkConfig, name: String, endpoint: Option<String>) -> Self {
        let region = sdk.region().map(|r| r.as_ref().to_owned());
        let bucket = match (endpoint, region) {
            (Some(endpoint), region) => {
                // Emulators take any region; the SDK would refuse to sign without one.
                let region = region.unwrap_or_else(|| "us-east-1".to_owned());
                bucket_at(&endpoint, UrlStyle::Path, &name, region)
            }
            (None, Some(region)) => {
                let endpoint = format!("https://s3.{region}.amazonaws.com");
                bucket_at(&endpoint, UrlStyle::VirtualHost, &name, region)
            }
            (None, None) => Err("no AWS region configured".to_owned()),
        };
        Self {
            name,
            s3: Arc::new(S3 {
                bucket,
                credentials: sdk.credentials_provider(),
                cached: tokio::sync::Mutex::new(None),
                http: OnceLock::new(),
            }),
        }
    }
}

fn bucket_at(
    endpoint: &str, style: UrlStyle, name: &str, region: String,
) -> Result<rusty_s3::Bucket, String> {
    let url = url::Url::parse(endpoint).map_err(|e| format!("S3 endpoint {endpoint}: {e}"))?;
    rusty_s3::Bucket::new(url, style, name.to_owned(), region)
        .map_err(|e| format!("bucket {name} at {endpoint}: {e}"))
}

/// The HTTPS (and, for emulators, HTTP) client: HTTP/1.1, rustls with *ring* and the system's
/// root certificates (as the SDK's client), a connect timeout.
fn http_client() -> Result<HttpClient, String> {
    crate::http::https_connector(Some(S3_CONNECT_TIMEOUT)).map(crate::http::client)
}

/// Why one attempt at a request failed.
#[derive(Debug)]
enum Failure {
    /// S3 answered with an error.
    Service {
        status: u16,
        code: String,
        message: String,
    },
    /// No complete answer: connection, TLS, timeout, a body cut short.
    Transport(String),
    /// A failure of ours, or an answer we cannot use: not worth another attempt.
    Internal(String),
}

impl Failure {
    /// Worth another attempt: transport trouble, throttling, S3's 5xx.
    fn transient(&self) -> bool {
        match self {
            Failure::Service { status, code, .. } => {
                *status >= 500 || *status == 429 || TRANSIENT_CODES.contains(&code.as_str())
            }
            Failure::Transport(_) => true,
            Failure::Internal(_) => false,
        }
    }

    fn is_code(&self, wanted: &str) -> bool {
        matches!(self, Failure::Service { code, .. } if code == wanted)
    }

    /// As the store reports it: transient failures are `unavailable` (503), others `internal`
    /// with the operation, S3's error code and its message.
    fn into_store(self, op: &str) -> StoreError {
        let transient = self.transient();
        let message = match self {
            Failure::Service { code, message, .. } => format!("{op}: {code}: {message}"),
            Failure::Transport(e) | Failure::Internal(e) => format!("{op}: {e}"),
        };
        if transient {
            StoreError::Unavailable(message)
        } else {
            StoreError::Internal(message)
        }
    }
}

/// An answer's body, read up to a bound.
enum Body {
    Whole(Vec<u8>),
    /// More than the bound: reading stopped there.
    Over,
}

/// Reads `body` while it stays within `max` bytes (never holding more than `max` of them).
async fn read_body<B>(body: B, max: u64, expected: Option<u64>) -> Result<Body, Failure>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    let mut body = std::pin::pin!(body);
    let capacity = expected.unwrap_or(0).min(max);
    let mut out = Vec::with_capacity(usize::try_from(capacity).unwrap_or(0));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Failure::Transport(format!("reading the answer: {e}")))?;
        if let Ok(data) = frame.into_data() {
            let len = u64::try_from(out.len().saturating_add(data.len())).unwrap_or(u64::MAX);
            if len > max {
                return Ok(Body::Over);
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(Body::Whole(out))
}

/// The text of the first `<tag>` element of an S3 XML answer (unescaped).
fn xml_text(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&format!("</{tag}>"))?;
    Some(
        xml[start..end]
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&"),
    )
}

/// One request's parts, signed for one attempt.
struct Request {
    method: http::Method,
    url: url::Url,
    headers: Vec<(&'static str, String)>,
    body: Bytes,
}

impl S3 {
    fn bucket(&self) -> Result<&rusty_s3::Bucket, Failure> {
        self.bucket
            .as_ref()
            .map_err(|e| Failure::Internal(e.clone()))
    }

    fn http(&self) -> Result<&HttpClient, Failure> {
        if let Some(client) = self.http.get() {
            return Ok(client);
        }
        let client = http_client().map_err(Failure::Internal)?;
        Ok(self.http.get_or_init(|| client))
    }

    /// The credentials to sign with: the provider's, kept until shortly before they expire.
    async fn credentials(&self) -> Result<Arc<rusty_s3::Credentials>, Failure> {
        let mut cached = self.cached.lock().await;
        let now = SystemTime::now();
        if let Some((credentials, until)) = cached.as_ref() {
            if now < *until {
                return Ok(credentials.clone());
            }
        }
        let provider = self
            .credentials
            .as_ref()
            .ok_or_else(|| Failure::Internal("no AWS credentials configured".into()))?;
        let fresh = provider.provide_credentials().await.map_err(|e| {
            use aws_credential_types::provider::error::CredentialsError;
            let message = format!("AWS credentials: {e}");
            match e {
                CredentialsError::ProviderTimedOut(_) | CredentialsError::ProviderError(_) => {
                    Failure::Transport(message)
                }
                _ => Failure::Internal(message),
            }
        })?;
        let expiry = fresh.expiry().unwrap_or(now + CREDENTIALS_TTL);
        let until = expiry
            .checked_sub(CREDENTIALS_REFRESH_BEFORE)
            .unwrap_or(expiry)
            .min(now + CREDENTIALS_TTL);
        let credentials = Arc::new(match fresh.session_token() {
            Some(token) => rusty_s3::Credentials::new_with_token(
                fresh.access_key_id(),
                fresh.secret_access_key(),
                token,
            ),
            None => rusty_s3::Credentials::new(fresh.access_key_id(), fresh.secret_access_key()),
        });
        *cached = Some((credentials.clone(), until));
        Ok(credentials)
    }

    /// Sends the request `sign` builds (signed anew for each attempt), and hands a successful
    /// answer to `answer`. Transient failures are tried again, up to [`S3_MAX_ATTEMPTS`] in
    /// all, after a jittered backoff; each attempt, its answer's body included, has
    /// [`S3_REQUEST_TIMEOUT`].
    async fn call<T, S, A, Fut>(&self, mut sign: S, mut answer: A) -> Result<T, Failure>
    where
        S: FnMut(&rusty_s3::Bucket, &rusty_s3::Credentials) -> Request,
        A: FnMut(http::Response<hyper::body::Incoming>) -> Fut,
        Fut: std::future::Future<Output = Result<T, Failure>>,
    {
        let bucket = self.bucket()?;
        let http = self.http()?;
        let mut attempt = 0;
        loop {
            let once = async {
                let credentials = self.credentials().await?;
                let request = sign(bucket, &credentials);
                let mut builder = http::Request::builder()
                    .method(request.method)
                    .uri(request.url.as_str());
                for (name, value) in &request.headers {
                    builder = builder.header(*name, value);
                }
                let request = builder
                    .body(Full::new(request.body))
                    .map_err(|e| Failure::Internal(format!("building the request: {e}")))?;
                let response = http
                    .request(request)
                    .await
                    .map_err(|e| Failure::Transport(transport_error(&e)))?;
                if response.status().is_success() {
                    answer(response).await
                } else {
                    Err(error_of(response).await)
                }
            };
            let failure = match tokio::time::timeout(S3_REQUEST_TIMEOUT, once).await {
                Ok(Ok(done)) => return Ok(done),
                Ok(Err(failure)) => failure,
                Err(_) => Failure::Transport(format!(
                    "no answer within {} s",
                    S3_REQUEST_TIMEOUT.as_secs()
                )),
            };
            attempt += 1;
            if !failure.transient() || attempt >= S3_MAX_ATTEMPTS {
                return Err(failure);
            }
            tracing::debug!(?failure, attempt, "S3 request failed; trying again");
            crate::retry::jittered_backoff(attempt - 1, S3_INITIAL_BACKOFF, S3_MAX_BACKOFF).await;
        }
    }
}

/// A transport error with its causes (hyper-util's own message is only "client error").
fn transport_error(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// An S3 error answer: its status, and the code and message of its XML body when it has one.
async fn error_of(response: http::Response<hyper::body::Incoming>) -> Failure {
    let status = response.status();
    let xml = match read_body(response.into_body(), MAX_ERROR_BYTES, None).await {
        Ok(Body::Whole(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        Ok(Body::Over) | Err(_) => String::new(),
    };
    Failure::Service {
        status: status.as_u16(),
        code: xml_text(&xml, "Code").unwrap_or_else(|| format!("HTTP {}", status.as_u16())),
        message: xml_text(&xml, "Message")
            .unwrap_or_else(|| status.canonical_reason().unwrap_or("").to_owned()),
    }
}

/// A request of `action`, signed for [`REQUEST_SIGNATURE_TTL`] (in the query string, so the
/// body is not part of the signature: TLS protects it, and S3 checks `Content-MD5` where it
/// asks for one).
fn signed<'a>(
    action: &impl S3Action<'a>, method: http::Method, headers: Vec<(&'static str, String)>,
    body: Bytes,
) -> Request {
    Request {
        method,
        url: action.sign(REQUEST_SIGNATURE_TTL),
        headers,
        body,
    }
}

fn content_length(response: &http::Response<hyper::body::Incoming>) -> Option<u64> {
    response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// A whole non-object answer (an XML document) as text.
async fn answer_text(response: http::Response<hyper::body::Incoming>) -> Result<String, Failure> {
    let expected = content_length(&response);
    match read_body(response.into_body(), MAX_ANSWER_BYTES, expected).await? {
        Body::Whole(bytes) => String::from_utf8(bytes)
            .map_err(|_| Failure::Internal("an answer that is not UTF-8".into())),
        Body::Over => Err(Failure::Internal(format!(
            "an answer over {MAX_ANSWER_BYTES} bytes"
        ))),
    }
}

#[async_trait]
impl MessageBucket for EmailBucket {
    fn name(&self) -> &str {
        &self.name
    }

    async fn get(&self, key: &str, max_bytes: u64) -> StoreResult<Option<Vec<u8>>> {
        let got = self
            .s3
            .call(
                |bucket, credentials| {
                    let action = bucket.get_object(Some(credentials), key);
                    signed(&action, http::Method::GET, Vec::new(), Bytes::new())
                },
                |response| async move {
                    let declared = content_length(&response);
                    if let Some(n) = declared.filter(|n| *n > max_bytes) {
                        return Err(Failure::Internal(format!(
                            "object {key} is {n} bytes, over {max_bytes}"
                        )));
                    }
                    match read_body(response.into_body(), max_bytes, declared).await? {
                        Body::Whole(bytes) => Ok(bytes),
                        Body::Over => Err(Failure::Internal(format!(
                            "object {key} is over {max_bytes} bytes"
                        ))),
                    }
                },
            )
            .await;
        match got {
            Ok(bytes) => Ok(Some(bytes)),
            Err(f) if f.is_code("NoSuchKey") => Ok(None),
            Err(f) => Err(f.into_store("GetObject")),
        }
    }

    /// Server-side encrypted by the bucket's default.
    async fn put(&self, key: &str, body: Vec<u8>) -> StoreResult<()> {
        let body = Bytes::from(body);
        self.s3
            .call(
                |bucket, credentials| {
                    let mut action = bucket.put_object(Some(credentials), key);
                    action
                        .headers_mut()
                        .insert("content-type", "message/rfc822");
                    signed(
                        &action,
                        http::Method::PUT,
                        vec![("content-type", "message/rfc822".to_owned())],
                        body.clone(),
                    )
                },
                |_| async { Ok(()) },
            )
            .await
            .map_err(|f| f.into_store("PutObject"))
    }

    async fn delete(&self, key: &str) -> StoreResult<()> {
        let deleted = self
            .s3
            .call(
                |bucket, credentials| {
                    let action = bucket.delete_object(Some(credentials), key);
                    signed(&action, http::Method::DELETE, Vec::new(), Bytes::new())
                },
                |_| async { Ok(()) },
            )
            .await;
        match deleted {
            // S3 answers 204 for a missing key too; some emulators answer 404.
            Err(f) if f.is_code("NoSuchKey") => Ok(()),
            other => other.map_err(|f| f.into_store("DeleteObject")),
        }
    }

    async fn download_url(
        &self, key: &str, content_type: &str, disposition: &str, ttl: std::time::Duration,
    ) -> StoreResult<String> {
        let op = "GetObject (presigning)";
        if ttl.is_zero() || ttl > MAX_PRESIGNED_TTL {
            return Err(StoreError::Internal(format!(
                "{op}: a link valid for {} s (1 s to 7 days)",
                ttl.as_secs()
            )));
        }
        let bucket = self.s3.bucket().map_err(|f| f.into_store(op))?;
        let credentials = self.s3.credentials().await.map_err(|f| f.into_store(op))?;
        let mut action = bucket.get_object(Some(&credentials), key);
        let query = action.query_mut();
        query.insert("response-content-type", content_type);
        query.insert("response-content-disposition", disposition);
        query.insert("response-cache-control", "private, no-store");
        Ok(action.sign(ttl).to_string())
    }

    /// At least one list page (1,000 keys) per call.
    async fn delete_prefix(&self, prefix: &str, budget: usize) -> StoreResult<(u64, bool)> {
        let mut removed = 0u64;
        loop {
            let page = self
                .s3
                .call(
                    |bucket, credentials| {
                        let mut action = bucket.list_objects_v2(Some(credentials));
                        action.with_prefix(prefix);
                        action.with_max_keys(1000);
                        signed(&action, http::Method::GET, Vec::new(), Bytes::new())
                    },
                    |response| async move {
                        let xml = answer_text(response).await?;
                        ListObjectsV2::parse_response(&xml).map_err(|e| {
                            Failure::Internal(format!("an answer we cannot read: {e}"))
                        })
                    },
                )
                .await
                .map_err(|f| f.into_store("ListObjectsV2"))?;
            let keys: Vec<ObjectIdentifier> = page
                .contents
                .into_iter()
                .map(|o| ObjectIdentifier::new(o.key))
                .collect();
            if keys.is_empty() {
                return Ok((removed, false));
            }
            let n = keys.len() as u64;
            let result = self
                .s3
                .call(
                    |bucket, credentials| {
                        let mut action = bucket.delete_objects(Some(credentials), keys.iter());
                        action.set_quiet(true);
                        let (body, md5) = action.clone().body_with_md5();
                        action.headers_mut().insert("content-md5", md5.clone());
                        signed(
                            &action,
                            http::Method::POST,
                            vec![
                                ("content-md5", md5),
                                ("content-type", "application/xml".to_owned()),
                            ],
                            Bytes::from(body),
                        )
                    },
                    |response| async move {
                        let xml = answer_text(response).await?;
                        rusty_s3::actions::DeleteObjectsResponse::parse(&xml).map_err(|e| {
                            Failure::Internal(format!("an answer we cannot read: {e}"))
                        })
                    },
                )
                .await
                .map_err(|f| f.into_store("DeleteObjects"))?;
            if let Some(e) = result.errors.first() {
                return Err(StoreError::Unavailable(format!(
                    "DeleteObjects: {}: {}",
                    e.code, e.message
                )));
            }
            removed += n;
            if page.next_continuation_token.is_none() {
                return Ok((removed, false));
            }
            if removed >= budget as u64 {
                return Ok((removed, true));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert_eq!(inbound_key("0abc9xyz").as_deref(), Some("inbound/0abc9xyz"));
        assert_eq!(inbound_key(""), None);
        assert_eq!(inbound_key("../x"), None);
        assert_eq!(inbound_key("a/b"), None);
        assert_eq!(inbound_key(&"a".repeat(201)), None);
        let k = mail_key("addr_1", "eml_2");
        assert!(k.starts_with("mail/addr_1/eml_2/"), "{k}");
        assert_ne!(
            k,
            mail_key("addr_1", "eml_2"),
            "every write is a new object"
        );
    }

    /// Without an emulator's endpoint: virtual-hosted style on S3's regional HTTPS endpoint,
    /// with the key's path encoded segment by segment and the session token in the URL.
    #[tokio::test]
    async fn on_aws_the_bucket_is_virtual_hosted_on_its_region() {
        let sdk = SdkConfig::builder()
            .region(aws_types::region::Region::new("eu-west-3"))
            .credentials_provider(SharedCredentialsProvider::new(
                aws_credential_types::Credentials::new(
                    "AKID",
                    "secret",
                    Some("tok".into()),
                    None,
                    "t",
                ),
            ))
            .build();
        let bucket = EmailBucket::with_endpoint(&sdk, "agentaddress-email".into(), None);
        let url = bucket
            .download_url(
                "mail/a b/c+d",
                "text/plain",
                "inline",
                Duration::from_secs(60),
            )
            .await
            .expect("presign");
        assert!(
            url.starts_with(
                "https://agentaddress-email.s3.eu-west-3.amazonaws.com/mail/a%20b/c%2Bd?"
            ),
            "{url}"
        );
        assert!(url.contains("X-Amz-Credential=AKID%2F"), "{url}");
        assert!(url.contains("%2Feu-west-3%2Fs3%2Faws4_request"), "{url}");
        assert!(url.contains("X-Amz-Security-Token=tok"), "{url}");
        assert!(
            url.contains("response-cache-control=private%2C%20no-store"),
            "{url}"
        );
        // No region and no endpoint: an error on use, not a panic.
        let nowhere = EmailBucket::with_endpoint(&SdkConfig::builder().build(), "b".into(), None);
        assert!(matches!(
            nowhere.get("k", 1).await,
            Err(StoreError::Internal(e)) if e.contains("region")
        ));
    }
}
