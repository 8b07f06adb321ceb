//! The email bucket's own S3 client ([`EmailBucket`]) against the S3 emulator: every operation
//! of [`MessageBucket`], with its documented edge cases.
//!
//! `scripts/test` starts the emulators (moto answers S3), creates a fresh bucket with the
//! project's resource script and passes its name in `AGENTADDRESS_TEST_BUCKET`; the endpoint is
//! `AWS_ENDPOINT_URL_S3`. Without them these tests fail loudly: they never skip. Each test works
//! under its own random prefix, so runs may share the bucket.

use std::time::Duration;

use agentaddress_aws::{EmailBucket, MessageBucket};
use agentaddress_core::store::StoreError;
use futures::{StreamExt, TryStreamExt};

fn bucket_name() -> String {
    match std::env::var("AGENTADDRESS_TEST_BUCKET") {
        Ok(b) if !b.is_empty() => b,
        _ => panic!(
            "AGENTADDRESS_TEST_BUCKET is not set: run scripts/test, which starts the S3 \
             emulator and creates a fresh bucket"
        ),
    }
}

async fn bucket() -> EmailBucket {
    if std::env::var("AWS_ENDPOINT_URL_S3").is_err() && std::env::var("AWS_ENDPOINT_URL").is_err() {
        panic!("no S3 endpoint: run scripts/test (it exports AWS_ENDPOINT_URL_S3)");
    }
    let sdk = agentaddress_aws::sdk_config().await;
    EmailBucket::new(&sdk, bucket_name())
}

/// The SDK's S3 client, to look at what the bucket wrote.
async fn sdk_s3() -> aws_sdk_s3::Client {
    let sdk = agentaddress_aws::sdk_config().await;
    aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&sdk)
            .force_path_style(true)
            .build(),
    )
}

/// A prefix no other test (or run) uses.
fn run_prefix(test: &str) -> String {
    let n: u64 = rand::random();
    format!("test-bucket/{test}-{n:016x}/")
}

async fn keys_under(prefix: &str) -> Vec<String> {
    let s3 = sdk_s3().await;
    let mut keys = Vec::new();
    let mut pages = s3
        .list_objects_v2()
        .bucket(bucket_name())
        .prefix(prefix)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.expect("list objects");
        keys.extend(
            page.contents()
                .iter()
                .filter_map(|o| o.key().map(str::to_owned)),
        );
    }
    keys.sort();
    keys
}

/// Every byte value, over and over: about 1 MB.
fn binary() -> Vec<u8> {
    (0..1_048_579u32).map(|i| (i % 256) as u8).collect()
}

#[tokio::test]
async fn a_missing_key_is_none() {
    let b = bucket().await;
    let key = format!("{}nothing-here", run_prefix("missing"));
    assert_eq!(b.get(&key, 1000).await.expect("get a missing key"), None);
}

#[tokio::test]
async fn binary_bytes_round_trip_as_a_message() {
    let b = bucket().await;
    let key = format!("{}mail/addr_1/eml_2/abc-DEF_0.9", run_prefix("round-trip"));
    let body = binary();
    b.put(&key, body.clone()).await.expect("put");
    let got = b
        .get(&key, body.len() as u64)
        .await
        .expect("get")
        .expect("the object exists");
    assert!(got == body, "the bytes read back differ");
    let head = sdk_s3()
        .await
        .head_object()
        .bucket(bucket_name())
        .key(&key)
        .send()
        .await
        .expect("head the object");
    assert_eq!(head.content_type(), Some("message/rfc822"));
    assert_eq!(head.content_length(), Some(body.len() as i64));
    b.delete(&key).await.expect("delete");
    assert_eq!(b.get(&key, u64::MAX).await.expect("get after delete"), None);
}

#[tokio::test]
async fn keys_with_spaces_plus_and_unicode_are_encoded() {
    let b = bucket().await;
    let prefix = run_prefix("odd-keys");
    let keys = [
        format!("{prefix}a b/c+d"),
        format!("{prefix}100% ~sure=yes&no;(x)*"),
        format!("{prefix}é/日本"),
    ];
    for (i, key) in keys.iter().enumerate() {
        let body = format!("object {i}").into_bytes();
        b.put(key, body.clone()).await.expect("put an odd key");
        assert_eq!(
            b.get(key, 100).await.expect("get an odd key"),
            Some(body),
            "{key}"
        );
    }
    let mut want = keys.to_vec();
    want.sort();
    assert_eq!(
        keys_under(&prefix).await,
        want,
        "stored under the same keys"
    );
    assert_eq!(
        b.delete_prefix(&prefix, 1000).await.expect("delete them"),
        (3, false)
    );
    assert!(keys_under(&prefix).await.is_empty());
}

#[tokio::test]
async fn an_object_over_max_bytes_is_internal() {
    let b = bucket().await;
    let key = format!("{}big", run_prefix("too-big"));
    let body = binary();
    b.put(&key, body.clone()).await.expect("put");
    let max = body.len() as u64 - 1;
    match b.get(&key, max).await {
        Err(StoreError::Internal(e)) => assert!(e.contains("over"), "{e}"),
        other => panic!("expected an internal error, got {other:?}"),
    }
    assert_eq!(
        b.get(&key, body.len() as u64)
            .await
            .expect("get at the limit"),
        Some(body)
    );
    b.delete(&key).await.expect("delete");
}

#[tokio::test]
async fn deleting_a_missing_key_is_ok() {
    let b = bucket().await;
    let key = format!("{}never-written", run_prefix("delete-missing"));
    b.delete(&key).await.expect("delete a missing key");
    b.delete(&key).await.expect("and again");
}

#[tokio::test]
async fn delete_prefix_pages_through_more_than_a_thousand_objects() {
    let b = bucket().await;
    let root = run_prefix("delete-prefix");
    let prefix = format!("{root}addr_a/");
    let siblings = [format!("{root}addr_b/keep"), format!("{root}addr_a-x/keep")];
    let keys: Vec<String> = (0..1050).map(|i| format!("{prefix}eml_{i}/n")).collect();
    futures::stream::iter(keys.iter().chain(siblings.iter()))
        .map(|key| {
            let b = &b;
            async move { b.put(key, b"x".to_vec()).await }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await
        .expect("put 1,052 objects");
    assert_eq!(keys_under(&prefix).await.len(), 1050);

    // One list page (1,000 keys) fills a budget of 10: the rest is for the next call.
    assert_eq!(
        b.delete_prefix(&prefix, 10).await.expect("first call"),
        (1000, true)
    );
    assert_eq!(keys_under(&prefix).await.len(), 50);
    assert_eq!(
        b.delete_prefix(&prefix, 10).await.expect("second call"),
        (50, false)
    );
    assert!(keys_under(&prefix).await.is_empty());
    assert_eq!(
        b.delete_prefix(&prefix, 10).await.expect("nothing left"),
        (0, false)
    );

    // A budget over the total takes every page in one call.
    let more: Vec<String> = (0..1050).map(|i| format!("{prefix}again_{i}")).collect();
    futures::stream::iter(more.iter())
        .map(|key| {
            let b = &b;
            async move { b.put(key, b"y".to_vec()).await }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await
        .expect("put 1,050 more");
    assert_eq!(
        b.delete_prefix(&prefix, 5000).await.expect("one call"),
        (1050, false)
    );
    assert!(keys_under(&prefix).await.is_empty());

    let mut want = siblings.to_vec();
    want.sort();
    assert_eq!(keys_under(&root).await, want, "siblings survive");
    b.delete_prefix(&root, 1000).await.expect("clean up");
}

#[tokio::test]
async fn a_download_url_reads_without_credentials_and_is_signed_for_its_ttl() {
    let b = bucket().await;
    let key = format!("{}mail/addr_1/eml_2/download é x+y", run_prefix("download"));
    let body = binary();
    b.put(&key, body.clone()).await.expect("put");
    let disposition =
        "attachment; filename=\"report 1+2.pdf\"; filename*=UTF-8''report%201%2B2%20%C3%A9.pdf";
    let url = b
        .download_url(
            &key,
            "application/pdf",
            disposition,
            Duration::from_secs(60),
        )
        .await
        .expect("presign");
    assert!(url.starts_with("http://"), "{url}");
    assert!(url.contains("X-Amz-Signature="), "{url}");

    let http = reqwest::Client::new();
    let got = http.get(&url).send().await.expect("fetch the link");
    assert_eq!(got.status(), 200, "{:?}", got.text().await);
    let header = |name: &str| {
        got.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(header("content-type").as_deref(), Some("application/pdf"));
    assert_eq!(header("content-disposition").as_deref(), Some(disposition));
    assert_eq!(
        header("cache-control").as_deref(),
        Some("private, no-store")
    );
    let bytes = got.bytes().await.expect("read the body");
    assert!(
        bytes.as_ref() == body.as_slice(),
        "the downloaded bytes differ"
    );

    // The signature is SigV4's for this request, its expiry the one asked for (the emulator
    // checks neither: `verify` computes it with the SDK's own signer).
    verify(&url, "test", 60);
    let short = b
        .download_url(
            &key,
            "application/pdf",
            "attachment",
            Duration::from_secs(1),
        )
        .await
        .expect("presign for 1 s");
    verify(&short, "test", 1);
    b.delete(&key).await.expect("delete");
}

/// A wrong secret key signs requests S3 refuses (403 `SignatureDoesNotMatch`, an `internal`
/// error): its signatures differ from the right key's. The emulator does not check signatures
/// made in the query string, so the check is `verify`'s, with the SDK's signer; the requests
/// themselves still go through the client without a panic.
#[tokio::test]
async fn a_wrong_secret_key_signs_what_s3_refuses() {
    use aws_credential_types::provider::SharedCredentialsProvider;
    let good = bucket().await;
    let key = format!("{}secret a+b", run_prefix("wrong-secret"));
    good.put(&key, b"kept".to_vec()).await.expect("put");

    let sdk = aws_types::SdkConfig::builder()
        .region(aws_types::region::Region::new("us-east-1"))
        .credentials_provider(SharedCredentialsProvider::new(
            aws_credential_types::Credentials::new(
                "test",
                "not-the-secret",
                Some("a-session-token".into()),
                None,
                "test",
            ),
        ))
        .build();
    let wrong = EmailBucket::new(&sdk, bucket_name());
    let url = wrong
        .download_url(&key, "text/plain", "inline", Duration::from_secs(60))
        .await
        .expect("presign");
    assert!(
        url.contains("X-Amz-Security-Token=a-session-token"),
        "{url}"
    );
    verify(&url, "not-the-secret", 60);
    assert_ne!(
        signature(&url),
        expected_signature(&url, "test"),
        "the right secret key would not sign it so"
    );
    // Whatever the emulator makes of it: an answer, not a panic.
    let _ = wrong.get(&key, 100).await;
    good.delete(&key).await.expect("delete");
}

fn query(url: &url::Url, name: &str) -> String {
    url.query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| panic!("{name} missing from {url}"))
}

fn signature(url: &str) -> String {
    query(&url::Url::parse(url).expect("a URL"), "X-Amz-Signature")
}

/// The signature the SDK's SigV4 signer (aws-sigv4, as the S3 client configures it: no path
/// normalization, single percent-encoding, unsigned payload) gives the request `url` names,
/// at its date, for its expiry, with `secret`.
fn expected_signature(url: &str, secret: &str) -> String {
    use aws_sigv4::http_request::{
        sign, PercentEncodingMode, SessionTokenMode, SignableBody, SignableRequest,
        SignatureLocation, SigningSettings, UriPathNormalizationMode,
    };
    let url = url::Url::parse(url).expect("a URL");
    let credential = query(&url, "X-Amz-Credential");
    let parts: Vec<&str> = credential.split('/').collect();
    assert_eq!(parts.len(), 5, "{credential}");
    assert_eq!(&parts[3..], ["s3", "aws4_request"]);
    let date = chrono::NaiveDateTime::parse_from_str(&query(&url, "X-Amz-Date"), "%Y%m%dT%H%M%SZ")
        .expect("X-Amz-Date");
    let time = std::time::UNIX_EPOCH
        + Duration::from_secs(u64::try_from(date.and_utc().timestamp()).expect("after 1970"));
    let expires: u64 = query(&url, "X-Amz-Expires").parse().expect("X-Amz-Expires");
    let token = url
        .query_pairs()
        .find(|(k, _)| k == "X-Amz-Security-Token")
        .map(|(_, v)| v.into_owned());

    // The request without its signature's parameters: the signer adds them back.
    let mut unsigned = url.clone();
    {
        let kept: Vec<(String, String)> = url
            .query_pairs()
            .filter(|(k, _)| !k.starts_with("X-Amz-"))
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let mut q = unsigned.query_pairs_mut();
        q.clear();
        for (k, v) in &kept {
            q.append_pair(k, v);
        }
    }
    if unsigned.query() == Some("") {
        unsigned.set_query(None);
    }

    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(Duration::from_secs(expires));
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    settings.session_token_mode = SessionTokenMode::Include;
    let identity =
        aws_credential_types::Credentials::new(parts[0], secret, token, None, "test").into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(parts[2])
        .name("s3")
        .time(time)
        .settings(settings)
        .build()
        .expect("signing parameters")
        .into();
    let request = SignableRequest::new(
        "GET",
        unsigned.as_str(),
        std::iter::empty(),
        SignableBody::UnsignedPayload,
    )
    .expect("a signable request");
    sign(request, &params).expect("sign").signature().to_owned()
}

/// `url` carries SigV4's signature of its request with `secret`, valid for `expires` seconds.
fn verify(url: &str, secret: &str, expires: u64) {
    let parsed = url::Url::parse(url).expect("a URL");
    assert_eq!(query(&parsed, "X-Amz-Expires"), expires.to_string());
    assert_eq!(query(&parsed, "X-Amz-SignedHeaders"), "host");
    assert_eq!(
        signature(url),
        expected_signature(url, secret),
        "the signature of {url}"
    );
}

#[tokio::test]
async fn no_credentials_is_an_error_not_a_panic() {
    // A configuration without credentials (nor region: the emulator's endpoint stands in).
    let sdk = aws_types::SdkConfig::builder().build();
    let b = EmailBucket::new(&sdk, bucket_name());
    match b.get("anything", 10).await {
        Err(StoreError::Internal(e)) => assert!(e.contains("credentials"), "{e}"),
        other => panic!("expected an internal error, got {other:?}"),
    }
}
