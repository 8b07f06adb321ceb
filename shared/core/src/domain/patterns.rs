//! Event type patterns (docs/API.md §19, §21): which events a wake hook wakes for, and which
//! a filtered read (`types=`) returns. One rule for both.

use super::Invalid;

/// Most type patterns a hook or a filtered read names.
pub const MAX_PATTERNS: usize = 20;
/// Longest type pattern, in characters.
pub const MAX_PATTERN_CHARS: usize = 100;

/// Event type patterns (docs/API.md §19, and the filtered reads of §21): an event type, or `*`
/// standing for one or more whole dot-separated segments (`email.*`, `*.failed`, `*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypePatterns(Vec<String>);

impl Default for TypePatterns {
    /// `["*"]`: every type.
    fn default() -> Self {
        Self(vec!["*".into()])
    }
}

impl TypePatterns {
    /// Checks `patterns` (1 to [`MAX_PATTERNS`], each a pattern of [`pattern_rule`]); duplicates
    /// are kept once, in their first place.
    pub fn parse<S: AsRef<str>>(patterns: &[S]) -> Result<Self, Invalid> {
        if patterns.is_empty() {
            return Err(Invalid::new(
                "`types` needs at least one pattern (`*` for every type).",
            ));
        }
        if patterns.len() > MAX_PATTERNS {
            return Err(Invalid::new(format!(
                "`types` has {} patterns; at most {MAX_PATTERNS} are allowed.",
                patterns.len()
            )));
        }
        let mut out: Vec<String> = Vec::with_capacity(patterns.len());
        for p in patterns {
            let p = p.as_ref();
            pattern_rule(p)?;
            if !out.iter().any(|q| q == p) {
                out.push(p.to_owned());
            }
        }
        Ok(Self(out))
    }

    /// Patterns already checked by [`TypePatterns::parse`], read back from a store.
    pub fn stored(patterns: Vec<String>) -> Self {
        Self(patterns)
    }

    /// The patterns, as given.
    pub fn as_slice(&self) -> &[String] {
        &self.0
    }

    /// Whether `event_type` matches any pattern.
    pub fn matches(&self, event_type: &str) -> bool {
        matches_any(&self.0, event_type)
    }
}

/// Whether `event_type` matches any of `patterns` (each checked by [`pattern_rule`]).
pub fn matches_any(patterns: &[String], event_type: &str) -> bool {
    let segments: Vec<&str> = event_type.split('.').collect();
    patterns.iter().any(|p| {
        let pattern: Vec<&str> = p.split('.').collect();
        segments_match(&pattern, &segments)
    })
}

/// The rule of one pattern: 1 to [`MAX_PATTERN_CHARS`] characters; dot-separated segments,
/// none empty; a segment is `*` or made of ASCII letters, digits, `_`, `-`, `:` and `/` (the
/// characters event types use); no two `*` segments side by side.
pub fn pattern_rule(p: &str) -> Result<(), Invalid> {
    if p.is_empty() {
        return Err(Invalid::new("A type pattern is empty."));
    }
    if p.chars().count() > MAX_PATTERN_CHARS {
        return Err(Invalid::new(format!(
            "A type pattern is longer than {MAX_PATTERN_CHARS} characters."
        )));
    }
    let mut last_star = false;
    for segment in p.split('.') {
        if segment.is_empty() {
            return Err(Invalid::new(format!(
                "The type pattern {p:?} has an empty segment: segments are separated by one dot."
            )));
        }
        if segment == "*" {
            if last_star {
                return Err(Invalid::new(format!(
                    "The type pattern {p:?} has `*.*`: one `*` already stands for any number of segments."
                )));
            }
            last_star = true;
            continue;
        }
        last_star = false;
        let ok = segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b':' | b'/'));
        if !ok {
            return Err(Invalid::new(format!(
                "The type pattern {p:?} has the segment {segment:?}: a segment is `*` or letters, digits, `_`, `-`, `:` and `/` (`*` stands for whole segments only)."
            )));
        }
    }
    Ok(())
}

/// Whether `pattern`'s segments match `segments`: a `*` matches one or more whole segments.
/// Dynamic programming over (pattern, segments) suffixes, so a pattern of many stars against a
/// type of many segments costs their product, never an exponential backtrack.
fn segments_match(pattern: &[&str], segments: &[&str]) -> bool {
    let n = segments.len();
    // `next[j]`: whether the pattern after the current one matches `segments[j..]`.
    let mut next: Vec<bool> = (0..=n).map(|j| j == n).collect();
    let mut here = vec![false; n + 1];
    for p in pattern.iter().rev() {
        here[n] = false;
        for j in (0..n).rev() {
            here[j] = if *p == "*" {
                // One segment, then either the rest of the pattern or more of this star.
                next[j + 1] || here[j + 1]
            } else {
                segments[j] == *p && next[j + 1]
            };
        }
        std::mem::swap(&mut next, &mut here);
    }
    next[0]
}

#[cfg(test)]
mod tests;
