use super::*;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

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

// --- The schemes of docs/API.md §22. Where the provider publishes a signed example, it is the
// test; where it publishes only the rule and a payload, the payload is signed independently with
// Python's `hmac` module (the command is beside each vector).

#[test]
fn slack_published_example_verifies() {
    // https://api.slack.com/authentication/verifying-requests-from-slack ("Validating a
    // request"): the signing secret, timestamp, slash-command body and signature of the page.
    let c = config("slack", "8f742231b10e8888abcd99yyyzzz85a5");
    let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    let headers = [
        ("X-Slack-Request-Timestamp", "1531420618"),
        (
            "X-Slack-Signature",
            "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
        ),
    ];
    let at = 1_531_420_618_000;
    let v = verify(&c, &hs(&headers), body, at);
    assert_eq!(v.reason, None);
    assert_eq!(v.delivery_id, None, "a slash command has no event_id");
    assert_eq!(sign(&c, "", 1_531_420_618, body)[0].1, headers[1].1);
    // A replay 301 s later, the signature in upper case, another encoding, another body.
    assert_eq!(
        verify(&c, &hs(&headers), body, at + 301_000).reason,
        Some(Reason::TimestampOutOfTolerance)
    );
    let upper = [
        headers[0],
        (
            "X-Slack-Signature",
            "V0=A2114D57B48EAC39B9AD189DD8316235A7B4A8D21A10BD27519666489C69B503",
        ),
    ];
    assert_eq!(
        verify(&c, &hs(&upper), body, at).reason,
        Some(Reason::BadSignature)
    );
    let b64 = [
        headers[0],
        (
            "X-Slack-Signature",
            "v0=oRFNV7SOrDm5rRidgxYjW0tKjSEaEL0nUZZmSJyblQM=",
        ),
    ];
    assert_eq!(
        verify(&c, &hs(&b64), body, at).reason,
        Some(Reason::BadSignature)
    );
    assert_eq!(
        verify(&c, &hs(&headers), b"token=x", at).reason,
        Some(Reason::BadSignature)
    );
    assert_eq!(
        verify(&c, &hs(&headers[1..]), body, at).reason,
        Some(Reason::MissingSignature)
    );
    // An Events API callback's `event_id` is its delivery id.
    let event =
        br#"{"type":"event_callback","event_id":"Ev08MFMKH6","event":{"type":"app_mention"}}"#;
    let signed = sign(&c, "", 1_531_420_618, event);
    let pairs: Vec<(&str, &[u8])> = signed.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
    assert_eq!(
        verify(&c, &pairs, event, at).delivery_id.as_deref(),
        Some("Ev08MFMKH6")
    );
}

#[test]
fn twilio_published_example_verifies_whatever_the_parameter_order() {
    // https://www.twilio.com/docs/usage/webhooks/webhooks-security ("Validating signatures from
    // Twilio"): auth token 12345, the URL and the five parameters of the page.
    let c = config("twilio", "12345");
    let url = "https://mycompany.com/myapp.php?foo=1&bar=2";
    let form = ("content-type", "application/x-www-form-urlencoded");
    let sig = ("X-Twilio-Signature", "0/KCTR6DLpKmkAf8muzZqo1nDgQ=");
    let check = |body: &[u8], url: Option<&str>, headers: &[(&str, &str)]| {
        verify_signed(
            &c,
            &Signed {
                headers: &hs(headers),
                body,
                url,
                now: 0,
            },
        )
        .reason
    };
    let body = b"CallSid=CA1234567890ABCDE&Caller=%2B12349013030&Digits=1234&From=%2B12349013030&To=%2B18005551212";
    assert_eq!(check(body, Some(url), &[form, sig]), None);
    // Reordered: Twilio's signature sorts the parameters.
    let reordered = b"To=%2B18005551212&Digits=1234&CallSid=CA1234567890ABCDE&From=%2B12349013030&Caller=%2B12349013030";
    assert_eq!(check(reordered, Some(url), &[form, sig]), None);
    // The port added, as a proxy may see it.
    assert_eq!(
        check(
            body,
            Some("https://mycompany.com:443/myapp.php?foo=1&bar=2"),
            &[form, sig]
        ),
        None
    );
    // Another value, another URL, no URL, the signature's base64 in hex, a repeated parameter.
    let changed = b"CallSid=CA1234567890ABCDE&Caller=%2B12349013030&Digits=1235&From=%2B12349013030&To=%2B18005551212";
    assert_eq!(
        check(changed, Some(url), &[form, sig]),
        Some(Reason::BadSignature)
    );
    assert_eq!(
        check(
            body,
            Some("https://mycompany.com/myapp.php?foo=1"),
            &[form, sig]
        ),
        Some(Reason::BadSignature)
    );
    assert_eq!(check(body, None, &[form, sig]), Some(Reason::BadSignature));
    let hexed = (
        "X-Twilio-Signature",
        "d3f28a4d1e832ea4a6901ff26fcd9aaa8d5c3a81",
    );
    assert_eq!(
        check(body, Some(url), &[form, hexed]),
        Some(Reason::BadSignature)
    );
    let repeated = [body.as_slice(), b"&Digits=1234"].concat();
    assert_eq!(
        check(&repeated, Some(url), &[form, sig]),
        None,
        "a repeated pair counts once, as twilio-python has it"
    );
    let other_repeat = [body.as_slice(), b"&Digits=9"].concat();
    assert_eq!(
        check(&other_repeat, Some(url), &[form, sig]),
        Some(Reason::BadSignature)
    );
    // Our signer agrees, and a repeated parameter signed both ways verifies.
    let signed = sign_for_url(&c, "idem-1", 0, &repeated, url);
    assert_ne!(signed[0].1, sig.1, "the repeated pair is signed");
    let pairs: Vec<(&str, &str)> = vec![
        form,
        ("x-twilio-signature", signed[0].1.as_str()),
        ("i-twilio-idempotency-token", "idem-1"),
    ];
    let v = verify_signed(
        &c,
        &Signed {
            headers: &hs(&pairs),
            body: &repeated,
            url: Some(url),
            now: 0,
        },
    );
    assert_eq!((v.reason, v.delivery_id.as_deref()), (None, Some("idem-1")));
    // A JSON body is signed through `bodySHA256` in the URL.
    let json_body = br#"{"a":1}"#;
    let json_url = format!(
        "https://a.example/x?bodySHA256={}",
        crate::domain::ids::sha256_hex(json_body)
    );
    let signed = sign_for_url(&c, "", 0, b"", &json_url);
    let pairs = [
        ("content-type", "application/json"),
        ("x-twilio-signature", signed[0].1.as_str()),
    ];
    assert_eq!(check(json_body, Some(&json_url), &pairs), None);
    assert_eq!(
        check(br#"{"a":2}"#, Some(&json_url), &pairs),
        Some(Reason::BadSignature)
    );
    // Without `bodySHA256`, a non-form body is signed by nothing: it does not verify.
    let signed = sign_for_url(&c, "", 0, b"", "https://a.example/x");
    let pairs = [
        ("content-type", "application/json"),
        ("x-twilio-signature", signed[0].1.as_str()),
    ];
    assert_eq!(
        check(json_body, Some("https://a.example/x"), &pairs),
        Some(Reason::BadSignature)
    );
}

#[test]
fn zoom_example_verifies_and_answers_its_validation() {
    // https://developers.zoom.us/docs/api/webhooks/#verify-webhook-events: the rule and a
    // `meeting.started` payload; Zoom publishes no signed vector. Signed with
    //   hmac.new(b"zoom_secret_token_example", b"v0:1626230691:" + body, hashlib.sha256)
    let c = config("zoom", "zoom_secret_token_example");
    let body = br#"{"event":"meeting.started","payload":{"account_id":"D8cJuqWVQ623CI4Q8yQK0Q","object":{"id":"1234567890","topic":"My Meeting"}},"event_ts":1626230691572}"#;
    let headers = [
        ("x-zm-request-timestamp", "1626230691"),
        (
            "x-zm-signature",
            "v0=4a953bb4110784aea33609b38e007ce7b8f31ffb7f0acba436285bf3348ec68d",
        ),
    ];
    let at = 1_626_230_691_000;
    assert_eq!(verify(&c, &hs(&headers), body, at).reason, None);
    assert_eq!(
        verify(&c, &hs(&headers), body, at - 301_000).reason,
        Some(Reason::TimestampOutOfTolerance)
    );
    // The validation's encryptedToken: hmac.new(secret, b"qgg8vlvZRS6UYooatFL8Aw", sha256).
    assert_eq!(
        zoom::encrypted_token("zoom_secret_token_example", "qgg8vlvZRS6UYooatFL8Aw"),
        "ab6193e5fc2172ba4a29511700f0cbf2aeabefa44064ef9bf89732e27aa58708"
    );
}

#[test]
fn shopify_example_verifies_with_its_webhook_id() {
    // https://shopify.dev/docs/apps/build/webhooks/subscribe/https ("Verify a webhook"): the rule,
    // no signed vector; an order payload of the page's shape signed with
    //   base64.b64encode(hmac.new(b"hush", body, hashlib.sha256).digest())
    let c = config("shopify", "hush");
    let body = br#"{"id":820982911946154508,"email":"jon@example.com","closed_at":null,"created_at":"2021-12-31T19:00:00-05:00"}"#;
    let headers = [
        (
            "X-Shopify-Hmac-Sha256",
            "YtEBZDUf1DnxBBXnjYqhU/4tnRIU7fXKvWchgelJDeU=",
        ),
        (
            "X-Shopify-Webhook-Id",
            "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
        ),
        ("X-Shopify-Topic", "orders/create"),
    ];
    let v = verify(&c, &hs(&headers), body, i64::MAX / 2);
    assert_eq!(v.reason, None, "no timestamp: any clock");
    assert_eq!(
        v.delivery_id.as_deref(),
        Some("b54557e4-bdd9-4b37-8a5f-bf7d70bcd043")
    );
    // The same MAC in hex is not Shopify's encoding.
    let hexed = [("X-Shopify-Hmac-Sha256", "62d101643..."), headers[1]];
    assert_eq!(
        verify(&c, &hs(&hexed), body, 0).reason,
        Some(Reason::BadSignature)
    );
    assert_eq!(
        verify(&c, &hs(&headers), b"{}", 0).reason,
        Some(Reason::BadSignature)
    );
}

#[test]
fn meta_example_verifies_and_needs_a_verify_token() {
    // https://developers.facebook.com/docs/graph-api/webhooks/getting-started ("Validating
    // payloads"): the rule, no signed vector; a WhatsApp payload signed with
    //   hmac.new(b"meta_app_secret", body, hashlib.sha256).hexdigest()
    let c = VerificationConfig::with_token("meta", "meta_app_secret", None, None, Some("my-token"))
        .expect("valid");
    let body = br#"{"object":"whatsapp_business_account","entry":[{"id":"0","changes":[{"field":"messages","value":{"messaging_product":"whatsapp"}}]}]}"#;
    let headers = [(
        "X-Hub-Signature-256",
        "sha256=2ec40cf1e1dc774e61ef10ec77feeb1b4e4ad9639cf8cd52177bd939b2c4fb2c",
    )];
    assert_eq!(verify(&c, &hs(&headers), body, 0).reason, None);
    assert_eq!(
        VerificationConfig::from_stored(&c.to_stored()),
        Some(c.clone())
    );
    assert!(!format!("{c:?}").contains("my-token"));
    assert_eq!(
        serde_json::to_value(c.view()).expect("json"),
        json!({"scheme": "meta", "reject_unverified": false})
    );
    assert!(
        VerificationConfig::new("meta", "s", None, None).is_err(),
        "no verify_token"
    );
    assert!(VerificationConfig::with_token("github", "s", None, None, Some("t")).is_err());
    assert!(VerificationConfig::with_token("meta", "s", None, None, Some("")).is_err());
    assert!(
        VerificationConfig::with_token("meta", "s", None, None, Some(&"t".repeat(257))).is_err()
    );
}

#[test]
fn linear_example_verifies_and_checks_its_timestamp() {
    // https://linear.app/developers/webhooks ("Securing webhooks"): the rule and an Issue
    // payload, no signed vector; signed with
    //   hmac.new(b"lin_wh_secret", body, hashlib.sha256).hexdigest()
    let c = config("linear", "lin_wh_secret");
    let body = br#"{"action":"create","type":"Issue","data":{"id":"2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9","title":"Bug"},"url":"https://linear.app/issue/LIN-1778","createdAt":"2020-10-29T14:37:43.219Z","webhookTimestamp":1676056940508}"#;
    let headers = [
        (
            "Linear-Signature",
            "2a3822efba2f3e1b9aa1bb95de4ed852f9f1a1549055ffcdf0ca7e7eb1b80d03",
        ),
        ("Linear-Delivery", "234d1a4e-b617-4388-90fe-adc3633d6b72"),
    ];
    let at = 1_676_056_940_508;
    let v = verify(&c, &hs(&headers), body, at);
    assert_eq!(v.reason, None);
    assert_eq!(
        v.delivery_id.as_deref(),
        Some("234d1a4e-b617-4388-90fe-adc3633d6b72")
    );
    assert_eq!(
        verify(&c, &hs(&headers), body, at + 301_000).reason,
        Some(Reason::TimestampOutOfTolerance)
    );
    // Signed but without a timestamp: not Linear's scheme.
    let bare = br#"{"type":"Issue"}"#;
    let signed = sign(&c, "d", 0, bare);
    let pairs: Vec<(&str, &[u8])> = signed.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
    assert_eq!(
        verify(&c, &pairs, bare, 0).reason,
        Some(Reason::BadSignature)
    );
}

#[test]
fn every_scheme_header_is_recorded() {
    for scheme in Scheme::ALL {
        for h in scheme.headers() {
            assert!(
                crate::domain::envelope::RECORDED_HEADERS.contains(h),
                "{} header {h} is not recorded",
                scheme.as_str()
            );
        }
    }
}

#[test]
fn providers_name_their_deliveries_only_with_their_headers() {
    let obj = |v: Value| match v {
        Value::Object(o) => o,
        _ => Map::new(),
    };
    let t = |h: &[(&str, &str)], b: Value| provider_event_type(h, Some(&obj(b)));
    assert_eq!(
        t(&[("X-GitHub-Event", "push")], json!({})).as_deref(),
        Some("github.push")
    );
    assert_eq!(
        t(&[("x-shopify-topic", "orders/create")], json!({})).as_deref(),
        Some("shopify.orders/create")
    );
    let slack = json!({"type": "event_callback", "event": {"type": "app_mention"}});
    assert_eq!(
        t(&[("x-slack-signature", "v0=00")], slack.clone()).as_deref(),
        Some("slack.app_mention")
    );
    assert_eq!(t(&[], slack), None, "without Slack's header");
    assert_eq!(
        t(
            &[("x-zm-request-timestamp", "1")],
            json!({"event": "meeting.started"})
        )
        .as_deref(),
        Some("zoom.meeting.started")
    );
    assert_eq!(
        t(&[("linear-delivery", "d")], json!({"type": "Issue"})).as_deref(),
        Some("linear.Issue")
    );
    // Names a type pattern could not name are not used.
    assert_eq!(t(&[("x-github-event", "a b")], json!({})), None);
    assert_eq!(t(&[("x-github-event", &"x".repeat(101))], json!({})), None);
    assert_eq!(
        t(
            &[("x-github-event", "push"), ("x-github-event", "pull")],
            json!({})
        ),
        None
    );
    assert_eq!(
        t(&[("x-zm-signature", "v0=1")], json!({"event": "a..b"})),
        None
    );
}

fn new_config() -> impl Strategy<Value = VerificationConfig> {
    prop_oneof![
        Just(config("slack", "8f742231b10e8888abcd99yyyzzz85a5")),
        Just(config("zoom", "zoom_secret")),
        Just(config("shopify", "hush")),
        Just(
            VerificationConfig::with_token("meta", "app", None, None, Some("tok")).expect("valid")
        ),
    ]
}

proptest! {
    #[test]
    fn the_new_schemes_verify_what_they_sign_and_nothing_changed(
        c in new_config(),
        body in proptest::collection::vec(any::<u8>(), 1..512),
        at in any::<proptest::sample::Index>(),
        flip in 1u8..=255,
        t in 1_000_000_000i64..4_000_000_000,
    ) {
        let headers = sign(&c, "d-1", t, &body);
        let pairs: Vec<(&str, &[u8])> = headers.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
        prop_assert_eq!(verify(&c, &pairs, &body, t * 1000).reason, None);
        let mut changed = body.clone();
        let i = at.index(changed.len());
        changed[i] ^= flip;
        prop_assert_eq!(verify(&c, &pairs, &changed, t * 1000).reason, Some(Reason::BadSignature));
    }

    #[test]
    fn twilio_verifies_any_form_it_signs(
        params in proptest::collection::vec(("[A-Za-z]{1,8}", "[ -~]{0,12}"), 0..12),
        t in 0i64..10,
    ) {
        let c = config("twilio", "auth-token");
        let body = form_urlencoded::Serializer::new(String::new()).extend_pairs(&params).finish();
        let url = "https://a.example/api/v1/inbox/x/y";
        let signed = sign_for_url(&c, "", t, body.as_bytes(), url);
        let headers = [("content-type", "application/x-www-form-urlencoded"), ("x-twilio-signature", signed[0].1.as_str())];
        let v = verify_signed(&c, &Signed { headers: &hs(&headers), body: body.as_bytes(), url: Some(url), now: 0 });
        prop_assert_eq!(v.reason, None);
    }
}

#[test]
fn handshakes_are_answered_refused_or_not_handshakes() {
    let d = |body: &'static [u8], headers: &'static [(&'static str, &'static [u8])]| Signed {
        headers,
        body,
        url: None,
        now: 1_531_420_618_000,
    };
    // Slack: extra keys are ignored; the challenge comes back as JSON.
    let slack = br#"{"token":"t","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification","extra":1}"#;
    assert_eq!(
        handshake(None, &d(slack, &[]), None),
        Some(Ok(Handshake::Json(
            json!({"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"})
        )))
    );
    // At an address that verifies Slack, an unsigned one is refused.
    let c = config("slack", "8f742231b10e8888abcd99yyyzzz85a5");
    assert_eq!(
        handshake(None, &d(slack, &[]), Some(&c)),
        Some(Err(HandshakeRefusal::Unverified(Reason::MissingSignature)))
    );
    // Too long, not a string.
    let long = format!(
        r#"{{"type":"url_verification","challenge":"{}"}}"#,
        "a".repeat(1025)
    );
    let long: &'static [u8] = Box::leak(long.into_bytes().into_boxed_slice());
    assert!(matches!(
        handshake(None, &d(long, &[]), None),
        Some(Err(HandshakeRefusal::Invalid(_)))
    ));
    assert!(matches!(
        handshake(
            None,
            &d(br#"{"type":"url_verification","challenge":5}"#, &[]),
            None
        ),
        Some(Err(HandshakeRefusal::Invalid(_)))
    ));
    // Graph: the token as text, from the query (decoded), bounded, once.
    assert_eq!(
        handshake(
            Some("validationToken=Validation%3A%20Testing%3Cb%3E"),
            &d(b"", &[]),
            None
        ),
        Some(Ok(Handshake::Text("Validation: Testing<b>".into())))
    );
    assert!(matches!(
        handshake(
            Some("validationToken=a&validationToken=b"),
            &d(b"", &[]),
            None
        ),
        Some(Err(HandshakeRefusal::Invalid(_)))
    ));
    let q = format!("validationToken={}", "a".repeat(1025));
    assert!(matches!(
        handshake(Some(&q), &d(b"", &[]), None),
        Some(Err(HandshakeRefusal::Invalid(_)))
    ));
    // Zoom: needs the address's Zoom secret.
    let zoom_body = br#"{"event":"endpoint.url_validation","payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1}"#;
    assert!(matches!(
        handshake(None, &d(zoom_body, &[]), None),
        Some(Err(HandshakeRefusal::Invalid(_)))
    ));
    let z = config("zoom", "zoom_secret_token_example");
    let signed = sign(&z, "", 1_531_420_618, zoom_body);
    let pairs: Vec<(&str, &[u8])> = signed.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
    let zd = Signed {
        headers: &pairs,
        body: zoom_body,
        url: None,
        now: 1_531_420_618_000,
    };
    assert_eq!(
        handshake(None, &zd, Some(&z)),
        Some(Ok(Handshake::Json(json!({
            "plainToken": "qgg8vlvZRS6UYooatFL8Aw",
            "encryptedToken": "ab6193e5fc2172ba4a29511700f0cbf2aeabefa44064ef9bf89732e27aa58708"
        }))))
    );
    assert_eq!(
        handshake(None, &d(zoom_body, &[]), Some(&z)),
        Some(Err(HandshakeRefusal::Unverified(Reason::MissingSignature)))
    );
    // Anything else is a delivery.
    assert_eq!(
        handshake(None, &d(br#"{"type":"event_callback"}"#, &[]), None),
        None
    );
    assert_eq!(handshake(Some("a=1"), &d(b"hello", &[]), None), None);
}

#[test]
fn meta_subscription_answers_only_its_token() {
    let c =
        VerificationConfig::with_token("meta", "app", None, None, Some("my-token")).expect("valid");
    let q = "hub.mode=subscribe&hub.verify_token=my-token&hub.challenge=1158201444";
    assert_eq!(
        meta_subscription(Some(q), Some(&c)),
        Ok(Handshake::Text("1158201444".into()))
    );
    let wrong = "hub.mode=subscribe&hub.verify_token=my-tokem&hub.challenge=1158201444";
    assert_eq!(
        meta_subscription(Some(wrong), Some(&c)),
        Err(HandshakeRefusal::Forbidden)
    );
    // Not a Meta address, no token: the same 403.
    assert_eq!(
        meta_subscription(Some(q), Some(&config("github", "x"))),
        Err(HandshakeRefusal::Forbidden)
    );
    assert_eq!(
        meta_subscription(Some(q), None),
        Err(HandshakeRefusal::Forbidden)
    );
    let no_token = "hub.mode=subscribe&hub.challenge=1";
    assert_eq!(
        meta_subscription(Some(no_token), Some(&c)),
        Err(HandshakeRefusal::Forbidden)
    );
    for bad in [
        "",
        "hub.mode=unsubscribe&hub.verify_token=my-token&hub.challenge=1",
        "hub.mode=subscribe&hub.verify_token=my-token",
        "hub.mode=subscribe&hub.mode=subscribe&hub.verify_token=my-token&hub.challenge=1",
    ] {
        assert!(
            matches!(
                meta_subscription(Some(bad), Some(&c)),
                Err(HandshakeRefusal::Invalid(_))
            ),
            "{bad}"
        );
    }
    let long = format!(
        "hub.mode=subscribe&hub.verify_token=my-token&hub.challenge={}",
        "9".repeat(1025)
    );
    assert!(matches!(
        meta_subscription(Some(&long), Some(&c)),
        Err(HandshakeRefusal::Invalid(_))
    ));
    // HTML and CRLF come back as given: the caller sends them as text/plain only.
    let html = "hub.mode=subscribe&hub.verify_token=my-token&hub.challenge=%3Cscript%3E%0D%0AX%3A1";
    assert_eq!(
        meta_subscription(Some(html), Some(&c)),
        Ok(Handshake::Text("<script>\r\nX:1".into()))
    );
}
