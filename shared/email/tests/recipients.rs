//! Recipient matching: case-insensitive, `+tag`, the configured domain only, garbage refused.

use agentaddress_email::{parse_recipient, Recipient};

fn r(key: &str, tag: Option<&str>) -> Option<Recipient> {
    Some(Recipient {
        key: key.into(),
        tag: tag.map(Into::into),
    })
}

const D: &str = "inbox.example";

#[test]
fn case_is_ignored() {
    assert_eq!(
        parse_recipient("addr_ABC@Inbox.Example", D),
        r("addr_abc@inbox.example", None)
    );
    assert_eq!(
        parse_recipient("<addr_abc@inbox.example>", "INBOX.EXAMPLE"),
        r("addr_abc@inbox.example", None)
    );
    assert_eq!(
        parse_recipient(" addr_abc@inbox.example. ", D),
        r("addr_abc@inbox.example", None)
    );
}

#[test]
fn plus_tag_delivers_to_the_base_and_records_the_tag() {
    assert_eq!(
        parse_recipient("addr_abc+Build@inbox.example", D),
        r("addr_abc@inbox.example", Some("build"))
    );
    assert_eq!(
        parse_recipient("addr_abc+a+b@inbox.example", D),
        r("addr_abc@inbox.example", Some("a+b"))
    );
    assert_eq!(
        parse_recipient("addr_abc+@inbox.example", D),
        r("addr_abc@inbox.example", None)
    );
    assert_eq!(parse_recipient("+tag@inbox.example", D), None);
}

#[test]
fn other_domains_are_refused() {
    for addr in [
        "addr_abc@other.example",
        "addr_abc@inbox.example.evil",
        "addr_abc@sub.inbox.example",
        "addr_abc@inbox.example@evil.example",
        "addr_abc@",
    ] {
        assert_eq!(parse_recipient(addr, D), None, "{addr}");
    }
    assert_eq!(parse_recipient("a@inbox.example", ""), None);
}

#[test]
fn garbage_is_refused() {
    let long_local = format!("{}@inbox.example", "a".repeat(65));
    let long_addr = format!("{}@{}", "a".repeat(60), "b".repeat(200));
    for addr in [
        "",
        "<>",
        "@inbox.example",
        "no-at-sign",
        "\"quoted\"@inbox.example",
        "a b@inbox.example",
        "a\u{0}b@inbox.example",
        "ünï@inbox.example",
        ".a@inbox.example",
        "a.@inbox.example",
        "a..b@inbox.example",
        "<a@inbox.example",
        "a\r\n@inbox.example",
        long_local.as_str(),
        long_addr.as_str(),
    ] {
        assert_eq!(parse_recipient(addr, D), None, "{addr:?}");
    }
    assert_eq!(
        parse_recipient(&format!("{}@inbox.example", "a".repeat(64)), D).map(|r| r.key.len()),
        Some(78)
    );
}
