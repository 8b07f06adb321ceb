use super::*;

fn patterns(p: &[&str]) -> TypePatterns {
    TypePatterns::parse(p).expect("valid patterns")
}

#[test]
fn a_star_stands_for_one_or_more_whole_segments() {
    let all = TypePatterns::default();
    assert!(all.matches("email.received") && all.matches("x"));
    let email = patterns(&["email.*"]);
    assert!(email.matches("email.received"));
    assert!(email.matches("email.send_failed.permanent"));
    assert!(!email.matches("email"));
    assert!(!email.matches("emails.received"));
    let failed = patterns(&["*.failed"]);
    assert!(failed.matches("hook.failed") && failed.matches("a.b.failed"));
    assert!(!failed.matches("failed") && !failed.matches("hook.failed.x"));
    let exact = patterns(&["request.answered", "state.*"]);
    assert!(exact.matches("request.answered") && exact.matches("state.updated"));
    assert!(!exact.matches("request.expired"));
    let middle = patterns(&["github.*.opened"]);
    assert!(middle.matches("github.pull_request.opened"));
    assert!(middle.matches("github.a.b.opened"));
    assert!(!middle.matches("github.opened"));
}

#[test]
fn bad_patterns_are_refused_with_the_rule() {
    let refused = |p: &[&str]| TypePatterns::parse(p).expect_err("refused").0;
    assert!(refused(&[]).contains("at least one"));
    assert!(refused(&[""]).contains("empty"));
    assert!(refused(&["email..received"]).contains("empty segment"));
    assert!(refused(&[".email"]).contains("empty segment"));
    assert!(refused(&["email."]).contains("empty segment"));
    assert!(refused(&["**"]).contains("`*` stands for whole segments"));
    assert!(refused(&["*.*"]).contains("`*.*`"));
    assert!(refused(&["email*"]).contains("whole segments"));
    assert!(refused(&["email.rec eived"]).contains("segment"));
    assert!(refused(&[&"a".repeat(200)]).contains("longer than 100"));
    let fifty: Vec<String> = (0..50).map(|n| format!("t{n}")).collect();
    assert!(TypePatterns::parse(&fifty)
        .expect_err("50 patterns")
        .0
        .contains("at most 20"));
    let twenty: Vec<String> = (0..20).map(|n| format!("t{n}")).collect();
    assert!(TypePatterns::parse(&twenty).is_ok());
    assert_eq!(
        patterns(&["a", "b", "a"]).as_slice(),
        &["a".to_owned(), "b".to_owned()]
    );
}

/// Many stars against many segments: a backtracking matcher takes exponential time here.
#[test]
fn many_stars_against_many_segments_match_in_polynomial_time() {
    let stars = vec!["*"; 25].join(".a.") + ".b";
    let pattern = patterns(&[&stars]);
    let many_a = vec!["a"; 64].join(".");
    assert!(!pattern.matches(&many_a));
    assert!(pattern.matches(&(many_a.clone() + ".b")));
}
