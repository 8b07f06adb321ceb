//! Tests of the SES door's pure parts: the trusted zone's verdicts, the envelope, the message id
//! and the S3 event notification.

use super::*;
use proptest::prelude::*;

const DOMAIN: &str = "inbox.example";

/// SES's block, as SES prepends it to a message it stores (modelled on the samples of the
/// SES developer guide): one recipient, so the `for` clause is there.
const SES_TOP: &str = "Return-Path: <bounces+srs=ab12=cd@mail.example.com>
Received: from mail-wr1-f41.google.com (mail-wr1-f41.google.com [209.85.221.41])
 by inbound-smtp.eu-west-1.amazonaws.com with SMTP id 8hj0vq1cu4oj3bh1a2eqm4jgol0rphe56bsjs0o1
 for ada+orders@inbox.example;
 Fri, 11 Sep 2015 20:32:33 +0000 (UTC)
X-SES-Spam-Verdict: PASS
X-SES-Virus-Verdict: PASS
Received-SPF: pass (spfCheck: domain of mail.example.com designates 209.85.221.41 as permitted sender) client-ip=209.85.221.41; envelope-from=bounces+srs=ab12=cd@mail.example.com; helo=mail-wr1-f41.google.com;
Authentication-Results: amazonses.com;
 spf=pass (spfCheck: domain of mail.example.com designates 209.85.221.41 as permitted sender) smtp.mailfrom=bounces+srs=ab12=cd@mail.example.com;
 dkim=pass header.i=@example.com;
 dmarc=pass header.from=example.com;
X-SES-RECEIPT: AEFBQUFBQUFBQUFFQzRjcU1mRWdUNUZGMFhQSzNoN2tHdHRPSndCTVRuUk1BNUFCSGQ=
X-SES-DKIM-SIGNATURE: a=rsa-sha256; q=dns/txt; b=Kw3/yK5zmTHpQ8ifnvuEdAQ2Vm0=; c=relaxed/simple; s=ihchhvubuqgjsxyuhssfvqohv7z3u4hn; d=amazonses.com; t=1442003553; v=1; bh=frcCV1k9oG9oKj3dpUqdJg1PxRT2RSN/XKdLCPjaYaY=; h=From:To:Cc:Bcc:Subject:Date:Message-ID:MIME-Version:Content-Type:X-SES-RECEIPT;
";

/// The sender's own header fields and body, after SES's block. It forges SES's verdicts
/// (all `pass`) and a `Return-Path`, below its own `Received`.
const SENDER_PART: &str = "Received: by mail-wr1-f41.google.com with SMTP id q19so83216137wrb.1
        for <ada+orders@inbox.example>; Fri, 11 Sep 2015 13:32:32 -0700 (PDT)
Authentication-Results: amazonses.com; spf=pass smtp.mailfrom=ceo@example.com;
 dkim=pass header.i=@example.com; dmarc=pass header.from=example.com
Received-SPF: pass (forged) client-ip=192.0.2.1;
Return-Path: <forged@evil.example>
DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=example.com; s=sel; h=from:to:subject; bh=47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=; b=dGVzdA==
MIME-Version: 1.0
From: Grace <grace@example.com>
Date: Fri, 11 Sep 2015 13:32:32 -0700
Message-ID: <CAEddgb2L3m=xyz@mail.example.com>
Subject: Your order
To: Ada <ada+orders@inbox.example>, \"Bob, B.\" <bob@other.example>
Cc: lin@inbox.example
Content-Type: text/plain; charset=UTF-8

To: body@inbox.example

Hello Ada.
";

fn crlf(text: &str) -> Vec<u8> {
    text.replace('\n', "\r\n").into_bytes()
}

fn message(ses_top: &str, sender_part: &str) -> Vec<u8> {
    crlf(&format!("{ses_top}{sender_part}"))
}

fn auth(spf: AuthVerdict, dkim: AuthVerdict, dmarc: AuthVerdict) -> AuthResults {
    AuthResults { spf, dkim, dmarc }
}

/// SES's block with another `Authentication-Results` (and `Received-SPF`) value.
fn ses_top_with(auth_results: &str, received_spf: &str) -> String {
    let mut top = String::new();
    for line in SES_TOP.lines() {
        if line.starts_with(' ') && top.ends_with("AUTH\n") {
            continue; // the genuine field's continuation lines
        }
        if line.starts_with("Authentication-Results:") {
            top.push_str("AUTH\n");
            continue;
        }
        if line.starts_with("Received-SPF:") {
            if !received_spf.is_empty() {
                top.push_str(&format!("Received-SPF: {received_spf}\n"));
            }
            continue;
        }
        top.push_str(line);
        top.push('\n');
    }
    let replacement = if auth_results.is_empty() {
        String::new()
    } else {
        format!("Authentication-Results: {auth_results}\n")
    };
    top.replace("AUTH\n", &replacement)
}

use AuthVerdict::{Fail, Neutral, None as NoVerdict, Pass, Permerror, Softfail, Temperror};

#[test]
fn auth_is_read_from_ses_block() {
    let raw = message(SES_TOP, SENDER_PART);
    assert_eq!(ses_auth(&raw), auth(Pass, Pass, Pass));
    // The same with bare LF line endings.
    let lf = format!("{SES_TOP}{SENDER_PART}");
    assert_eq!(ses_auth(lf.as_bytes()), auth(Pass, Pass, Pass));
}

#[test]
fn forged_lower_verdicts_are_ignored() {
    let top = ses_top_with(
        "amazonses.com; spf=softfail (spfCheck: transitioning) smtp.mailfrom=ceo@example.com; dkim=none; dmarc=fail header.from=example.com;",
        "softfail (spfCheck: transitioning) client-ip=192.0.2.9;",
    );
    assert_eq!(
        ses_auth(&message(&top, SENDER_PART)),
        auth(Softfail, NoVerdict, Fail)
    );
    // Without SES's own field, the forged one below the sender's `Received` still does
    // not count: all `none`, the zone's `Received-SPF` notwithstanding.
    let top = ses_top_with("", "pass (spfCheck: ok) client-ip=192.0.2.9;");
    assert_eq!(
        ses_auth(&message(&top, SENDER_PART)),
        AuthResults::default()
    );
    // A forged SES field right below SES's `Received` but after a foreign one is out too.
    let raw = crlf(
        "Received: from a by inbound-smtp.us-east-1.amazonaws.com with SMTP id x; Fri, 11 Sep 2015 20:32:33 +0000
Received: from evil by mx.evil.example; Fri, 11 Sep 2015 20:32:30 +0000
Authentication-Results: amazonses.com; spf=pass; dkim=pass; dmarc=pass
From: x@evil.example

hi
",
    );
    assert_eq!(ses_auth(&raw), AuthResults::default());
}

#[test]
fn only_the_first_ses_field_counts() {
    let top = ses_top_with("amazonses.com; spf=fail; dkim=fail; dmarc=fail", "");
    let top = top.replace(
        "X-SES-RECEIPT:",
        "Authentication-Results: amazonses.com; spf=pass; dkim=pass; dmarc=pass\nX-SES-RECEIPT:",
    );
    assert_eq!(
        ses_auth(&message(&top, SENDER_PART)),
        auth(Fail, Fail, Fail)
    );
}

#[test]
fn other_authserv_ids_are_ignored() {
    let top = ses_top_with("mx.google.com; spf=pass; dkim=pass; dmarc=pass", "");
    assert_eq!(
        ses_auth(&message(&top, SENDER_PART)),
        AuthResults::default()
    );
    let top = ses_top_with("amazonses.com.evil.example; spf=pass", "");
    assert_eq!(
        ses_auth(&message(&top, SENDER_PART)),
        AuthResults::default()
    );
    // A foreign field first, then SES's: SES's counts.
    let top = ses_top_with("mx.evil.example; spf=pass; dkim=pass; dmarc=pass", "").replace(
        "X-SES-RECEIPT:",
        "Authentication-Results: amazonses.com; spf=neutral; dkim=temperror; dmarc=permerror\nX-SES-RECEIPT:",
    );
    assert_eq!(
        ses_auth(&message(&top, SENDER_PART)),
        auth(Neutral, Temperror, Permerror)
    );
}

#[test]
fn ses_newer_layout_with_spf_properties_as_segments() {
    // Recent SES messages put the SPF check's properties in `;`-separated segments.
    let top = ses_top_with(
        "amazonses.com;\n spf=pass (spfCheck: domain of _spf.google.com designates 209.85.208.44 as permitted sender) client-ip=209.85.208.44; envelope-from=x@gmail.com; helo=mail-ed1-f44.google.com;\n dkim=pass header.i=@gmail.com;\n dmarc=pass header.from=gmail.com;",
        "",
    );
    assert_eq!(
        ses_auth(&message(&top, SENDER_PART)),
        auth(Pass, Pass, Pass)
    );
}

#[test]
fn spf_falls_back_to_received_spf() {
    let top = ses_top_with(
        "amazonses.com; dkim=pass header.i=@example.com; dmarc=pass header.from=example.com;",
        "neutral (spfCheck: 192.0.2.1 is neither permitted nor denied) client-ip=192.0.2.1;",
    );
    assert_eq!(
        ses_auth(&message(&top, SENDER_PART)),
        auth(Neutral, Pass, Pass)
    );
    // The field's own spf wins.
    let top = ses_top_with(
        "amazonses.com; spf=fail; dkim=none",
        "pass client-ip=192.0.2.1;",
    );
    assert_eq!(
        ses_auth(&message(&top, SENDER_PART)),
        auth(Fail, NoVerdict, NoVerdict)
    );
    // No spf anywhere in the zone (the sender's `Received-SPF` is below it).
    let top = ses_top_with("amazonses.com; dkim=pass", "");
    assert_eq!(
        ses_auth(&message(&top, SENDER_PART)),
        auth(NoVerdict, Pass, NoVerdict)
    );
}

#[test]
fn dkim_passes_when_any_signature_does() {
    let cases = [
        (
            "dkim=fail header.i=@a.example; dkim=pass header.i=@b.example",
            Pass,
        ),
        (
            "dkim=temperror header.i=@a.example; dkim=fail header.i=@b.example",
            Temperror,
        ),
        ("dkim=neutral; dkim=policy", Neutral),
        ("dkim=policy (key too short)", Fail),
    ];
    for (dkim, want) in cases {
        let top = ses_top_with(&format!("amazonses.com; spf=pass; {dkim}"), "");
        assert_eq!(ses_auth(&message(&top, SENDER_PART)).dkim, want, "{dkim}");
    }
}

#[test]
fn results_map_to_rfc_8601_names() {
    let cases = [
        ("pass", Pass),
        ("PASS", Pass),
        ("fail", Fail),
        ("hardfail", Fail),
        ("policy", Fail),
        ("softfail", Softfail),
        ("neutral", Neutral),
        ("none", NoVerdict),
        ("temperror", Temperror),
        ("permerror", Permerror),
        ("error", NoVerdict),
        ("bogus", NoVerdict),
        ("", NoVerdict),
    ];
    for (result, want) in cases {
        let top = ses_top_with(&format!("amazonses.com; dmarc={result} header.from=x"), "");
        assert_eq!(
            ses_auth(&message(&top, SENDER_PART)).dmarc,
            want,
            "{result:?}"
        );
    }
}

#[test]
fn rfc_8601_syntax() {
    let cases = [
        // A version after the authserv-id; methods with versions; odd case and spacing.
        (
            "amazonses.com 1; SPF/2 = Pass smtp.mailfrom=a@b; DKIM=fail; DMARC = none",
            auth(Pass, Fail, NoVerdict),
        ),
        // A quoted authserv-id; comments that look like results, with `;` inside.
        (
            "\"amazonses.com\"; spf=fail (not spf=pass; really) smtp.mailfrom=a@b; dkim=pass (x (nested) y)",
            auth(Fail, Pass, NoVerdict),
        ),
        // A quoted reason with `;` and `(` inside.
        (
            "amazonses.com; dkim=fail reason=\"bad; (sig\" header.d=x; dmarc=pass",
            auth(NoVerdict, Fail, Pass),
        ),
        // The no-result form.
        ("amazonses.com; none", AuthResults::default()),
        // A comment before the authserv-id.
        ("(SES) amazonses.com; spf=softfail", auth(Softfail, NoVerdict, NoVerdict)),
    ];
    for (value, want) in cases {
        let top = ses_top_with(value, "");
        assert_eq!(ses_auth(&message(&top, SENDER_PART)), want, "{value}");
    }
}

#[test]
fn no_headers_no_verdicts() {
    for raw in [
        &b""[..],
        b"\r\n\r\nAuthentication-Results: amazonses.com; spf=pass",
        b"garbage",
    ] {
        assert_eq!(ses_auth(raw), AuthResults::default());
        assert_eq!(ses_envelope(raw, DOMAIN), Envelope::default());
    }
}

#[test]
fn envelope_from_ses_block() {
    let raw = message(SES_TOP, SENDER_PART);
    assert_eq!(
        ses_envelope(&raw, DOMAIN),
        Envelope {
            mail_from: "bounces+srs=ab12=cd@mail.example.com".into(),
            rcpt_to: vec!["ada+orders@inbox.example".into()],
        }
    );
    // The domain matches case-insensitively; the address is kept as SES wrote it.
    let top = SES_TOP.replace("for ada+orders@inbox.example;", "for <Ada@INBOX.Example>;");
    assert_eq!(
        ses_envelope(&message(&top, SENDER_PART), "Inbox.EXAMPLE").rcpt_to,
        vec!["Ada@INBOX.Example".to_owned()]
    );
}

#[test]
fn null_or_missing_return_path_is_empty() {
    let top = SES_TOP.replace("<bounces+srs=ab12=cd@mail.example.com>", "<>");
    assert_eq!(
        ses_envelope(&message(&top, SENDER_PART), DOMAIN).mail_from,
        ""
    );
    // Without SES's, the sender's own (below its `Received`) is not taken.
    let top = SES_TOP.replace("Return-Path: <bounces+srs=ab12=cd@mail.example.com>\n", "");
    let envelope = ses_envelope(&message(&top, SENDER_PART), DOMAIN);
    assert_eq!(envelope.mail_from, "");
    assert_eq!(
        envelope.rcpt_to,
        vec!["ada+orders@inbox.example".to_owned()]
    );
}

#[test]
fn several_recipients_come_from_the_address_fields() {
    // SES leaves the `for` clause out when a message has several recipients.
    let top = SES_TOP.replace(" for ada+orders@inbox.example;\n", "");
    let sender = "Received: by mx.example.com with SMTP id q19
X-Original-To: Lin@Inbox.Example
Delivered-To: grace+x@INBOX.example
From: Grace <grace@example.com>
To: =?UTF-8?B?QWTDoQ==?= <ada@inbox.example>, \"Bob, B.\" <bob@other.example>,
 team: carol@inbox.example, dan@elsewhere.example;
Cc: ADA@Inbox.Example, grace+x@inbox.example, lin@inbox.example
Subject: hi

To: body@inbox.example
";
    let envelope = ses_envelope(&message(&top, sender), DOMAIN);
    assert_eq!(envelope.mail_from, "bounces+srs=ab12=cd@mail.example.com");
    assert_eq!(
        envelope.rcpt_to,
        vec![
            "Lin@Inbox.Example",
            "grace+x@INBOX.example",
            "ada@inbox.example",
            "carol@inbox.example",
        ]
    );
}

#[test]
fn for_clause_of_another_domain_or_hop_is_not_taken() {
    // Another domain: the address fields decide.
    let top = SES_TOP.replace("for ada+orders@inbox.example;", "for ada@other.example;");
    assert_eq!(
        ses_envelope(&message(&top, SENDER_PART), DOMAIN).rcpt_to,
        vec!["ada+orders@inbox.example", "lin@inbox.example"]
    );
    // A top `Received` that is not SES's: its `for` clause is the sender's claim.
    let raw = crlf(
        "Received: from evil by mx.evil.example with SMTP id 1 for <boss@inbox.example>; Fri, 11 Sep 2015 20:32:30 +0000
To: ada@inbox.example

hi
",
    );
    assert_eq!(
        ses_envelope(&raw, DOMAIN).rcpt_to,
        vec!["ada@inbox.example"]
    );
    // A host that merely contains amazonaws.com.
    let top = SES_TOP.replace(
        "by inbound-smtp.eu-west-1.amazonaws.com",
        "by inbound-smtp.eu-west-1.amazonaws.com.evil.example",
    );
    assert_eq!(
        ses_envelope(&message(&top, SENDER_PART), DOMAIN).rcpt_to,
        vec!["ada+orders@inbox.example", "lin@inbox.example"]
    );
}

#[test]
fn header_recipients_are_capped() {
    let top = SES_TOP.replace(" for ada+orders@inbox.example;\n", "");
    let to: Vec<String> = (0..150).map(|i| format!("a{i}@inbox.example")).collect();
    let sender = format!("To: {}\nSubject: many\n\nhi\n", to.join(",\n "));
    let rcpt_to = ses_envelope(&message(&top, &sender), DOMAIN).rcpt_to;
    assert_eq!(rcpt_to.len(), MAX_HEADER_RECIPIENTS);
    assert_eq!(rcpt_to, to.get(..MAX_HEADER_RECIPIENTS).unwrap_or_default());
}

#[test]
fn only_the_bounded_header_block_is_read() {
    // SES's verdicts after 2,000 fields (all within the zone) are not read; at the 2,000th
    // they are.
    let received = "Received: from a by inbound-smtp.us-east-1.amazonaws.com with SMTP id x for ada@inbox.example; Fri, 11 Sep 2015 20:32:33 +0000\n";
    let auth_results = "Authentication-Results: amazonses.com; spf=pass; dkim=pass; dmarc=pass\n";
    for (pad, want) in [
        (MAX_HEADER_FIELDS - 2, auth(Pass, Pass, Pass)),
        (MAX_HEADER_FIELDS - 1, AuthResults::default()),
    ] {
        let raw = format!(
            "{received}{}{auth_results}\nbody\n",
            "X-Pad: 1\n".repeat(pad)
        );
        assert_eq!(ses_auth(raw.as_bytes()), want, "{pad}");
    }
    // Past 256 KiB of header block, nothing more is read.
    let long = format!("X-Long: {}\n", "a".repeat(MAX_HEADER_BYTES));
    let raw = format!("{received}{long}To: bob@inbox.example\n\nhi\n");
    let envelope = ses_envelope(raw.as_bytes(), DOMAIN);
    assert_eq!(envelope.rcpt_to, vec!["ada@inbox.example"]);
    let raw = format!("{long}To: bob@inbox.example\n\nhi\n");
    assert!(ses_envelope(raw.as_bytes(), DOMAIN).rcpt_to.is_empty());
    // A message that is only header fields, without a final line break.
    let raw = "Received: from a by inbound-smtp.us-east-1.amazonaws.com; x\nTo: bob@inbox.example";
    assert_eq!(
        ses_envelope(raw.as_bytes(), DOMAIN).rcpt_to,
        vec!["bob@inbox.example"]
    );
}

#[test]
fn header_block_bounds() {
    assert_eq!(
        header_block(b"A: 1\r\nB: 2\r\n\r\nC: 3\r\n"),
        b"A: 1\r\nB: 2\r\n"
    );
    assert_eq!(header_block(b"A: 1\n folded\nB: 2"), b"A: 1\n folded\nB: 2");
    assert_eq!(header_block(b"\nA: 1\n"), b"");
    let many = "F: x\n".repeat(MAX_HEADER_FIELDS + 5);
    assert_eq!(header_block(many.as_bytes()).len(), 5 * MAX_HEADER_FIELDS);
    let big = format!("A: 1\nB: {}\n", "b".repeat(MAX_HEADER_BYTES));
    assert_eq!(header_block(big.as_bytes()), b"A: 1\n");
}

#[test]
fn received_clauses() {
    let hop = received(
        "from mail-wr1-f41.google.com (mail-wr1-f41.google.com [209.85.221.41])  by inbound-smtp.eu-west-1.amazonaws.com with SMTP id 8hj0v  for ada+orders@inbox.example;  Fri, 11 Sep 2015 20:32:33 +0000 (UTC)",
    );
    assert_eq!(
        hop,
        Hop {
            by_ses: true,
            for_addr: Some("ada+orders@inbox.example".into())
        }
    );
    // A `by`/`for` inside a comment is no clause.
    let hop = received("from x (by inbound-smtp.us-east-1.amazonaws.com for a@b) by mx.example; d");
    assert_eq!(hop, Hop::default());
    let hop = received("from x BY Inbound-SMTP.us-east-1.AmazonAWS.com. FOR <a@b>; d");
    assert!(hop.by_ses);
    assert_eq!(hop.for_addr.as_deref(), Some("a@b"));
}

const TEST_EVENT: &str = r#"{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2026-01-05T10:00:00.000Z","Bucket":"agentaddress-email","RequestId":"5582815E1AEA5ADF","HostId":"8cLeGAmw098X5cv4Zkwcmo8vvZa3eH3eKxsPzbB9wrR+YstdA6Knx4Ip8EXAMPLE"}"#;

fn record(event_name: &str, key: &str, size: &str) -> String {
    format!(
        r#"{{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"eu-west-1","eventTime":"2026-01-05T10:00:01.123Z","eventName":"{event_name}","userIdentity":{{"principalId":"AWS:AROAEXAMPLE"}},"requestParameters":{{"sourceIPAddress":"10.0.0.1"}},"responseElements":{{"x-amz-request-id":"C3D13FE58DE4C810","x-amz-id-2":"FMyUVURIY8/IgAtTv8xRjskZQpcIZ9KG4V5Wp6S7S/JRWeUWerMUE5JgHvANOjpD"}},"s3":{{"s3SchemaVersion":"1.0","configurationId":"inbound","bucket":{{"name":"agentaddress-email","ownerIdentity":{{"principalId":"A3NL1KOZZKExample"}},"arn":"arn:aws:s3:::agentaddress-email"}},"object":{{"key":"{key}"{size},"eTag":"d41d8cd98f00b204e9800998ecf8427e","sequencer":"0055AED6DCD90281E5"}}}}}}"#
    )
}

fn records(records: &[String]) -> String {
    format!(r#"{{"Records":[{}]}}"#, records.join(","))
}

fn object(key: &str, size: Option<u64>) -> S3Object {
    S3Object {
        bucket: "agentaddress-email".into(),
        key: key.into(),
        size,
    }
}

#[test]
fn test_event_is_recognised() {
    assert_eq!(s3_notification(TEST_EVENT), Ok(S3Notification::Test));
    assert_eq!(
        s3_notification(r#"{"Event":"s3:ObjectCreated:Put"}"#),
        Err(SesError::NotS3)
    );
    assert_eq!(s3_notification(r#"{"foo":1}"#), Err(SesError::NotS3));
}

#[test]
fn created_objects_are_listed_with_decoded_keys() {
    let body = records(&[
        record("ObjectCreated:Put", "inbound/abc%2Bdef", r#","size":123"#),
        record(
            "ObjectCreated:CompleteMultipartUpload",
            "inbound/a+b%20c",
            "",
        ),
        record("ObjectCreated:Copy", "inbound/caf%C3%A9", r#","size":0"#),
    ]);
    assert_eq!(
        s3_notification(&body),
        Ok(S3Notification::Objects(vec![
            object("inbound/abc+def", Some(123)),
            object("inbound/a b c", None),
            object("inbound/café", Some(0)),
        ]))
    );
}

#[test]
fn other_events_are_errors() {
    let body = records(&[record("ObjectRemoved:Delete", "inbound/x", "")]);
    assert_eq!(
        s3_notification(&body),
        Err(SesError::UnexpectedEvent("ObjectRemoved:Delete".into()))
    );
    let body = records(&[
        record("ObjectCreated:Put", "inbound/x", ""),
        record("s3:ReducedRedundancyLostObject", "inbound/y", ""),
    ]);
    assert!(matches!(
        s3_notification(&body),
        Err(SesError::UnexpectedEvent(_))
    ));
    let long = "x".repeat(500);
    let body = records(&[record(&long, "inbound/x", "")]);
    let Err(SesError::UnexpectedEvent(shown)) = s3_notification(&body) else {
        panic!("expected UnexpectedEvent");
    };
    assert_eq!(shown.len(), 64);
}

#[test]
fn notification_bounds() {
    assert_eq!(
        s3_notification(r#"{"Records":[]}"#),
        Err(SesError::NoRecords)
    );
    let many: Vec<String> = (0..=MAX_NOTIFICATION_RECORDS)
        .map(|i| record("ObjectCreated:Put", &format!("inbound/m{i}"), ""))
        .collect();
    assert_eq!(
        s3_notification(&records(&many)),
        Err(SesError::TooManyRecords {
            count: MAX_NOTIFICATION_RECORDS + 1,
            limit: MAX_NOTIFICATION_RECORDS
        })
    );
    let at_limit = many.get(..MAX_NOTIFICATION_RECORDS).unwrap_or_default();
    let Ok(S3Notification::Objects(objects)) = s3_notification(&records(at_limit)) else {
        panic!("100 records are fine");
    };
    assert_eq!(objects.len(), MAX_NOTIFICATION_RECORDS);
    let huge = format!(
        r#"{{"Records":[],"pad":"{}"}}"#,
        "x".repeat(MAX_NOTIFICATION_BYTES)
    );
    assert_eq!(
        s3_notification(&huge),
        Err(SesError::TooLarge {
            size: huge.len(),
            limit: MAX_NOTIFICATION_BYTES
        })
    );
}

#[test]
fn malformed_notifications_are_errors() {
    let malformed = [
        "",
        "not json",
        "[]",
        r#"{"Records":{}}"#,
        r#"{"Records":[{"eventName":"ObjectCreated:Put"}]}"#,
        r#"{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"k","size":-1}}}]}"#,
        r#"{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"k","size":"12"}}}]}"#,
        r#"{"Records":[{"eventName":"ObjectCreated:Put","eventName":"ObjectRemoved:Delete","s3":{"bucket":{"name":"b"},"object":{"key":"k"}}}]}"#,
    ];
    for body in malformed {
        assert!(
            matches!(s3_notification(body), Err(SesError::Malformed(_))),
            "{body}"
        );
    }
    // Deep nesting: past serde_json's recursion limit where a value is parsed, skipped
    // (iteratively, no stack) where it is ignored.
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    assert!(matches!(
        s3_notification(&format!(r#"{{"Records":{deep}}}"#)),
        Err(SesError::Malformed(_))
    ));
    let deep_map = format!("{}1{}", r#"{"a":"#.repeat(10_000), "}".repeat(10_000));
    assert!(matches!(
        s3_notification(&format!(r#"{{"Records":[{{"eventName":{deep_map}}}]}}"#)),
        Err(SesError::Malformed(_))
    ));
    assert_eq!(
        s3_notification(&format!(r#"{{"Records":[],"x":{deep}}}"#)),
        Err(SesError::NoRecords)
    );
    let long_value = format!(
        r#"{{"Records":[{{"eventName":"ObjectCreated:Put","s3":{{"bucket":{{"name":"b"}},"object":{{"key":"k","size":"{}"}}}}}}]}}"#,
        "9".repeat(10_000)
    );
    let Err(SesError::Malformed(why)) = s3_notification(&long_value) else {
        panic!("expected Malformed");
    };
    assert!(why.chars().count() <= 200, "{why}");
    let bucket = r#"{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":""},"object":{"key":"k"}}}]}"#;
    assert_eq!(s3_notification(bucket), Err(SesError::NoBucket));
}

#[test]
fn bad_keys_are_errors() {
    let long = "k".repeat(MAX_OBJECT_KEY_BYTES + 1);
    for key in [
        "",
        "inbound/%zz",
        "inbound/%4",
        "inbound/%",
        "inbound/%FF",
        &long,
    ] {
        let body = records(&[record("ObjectCreated:Put", key, "")]);
        assert!(
            matches!(s3_notification(&body), Err(SesError::BadKey(_))),
            "{key:?}"
        );
    }
    let max = "k".repeat(MAX_OBJECT_KEY_BYTES);
    assert_eq!(decode_key(&max).as_deref(), Ok(max.as_str()));
}

#[test]
fn message_ids_from_keys() {
    let id = "8hj0vq1cu4oj3bh1a2eqm4jgol0rphe56bsjs0o1";
    let key = format!("inbound/{id}");
    assert_eq!(ses_message_id(&key, "inbound/"), Some(id));
    assert_eq!(
        ses_message_id("inbound/A.b_c-9", "inbound/"),
        Some("A.b_c-9")
    );
    assert_eq!(
        ses_message_id("inbound/AMAZON_SES_SETUP_NOTIFICATION", "inbound/"),
        None,
        "SES's setup notification is not a message"
    );
    let max = format!("inbound/{}", "a".repeat(MAX_SES_MESSAGE_ID_BYTES));
    assert!(ses_message_id(&max, "inbound/").is_some());
    let over = format!("inbound/{}", "a".repeat(MAX_SES_MESSAGE_ID_BYTES + 1));
    for key in [
        "inbound/",
        "inbound",
        "mail/abc",
        "xinbound/abc",
        "inbound/a/b",
        "inbound/a b",
        "inbound/a+b",
        "inbound/é",
        "inbound/.",
        "inbound/..",
        "inbound/AMAZON_SES_SETUP_NOTIFICATION\0",
        &over,
    ] {
        assert_eq!(ses_message_id(key, "inbound/"), None, "{key:?}");
    }
}

/// Header-ish lines, to give the parsers something close to what they expect.
fn header_line() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("Received: from a by inbound-smtp.us-east-1.amazonaws.com with SMTP id x for ada@inbox.example; d\n".to_owned()),
        Just("Received: from a by mx.example; d\n".to_owned()),
        Just("Authentication-Results: amazonses.com; spf=pass; dkim=fail; dmarc=pass\n".to_owned()),
        Just("Return-Path: <>\n".to_owned()),
        Just("To: a@inbox.example, \"x\" <b@inbox.example>\n".to_owned()),
        Just("\n".to_owned()),
        Just(" folded (comment \\( ;\n".to_owned()),
        "[A-Za-z-]{1,20}: [ -~]{0,60}\n",
        "[ -~\t\r(\"\\\\;=<>@]{0,80}\n",
    ]
}

proptest! {
    #[test]
    fn parsers_never_panic_on_bytes(raw in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = ses_auth(&raw);
        let envelope = ses_envelope(&raw, DOMAIN);
        prop_assert!(envelope.rcpt_to.len() <= MAX_HEADER_RECIPIENTS);
        let _ = s3_notification(&String::from_utf8_lossy(&raw));
        let _ = ses_message_id(&String::from_utf8_lossy(&raw), "inbound/");
    }

    #[test]
    fn envelope_recipients_are_of_the_domain(
        lines in proptest::collection::vec(header_line(), 0..40),
    ) {
        let raw = lines.concat();
        let _ = ses_auth(raw.as_bytes());
        let envelope = ses_envelope(raw.as_bytes(), DOMAIN);
        prop_assert!(envelope.rcpt_to.len() <= MAX_HEADER_RECIPIENTS);
        let mut seen = HashSet::new();
        for rcpt in &envelope.rcpt_to {
            prop_assert!(parse_recipient(rcpt, DOMAIN).is_some(), "{}", rcpt);
            prop_assert!(seen.insert(rcpt.to_lowercase()), "duplicate {}", rcpt);
        }
    }

    #[test]
    fn keys_round_trip_through_s3_encoding(key in "\\PC{1,200}") {
        prop_assume!(key.len() <= MAX_OBJECT_KEY_BYTES);
        let encoded: String = form_urlencoded::byte_serialize(key.as_bytes()).collect();
        let body = records(&[record("ObjectCreated:Put", &encoded, "")]);
        let want = S3Notification::Objects(vec![object(&key, None)]);
        prop_assert_eq!(s3_notification(&body), Ok(want));
    }
}
