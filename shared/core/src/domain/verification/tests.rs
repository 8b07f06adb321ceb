use super::*;
use proptest::prelude::*;

const STD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const GH_SECRET: &str = "It's a Secret to Everybody";
const STRIPE_SECRET: &str = "whsec_test_secret";

fn config(scheme: &str, secret: &str) -> VerificationConfig {
    VerificationConfig::new(scheme, secret, None, None).expect("valid config")
}

fn hs<'a>(pairs: &'a [(&'a str, &'a str)]) -> Vec<(&'a str, &'a [u8])> {
    pairs.iter().map(|(k, v)| (*k, v.as_bytes())).collect()
}

#[test]
fn standard_webhooks_spec_vector_verifies() {
    // The example of the Standard Webhooks specification.
    let c = config("standard-webhooks", STD_SECRET);
    let body = br#"{"test": 2432232314}"#;
    let headers = [
        ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
        ("webhook-timestamp", "1614265330"),
        (
            "webhook-signature",
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        ),
    ];
    let v = verify(&c, &hs(&headers), body, 1_614_265_330_000);
    assert_eq!(v.reason, None);
    assert_eq!(
        v.delivery_id.as_deref(),
        Some("msg_p5jXN8AQM9LWM0D4loKWxJek")
    );
    // Our signer agrees with the vector.
    let signed = sign(&c, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body);
    assert_eq!(
        signed[2].1,
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    );
    // Any of several space-separated signatures verifies.
    let several = [
        headers[0],
        headers[1],
        (
            "webhook-signature",
            "v1a,xyz v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        ),
    ];
    assert!(verify(&c, &hs(&several), body, 1_614_265_330_000).verified());
    // 301 s later, outside the default tolerance.
    let late = verify(&c, &hs(&headers), body, 1_614_265_631_000);
    assert_eq!(late.reason, Some(Reason::TimestampOutOfTolerance));
    assert_eq!(late.delivery_id, None);
    // A different body.
    let other = verify(
        &c,
        &hs(&headers),
        br#"{"test": 2432232315}"#,
        1_614_265_330_000,
    );
    assert_eq!(other.reason, Some(Reason::BadSignature));
}

#[test]
fn github_docs_vector_verifies() {
    // The example of GitHub's "Validating webhook deliveries".
    let c = config("github", GH_SECRET);
    let headers = [
        (
            "X-Hub-Signature-256",
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        ),
        ("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
    ];
    let v = verify(&c, &hs(&headers), b"Hello, World!", 0);
    assert_eq!(v.reason, None);
    assert_eq!(
        v.delivery_id.as_deref(),
        Some("72d3162e-cc78-11e3-81ab-4c9367dc0958")
    );
    assert_eq!(
        verify(&c, &hs(&headers), b"Hello, World?", 0).reason,
        Some(Reason::BadSignature)
    );
    // No timestamp: any clock verifies.
    assert!(verify(&c, &hs(&headers), b"Hello, World!", i64::MAX / 2).verified());
}

#[test]
fn stripe_vector_verifies() {
    // Computed independently with Python's hmac module:
    // hmac.new(b"whsec_test_secret", b"1492774577." + body, hashlib.sha256).hexdigest()
    let c = config("stripe", STRIPE_SECRET);
    let body = br#"{"id": "evt_test_webhook", "object": "event"}"#;
    let sig = "c137b1b62277d523cf8fed4dfbd0170a9a5b8a380e00cc3711d4bf0652f2ce7a";
    let header = format!(
        "t=1492774577,v1={sig},v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39"
    );
    let headers = [("Stripe-Signature", header.as_str())];
    let v = verify(&c, &hs(&headers), body, 1_492_774_577_000);
    assert_eq!(v.reason, None);
    assert_eq!(v.delivery_id.as_deref(), Some("evt_test_webhook"));
    let signed = sign(&c, "", 1_492_774_577, body);
    assert_eq!(signed[0].1, format!("t=1492774577,v1={sig}"));
    // Several v1 entries: any match verifies.
    let two = format!("t=1492774577,v1={},v1={sig}", "00".repeat(32));
    assert!(verify(
        &c,
        &hs(&[("stripe-signature", two.as_str())]),
        body,
        1_492_774_577_000
    )
    .verified());
}

#[test]
fn reasons_for_missing_repeated_malformed_and_oversized_headers() {
    let gh = config("github", GH_SECRET);
    let good = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    let body = b"Hello, World!";
    let r = |h: &[(&str, &[u8])]| verify(&gh, h, body, 0).reason;
    assert_eq!(r(&[]), Some(Reason::MissingSignature));
    assert_eq!(
        r(&[
            ("x-hub-signature-256", good.as_bytes()),
            ("x-hub-signature-256", good.as_bytes())
        ]),
        Some(Reason::BadSignature)
    );
    assert_eq!(
        r(&[("x-hub-signature-256", b"sha1=abc")]),
        Some(Reason::BadSignature)
    );
    assert_eq!(
        r(&[("x-hub-signature-256", b"sha256=zz")]),
        Some(Reason::BadSignature)
    );
    assert_eq!(
        r(&[("x-hub-signature-256", &[0xff, 0xfe])]),
        Some(Reason::BadSignature)
    );
    let huge = format!("sha256={}", "a".repeat(MAX_HEADER_BYTES));
    assert_eq!(
        r(&[("x-hub-signature-256", huge.as_bytes())]),
        Some(Reason::BadSignature)
    );

    let st = config("stripe", STRIPE_SECRET);
    let r = |h: &str| verify(&st, &[("stripe-signature", h.as_bytes())], body, 0).reason;
    assert_eq!(r("v1=00"), Some(Reason::BadSignature), "no timestamp");
    assert_eq!(
        r("t=1,t=2,v1=00"),
        Some(Reason::BadSignature),
        "two timestamps"
    );
    assert_eq!(r("t=1"), Some(Reason::BadSignature), "no signature");
    assert_eq!(r("t=abc,v1=00"), Some(Reason::BadSignature));
    assert_eq!(r("garbage"), Some(Reason::BadSignature));
    let many = format!("t=0{}", ",v1=00".repeat(MAX_SIGNATURES + 1));
    assert_eq!(r(&many), Some(Reason::BadSignature));

    let sw = config("standard-webhooks", STD_SECRET);
    let r = |h: &[(&str, &str)]| verify(&sw, &hs(h), body, 0).reason;
    assert_eq!(
        r(&[("webhook-id", "m"), ("webhook-signature", "v1,AAAA")]),
        Some(Reason::MissingSignature)
    );
    assert_eq!(
        r(&[
            ("webhook-id", "m"),
            ("webhook-timestamp", "0"),
            ("webhook-signature", "v1,!!!")
        ]),
        Some(Reason::BadSignature)
    );
    let many = "v1,AAAA ".repeat(MAX_SIGNATURES + 1);
    assert_eq!(
        r(&[
            ("webhook-id", "m"),
            ("webhook-timestamp", "0"),
            ("webhook-signature", &many)
        ]),
        Some(Reason::BadSignature)
    );
}

#[test]
fn configs_are_validated_without_echoing_the_secret() {
    let bad = [
        ("standard-webhooks", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        ("standard-webhooks", "whsec_not-base64!"),
        ("standard-webhooks", "whsec_AAAA"),
        ("stripe", "sk_live_abcdefgh"),
        ("stripe", "whsec_short"),
        ("stripe", "whsec_with space inside"),
        ("github", ""),
        ("github", "line\nbreak"),
        ("other", "whatever-secret"),
    ];
    for (scheme, secret) in bad {
        let e = VerificationConfig::new(scheme, secret, None, None).expect_err(secret);
        if !secret.is_empty() {
            assert!(!e.0.contains(secret), "{e}");
        }
    }
    assert!(VerificationConfig::new("github", "x", None, Some(0)).is_err());
    assert!(VerificationConfig::new("github", "x", None, Some(3601)).is_err());
    let c = VerificationConfig::new("github", "x", Some(true), Some(3600)).expect("ok");
    assert_eq!(
        VerificationConfig::from_stored(&c.to_stored()),
        Some(c.clone())
    );
    assert!(!format!("{c:?}").contains("\"x\""));
    let c = config("stripe", "whsec_SeCrEt1234");
    assert!(!format!("{c:?}").contains("SeCrEt1234"));
    assert_eq!(c.tolerance_seconds, TOLERANCE_DEFAULT_SECONDS);
    let from = VerificationConfig::from_json(
        &json!({"scheme": "github", "secret": "s", "tolerance_seconds": 60.0, "reject_unverified": null}),
    )
    .expect("ok");
    assert_eq!(from.tolerance_seconds, 60);
    assert!(VerificationConfig::from_json(&json!({"scheme": "github"})).is_err());
    assert!(VerificationConfig::from_json(
        &json!({"scheme": "github", "secret": "s", "tolerance_seconds": 1.5})
    )
    .is_err());
    assert!(VerificationConfig::from_json(&json!("github")).is_err());
}

/// GitHub signs no timestamp: its view has no `tolerance_seconds` (docs/API.md §15), the
/// others' does; the stored form keeps it either way.
#[test]
fn the_view_shows_tolerance_only_for_schemes_with_a_timestamp() {
    let gh = VerificationConfig::new("github", "x", Some(true), Some(60)).expect("ok");
    assert_eq!(gh.view().tolerance_seconds, None);
    assert_eq!(
        serde_json::to_value(gh.view()).expect("json"),
        json!({"scheme": "github", "reject_unverified": true})
    );
    assert_eq!(
        VerificationConfig::from_stored(&gh.to_stored()).map(|c| c.tolerance_seconds),
        Some(60)
    );
    for (scheme, secret) in [
        ("stripe", "whsec_SeCrEt1234"),
        (
            "standard-webhooks",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        ),
    ] {
        let c = VerificationConfig::new(scheme, secret, None, Some(120)).expect(scheme);
        assert_eq!(
            serde_json::to_value(c.view()).expect("json"),
            json!({"scheme": scheme, "reject_unverified": false, "tolerance_seconds": 120})
        );
    }
}

fn any_config() -> impl Strategy<Value = VerificationConfig> {
    prop_oneof![
        Just(config("standard-webhooks", STD_SECRET)),
        Just(config("stripe", STRIPE_SECRET)),
        Just(config("github", GH_SECRET)),
    ]
}

proptest! {
    #[test]
    fn a_signature_computed_here_verifies(
        c in any_config(),
        body in proptest::collection::vec(any::<u8>(), 0..512),
        id in "[A-Za-z0-9_-]{1,40}",
        t in 1_000_000_000i64..4_000_000_000,
    ) {
        let headers = sign(&c, &id, t, &body);
        let pairs: Vec<(&str, &[u8])> = headers.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
        let v = verify(&c, &pairs, &body, t * 1000);
        prop_assert_eq!(v.reason, None);
    }

    #[test]
    fn a_body_changed_in_one_byte_never_verifies(
        c in any_config(),
        body in proptest::collection::vec(any::<u8>(), 1..512),
        at in any::<proptest::sample::Index>(),
        flip in 1u8..=255,
        t in 1_000_000_000i64..4_000_000_000,
    ) {
        let headers = sign(&c, "msg_1", t, &body);
        let pairs: Vec<(&str, &[u8])> = headers.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
        let mut changed = body.clone();
        let i = at.index(changed.len());
        changed[i] ^= flip;
        let v = verify(&c, &pairs, &changed, t * 1000);
        prop_assert_eq!(v.reason, Some(Reason::BadSignature));
    }
}
