//! Numbers in requests, read one way everywhere: a JSON number with an integral value, a
//! count (`after`, a revision) and a number of seconds (`wait`) in a query string or header.

use serde_json::{Map, Value};

use crate::inputs::COUNT_MAX;
use crate::ApiError;

/// An optional non-negative integer field within `range`; `null` counts as absent.
pub fn optional_integer(
    obj: &Map<String, Value>, field: &str, range: std::ops::RangeInclusive<u64>,
) -> Result<Option<u64>, ApiError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match integral(v) {
            Some(n) if range.contains(&n) => Ok(Some(n)),
            _ => Err(ApiError::invalid(format!(
                "`{field}` must be an integer from {} to {}.",
                range.start(),
                range.end()
            ))),
        },
    }
}

/// A JSON number with a non-negative integral value: `60`, and also `60.0`, `6e1` or `0.6e2`,
/// which JSON (and JSON Schema) count as the same integer. Read exactly from the number's text
/// (never through a float, which would round `9007199254740993.0`); `60.5`, negative values
/// and values over `u64::MAX` are `None`.
pub fn integral(v: &Value) -> Option<u64> {
    let n = v.as_number()?;
    n.as_u64().or_else(|| integral_text(&n.to_string()))
}

fn integral_text(text: &str) -> Option<u64> {
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(i) => (&text[..i], text[i + 1..].parse::<i64>().ok()?),
        None => (text, 0),
    };
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, mantissa),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !all_digits(int) || !all_digits(frac) {
        return None;
    }
    // value = digits × 10^scale
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    let scale = exponent.checked_sub(i64::try_from(frac.len()).ok()?)?;
    let value = if digits.is_empty() {
        0
    } else if scale >= 0 {
        let power = 10u64.checked_pow(u32::try_from(scale).ok()?)?;
        digits.parse::<u64>().ok()?.checked_mul(power)?
    } else {
        let cut = usize::try_from(scale.unsigned_abs()).ok()?;
        let keep = digits.len().saturating_sub(cut);
        let (kept, dropped) = digits.split_at(keep);
        if !dropped.bytes().all(|b| b == b'0') {
            return None;
        }
        if kept.is_empty() {
            0
        } else {
            kept.parse::<u64>().ok()?
        }
    };
    (!negative || value == 0).then_some(value)
}

/// A non-negative decimal integer without sign or spaces that fits in `i64`.
pub fn parse_count(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<u64>().ok().filter(|n| *n <= COUNT_MAX)
}

/// A non-negative decimal number (`1`, `0.5`, `2.5e1`) that fits an `f64`. Words such as `inf`
/// or `NaN`, and numbers too large for an `f64` (`1e400`), are refused.
pub fn parse_seconds(s: &str) -> Option<f64> {
    let decimal = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'));
    if !decimal {
        return None;
    }
    s.parse::<f64>().ok().filter(|w| w.is_finite() && *w >= 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts() {
        assert_eq!(parse_count("0"), Some(0));
        assert_eq!(parse_count("42"), Some(42));
        assert_eq!(parse_count("9223372036854775807"), Some(i64::MAX as u64));
        for bad in [
            "",
            "-1",
            "+1",
            " 1",
            "1.0",
            "1e3",
            "9223372036854775808",
            "99999999999999999999",
            "abc",
        ] {
            assert_eq!(parse_count(bad), None, "{bad}");
        }
    }

    #[test]
    fn integral_numbers() {
        let n = |t: &str| integral(&serde_json::from_str::<Value>(t).expect("json"));
        assert_eq!(n("60"), Some(60));
        assert_eq!(n("60.0"), Some(60));
        assert_eq!(n("6e1"), Some(60));
        assert_eq!(n("-0.0"), Some(0));
        assert_eq!(n("18446744073709551615"), Some(u64::MAX));
        assert_eq!(n("9007199254740993.0"), Some(9_007_199_254_740_993));
        assert_eq!(n("0.6e2"), Some(60));
        assert_eq!(n("600e-1"), Some(60));
        assert_eq!(n("0e99999"), Some(0));
        for bad in [
            "60.5",
            "-1",
            "-1.0",
            "1e400",
            "605e-1",
            "1.00000000000000001",
            "18446744073709551616.0",
            "\"60\"",
            "true",
            "null",
        ] {
            assert_eq!(n(bad), None, "{bad}");
        }
    }
}
