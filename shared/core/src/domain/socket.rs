//! The wake-up socket's wire format (docs/API.md §17): the client frames, the server's frames
//! and the caps. `serve` holds the sockets itself; on AWS, API Gateway holds them, the `ws`
//! function answers their frames and the appending functions post `notify` and `gone` to them.
//! All of them write their frames here, so they answer alike.

use serde_json::{json, Value};

use super::patterns::TypePatterns;

/// Subscriptions one socket may hold.
pub const MAX_SUBSCRIPTIONS: usize = 20;
/// Sockets subscribed to one address at once.
pub const MAX_SOCKETS_PER_ADDRESS: usize = 20;
/// The largest client frame.
pub const MAX_FRAME_BYTES: usize = 16 * 1024;

/// A client frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientFrame {
    Subscribe {
        address_id: String,
        read_token: String,
        /// Only appends of these types notify (docs/API.md §21); every append without.
        types: Option<TypePatterns>,
    },
    Unsubscribe {
        address_id: String,
    },
    Ping,
}

/// Reads a text frame; `Err` is the `error` frame to answer.
pub fn parse(frame: &str) -> Result<ClientFrame, Value> {
    if frame.len() > MAX_FRAME_BYTES {
        return Err(error(
            "invalid_request",
            "A frame is at most 16 KiB of JSON text.",
        ));
    }
    let Ok(Value::Object(msg)) = serde_json::from_str::<Value>(frame) else {
        return Err(error(
            "invalid_request",
            "A frame is one JSON object with an `action`.",
        ));
    };
    let field = |name: &str| {
        msg.get(name)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    match field("action").as_str() {
        "ping" => Ok(ClientFrame::Ping),
        "unsubscribe" => Ok(ClientFrame::Unsubscribe {
            address_id: field("address_id"),
        }),
        "subscribe" => Ok(ClientFrame::Subscribe {
            address_id: field("address_id"),
            read_token: field("read_token"),
            types: match msg.get("types") {
                None | Some(Value::Null) => None,
                Some(Value::Array(items)) => {
                    let patterns: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
                    let Some(patterns) = patterns else {
                        return Err(error(
                            "invalid_request",
                            "`types` is a list of type patterns (strings).",
                        ));
                    };
                    match TypePatterns::parse(&patterns) {
                        Ok(p) => Some(p),
                        Err(e) => return Err(error("invalid_request", &format!("`types`: {e}"))),
                    }
                }
                Some(_) => {
                    return Err(error(
                        "invalid_request",
                        "`types` is a list of type patterns (strings).",
                    ))
                }
            },
        }),
        _ => Err(error(
            "invalid_request",
            "`action` is `subscribe`, `unsubscribe` or `ping`.",
        )),
    }
}

pub fn subscribed(address_id: &str, last_sequence: u64) -> Value {
    json!({"type": "subscribed", "address_id": address_id, "last_sequence": last_sequence})
}

pub fn unsubscribed(address_id: &str) -> Value {
    json!({"type": "unsubscribed", "address_id": address_id})
}

pub fn notify(address_id: &str, last_sequence: u64) -> Value {
    json!({"type": "notify", "address_id": address_id, "last_sequence": last_sequence})
}

pub fn gone(address_id: &str) -> Value {
    json!({"type": "gone", "address_id": address_id})
}

pub fn pong() -> Value {
    json!({"type": "pong"})
}

pub fn error(code: &str, message: &str) -> Value {
    json!({"type": "error", "code": code, "message": message})
}

pub fn unauthorized() -> Value {
    error(
        "unauthorized",
        "A valid read token for this address is required.",
    )
}

pub fn unavailable() -> Value {
    error("unavailable", "Try again.")
}

pub fn socket_full() -> Value {
    error("quota_exceeded", "A socket holds at most 20 subscriptions.")
}

pub fn address_full() -> Value {
    error(
        "quota_exceeded",
        "This address has its most subscribed sockets (20).",
    )
}

pub fn binary_refused() -> Value {
    error("invalid_request", "Frames are JSON text.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_parsed_or_refused() {
        assert_eq!(parse(r#"{"action":"ping"}"#), Ok(ClientFrame::Ping));
        assert_eq!(
            parse(r#"{"action":"subscribe","address_id":"a","read_token":"t","after":3}"#),
            Ok(ClientFrame::Subscribe {
                address_id: "a".into(),
                read_token: "t".into(),
                types: None,
            })
        );
        assert_eq!(
            parse(
                r#"{"action":"subscribe","address_id":"a","read_token":"t","types":["email.*"]}"#
            ),
            Ok(ClientFrame::Subscribe {
                address_id: "a".into(),
                read_token: "t".into(),
                types: Some(TypePatterns::parse(&["email.*"]).expect("patterns")),
            })
        );
        for bad in [
            r#"{"action":"subscribe","types":"email.*"}"#,
            r#"{"action":"subscribe","types":[]}"#,
            r#"{"action":"subscribe","types":[1]}"#,
            r#"{"action":"subscribe","types":["a..b"]}"#,
        ] {
            let e = parse(bad).expect_err(bad);
            assert_eq!(e["code"], "invalid_request", "{bad}");
            assert!(
                e["message"].as_str().is_some_and(|m| m.contains("types")),
                "{e}"
            );
        }
        for bad in [
            "",
            "[]",
            "null",
            "{",
            r#"{"action":"dance"}"#,
            r#"{"action":1}"#,
        ] {
            let e = parse(bad).expect_err(bad);
            assert_eq!(e["code"], "invalid_request", "{bad}");
        }
        let big = format!(
            r#"{{"action":"ping","x":"{}"}}"#,
            "x".repeat(MAX_FRAME_BYTES)
        );
        assert_eq!(parse(&big).expect_err("big")["code"], "invalid_request");
    }
}
