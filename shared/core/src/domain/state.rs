//! Durable state rules (docs/API.md §7): key syntax, value nesting and size accounting.

use serde_json::Value;

use super::envelope::MAX_JSON_DEPTH;
use super::limits::STATE_KEY_OVERHEAD;
use super::Invalid;

pub const MAX_KEY_LEN: usize = 128;

/// Keys are 1..128 characters of `[A-Za-z0-9._:-]`, not only dots: `.` and `..` (and `...`)
/// are path segments that URL normalisers rewrite into other paths (docs/API.md, "State.").
pub fn validate_key(key: &str) -> Result<(), Invalid> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(Invalid::new(format!(
            "state key must be 1 to {MAX_KEY_LEN} characters long"
        )));
    }
    if !key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    {
        return Err(Invalid::new(
            "state key may contain only letters, digits and . _ : -",
        ));
    }
    if key.bytes().all(|b| b == b'.') {
        return Err(Invalid::new(
            "state key may not consist only of dots (URLs would rewrite it into another path)",
        ));
    }
    Ok(())
}

/// How deep arrays and objects nest in `value`: 0 for a scalar, 1 for `[]` or `{"a":1}`.
/// Iterative, so any value serde_json produced is measured without recursion.
pub fn json_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(value, 1usize)];
    while let Some((v, depth)) = pending.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(members) => Box::new(members.values()),
            _ => continue,
        };
        deepest = deepest.max(depth);
        pending.extend(children.map(|c| (c, depth + 1)));
    }
    deepest
}

/// A state value nests arrays and objects at most [`MAX_JSON_DEPTH`] deep (docs/API.md,
/// "State."), so its `state.updated` event reads back through every client.
pub fn validate_value(value: &Value) -> Result<(), Invalid> {
    let depth = json_depth(value);
    if depth > MAX_JSON_DEPTH {
        return Err(Invalid::new(format!(
            "`value` nests arrays and objects {depth} levels deep; at most {MAX_JSON_DEPTH} are allowed"
        )));
    }
    Ok(())
}

/// Bytes a key costs: the key, its value's compact JSON, and 64 bytes of metadata.
pub fn entry_size(key: &str, compact_value_json: &str) -> u64 {
    key.len() as u64 + compact_value_json.len() as u64 + STATE_KEY_OVERHEAD
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert!(validate_key("a").is_ok());
        assert!(validate_key("task:1.step-2_x").is_ok());
        assert!(validate_key(&"k".repeat(128)).is_ok());
        assert!(validate_key(&"k".repeat(129)).is_err());
        assert!(validate_key("").is_err());
        assert!(validate_key("a/b").is_err());
        assert!(validate_key("a b").is_err());
        assert!(validate_key("ключ").is_err());
    }

    #[test]
    fn dot_only_keys_are_refused() {
        for key in [".", "..", "...", &".".repeat(128)] {
            let e = validate_key(key).expect_err(key);
            assert!(e.0.contains("only of dots"), "{key}: {e}");
        }
        for key in [".a", "a.", "..a", ".-.", "a..b", "._"] {
            assert!(validate_key(key).is_ok(), "{key}");
        }
    }

    fn nested(depth: usize) -> Value {
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        serde_json::from_str(&text).expect("nested array")
    }

    #[test]
    fn depth_of_values() {
        assert_eq!(json_depth(&serde_json::json!(1)), 0);
        assert_eq!(json_depth(&serde_json::json!([])), 1);
        assert_eq!(
            json_depth(&serde_json::json!({"a": [1, {"b": {}}], "c": []})),
            4
        );
        assert_eq!(json_depth(&nested(100)), 100);
    }

    #[test]
    fn values_nested_over_the_limit_are_refused() {
        assert!(validate_value(&nested(MAX_JSON_DEPTH)).is_ok());
        let e = validate_value(&nested(MAX_JSON_DEPTH + 1)).expect_err("too deep");
        assert!(e.0.contains("at most 64"), "{e}");
        assert!(validate_value(&nested(100)).is_err());
        let mut deep_in_object = serde_json::json!({"ok": 1});
        deep_in_object["x"] = nested(MAX_JSON_DEPTH);
        assert!(validate_value(&deep_in_object).is_err());
        assert!(validate_value(&serde_json::json!(null)).is_ok());
    }

    #[test]
    fn sizes_count_key_value_and_metadata() {
        assert_eq!(entry_size("k", "1"), 66);
        assert_eq!(entry_size("counter", "{\"n\":10}"), 7 + 8 + 64);
    }
}
