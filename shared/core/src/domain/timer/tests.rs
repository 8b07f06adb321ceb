use serde_json::json;

use super::*;

/// 2027-01-15T08:00:00Z.
const NOW: Millis = 1_800_000_000_000;
const SEC: Millis = 1_000;

fn spec(body: serde_json::Value) -> Result<TimerSpec, String> {
    TimerSpec::from_json(&body, NOW, None).map_err(|e| e.0)
}

#[test]
fn a_timer_is_read_with_its_defaults() {
    let t = spec(json!({"in_seconds": 2})).expect("valid");
    assert_eq!(t.fire_at, NOW + 2 * SEC);
    assert_eq!(t.event_type, DEFAULT_TIMER_TYPE);
    assert_eq!(t.data, None);
    let t = spec(
        json!({"fire_at": "2027-01-16T08:00:00Z", "type": "timer.follow_up",
                        "data": {"ask": "again"}}),
    )
    .expect("valid");
    assert_eq!(t.fire_at, NOW + 86_400 * SEC);
    assert_eq!(t.event_type, "timer.follow_up");
    assert_eq!(t.data.as_deref(), Some(r#"{"ask":"again"}"#));
    // An offset is honoured; a float with an integral value is an integer.
    let t = spec(json!({"fire_at": "2027-01-15T09:00:00+01:00"})).expect_err("now, not after");
    assert!(t.contains("not in the future"), "{t}");
    assert_eq!(
        spec(json!({"in_seconds": 60.0})).map(|t| t.fire_at),
        Ok(NOW + 60 * SEC)
    );
    assert_eq!(
        spec(json!({"in_seconds": MAX_TIMER_SECONDS})).map(|t| t.fire_at),
        Ok(NOW + MAX_TIMER_SECONDS as i64 * SEC)
    );
}

#[test]
fn bad_timers_are_refused_with_their_rule() {
    let refused = |body| spec(body).expect_err("refused");
    assert!(refused(json!({})).contains("fire_at"));
    assert!(refused(json!([])).contains("object"));
    assert!(
        refused(json!({"fire_at": "2027-01-16T08:00:00Z", "in_seconds": 5})).contains("not both")
    );
    assert!(refused(json!({"fire_at": "2027-01-14T08:00:00Z"})).contains("not in the future"));
    assert!(refused(json!({"fire_at": "2029-01-16T08:00:00Z"})).contains("a year"));
    for bad in [
        json!("tomorrow"),
        json!("2027-01-16"),
        json!("2027-01-16T08:00:00"),
        json!(7),
    ] {
        assert!(
            refused(json!({"fire_at": bad})).contains("RFC 3339"),
            "{bad}"
        );
    }
    for bad in [
        json!(0),
        json!(-5),
        json!(1.5),
        json!(1e300),
        json!(31_536_001),
        json!("5"),
    ] {
        assert!(
            refused(json!({"in_seconds": bad})).contains("in_seconds"),
            "{bad}"
        );
    }
    for bad in [json!("fired"), json!("timer."), json!("timers.x"), json!(7)] {
        assert!(
            refused(json!({"in_seconds": 5, "type": bad})).contains("timer."),
            "{bad}"
        );
    }
    let long = format!("timer.{}", "x".repeat(200));
    assert!(refused(json!({"in_seconds": 5, "type": long})).contains("128"));
    let big = "x".repeat(MAX_TIMER_DATA_BYTES);
    assert!(refused(json!({"in_seconds": 5, "data": big})).contains("bytes"));
    let mut deep = json!(1);
    for _ in 0..65 {
        deep = json!([deep]);
    }
    assert!(refused(json!({"in_seconds": 5, "data": deep})).contains("deeper"));
    // Beyond the address's expiry it could never fire.
    let e = TimerSpec::from_json(&json!({"in_seconds": 120}), NOW, Some(NOW + 60 * SEC))
        .expect_err("after the expiry");
    assert!(e.0.contains("expires"), "{}", e.0);
}

#[test]
fn ids_and_the_fired_event() {
    let id = new_timer_id();
    assert!(is_timer_id(&id), "{id}");
    assert!(!is_timer_id("tmr_") && !is_timer_id("hk_abc") && !is_timer_id("tmr_a/b"));
    let parsed = |s: String| serde_json::from_str::<serde_json::Value>(&s).expect("JSON");
    assert_eq!(
        parsed(fired_data("tmr_x", Some(r#"{"a":1}"#))),
        json!({"timer_id": "tmr_x", "data": {"a": 1}})
    );
    assert_eq!(
        parsed(fired_data("tmr_x", None)),
        json!({"timer_id": "tmr_x", "data": null})
    );
}
