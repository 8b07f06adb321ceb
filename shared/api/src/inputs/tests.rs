use serde_json::json;

use super::*;

fn create(body: Value) -> Result<CreateAddressRequest, String> {
    match body {
        Value::Object(m) => parse_fields(m).map_err(|e| e.to_string()),
        _ => Err("not an object".into()),
    }
}

#[test]
fn bodies_keep_the_contract_messages() {
    let ok = create(json!({"name": "n", "task_id": null, "expires_in_seconds": 6e1, "x": 1}))
        .expect("valid");
    assert_eq!(ok.name.as_deref(), Some("n"));
    assert_eq!((ok.task_id, ok.expires_in_seconds), (None, Some(60)));
    let long = "x".repeat(LABEL_MAX_CHARS + 1);
    for (body, message) in [
        (
            json!({"name": ""}),
            "`name` must be 1 to 200 characters long.",
        ),
        (
            json!({"task_id": long}),
            "`task_id` must be 1 to 200 characters long.",
        ),
        (json!({"task_id": 7}), "`task_id` must be a string."),
        (
            json!({"expires_in_seconds": 59}),
            "`expires_in_seconds` must be an integer from 60 to 31536000.",
        ),
        (
            json!({"expires_in_seconds": "60"}),
            "`expires_in_seconds` must be an integer from 60 to 31536000.",
        ),
        // Checked in declared order, whatever the body's order.
        (
            json!({"expires_in_seconds": 1, "name": true}),
            "`name` must be a string.",
        ),
    ] {
        assert_eq!(
            create(body.clone()).err().as_deref(),
            Some(message),
            "{body}"
        );
    }
    let bidi = create(json!({"name": "a\u{202E}b"}))
        .err()
        .unwrap_or_default();
    assert!(bidi.starts_with("`name` may not contain"), "{bidi}");
    assert!(bidi.ends_with("(found U+202E)."), "{bidi}");
}

#[test]
fn a_missing_required_field_is_named_first() {
    let put = |v: Value| match v {
        Value::Object(m) => parse_fields::<PutStateRequest>(m).map_err(|e| e.to_string()),
        _ => Err("not an object".into()),
    };
    assert_eq!(
        put(json!({"if_revision": -1})).err().as_deref(),
        Some("The body must have a `value` field (any JSON).")
    );
    assert_eq!(
        put(json!({"value": 1, "if_revision": -1})).err().as_deref(),
        Some("`if_revision` must be an integer from 0 to 9223372036854775807.")
    );
    let ok = put(json!({"value": null})).expect("null is a value");
    assert_eq!((ok.value, ok.if_revision), (Value::Null, None));
}

#[test]
fn schemas_state_the_constants() {
    let doc = |s: RefOr<Schema>| serde_json::to_value(s).expect("schema");
    let create = doc(CreateAddressRequest::schema());
    assert_eq!(create["properties"]["name"]["maxLength"], LABEL_MAX_CHARS);
    assert_eq!(
        create["properties"]["expires_in_seconds"]["minimum"],
        EXPIRES_IN_MIN_SECONDS
    );
    assert_eq!(
        create["properties"]["expires_in_seconds"]["maximum"],
        EXPIRES_IN_MAX_SECONDS
    );
    assert!(create.get("required").is_none(), "{create}");
    let put = doc(PutStateRequest::schema());
    assert_eq!(put["required"], json!(["value"]));
    assert_eq!(put["properties"]["if_revision"]["maximum"], COUNT_MAX);
    assert!(
        put["properties"]["value"].get("type").is_none(),
        "any JSON: {put}"
    );
    let params = FeedParams::into_params(|| None);
    let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["after", "limit", "wait", "types"]);
    let types = serde_json::to_value(&params[3]).expect("param");
    assert_eq!(types["required"], false);
    assert_eq!(
        types["schema"]["maxLength"],
        MAX_PATTERNS * (MAX_PATTERN_CHARS + 1)
    );
    let limit = serde_json::to_value(&params[1]).expect("param");
    assert_eq!(limit["in"], "query");
    assert_eq!(limit["required"], false);
    assert_eq!(limit["schema"]["maximum"], FEED_LIMIT_MAX);
    assert!(limit["description"].is_string() && limit["schema"]["description"].is_null());
}
