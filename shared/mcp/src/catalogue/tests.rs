//! The catalogue against itself, the API's error catalogue and the docs.

use super::*;

/// docs/MCP.md says how many tools there are and lists each in its table with every
/// argument of its input schema; the README names them all.
#[test]
fn the_docs_list_every_tool_with_its_arguments() {
    let doc = include_str!("../../../../docs/MCP.md");
    let readme = include_str!("../../../../README.md");
    let number = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve", "thirteen", "fourteen", "fifteen",
    ];
    let n = number.get(TOOLS.len()).copied().unwrap_or("many");
    assert!(
        doc.contains(&format!("gets {n} tools")),
        "docs/MCP.md: {n} tools"
    );
    assert!(
        readme.contains(&format!("as {n} MCP tools")),
        "README: {n} tools"
    );
    for tool in TOOLS.iter() {
        let name = tool.name.as_ref();
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{name}` |")))
            .unwrap_or_else(|| panic!("docs/MCP.md's table has no row for {name}"));
        let arguments = row.split(" | ").nth(1).unwrap_or_default();
        let properties = tool
            .input_schema
            .get("properties")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        assert!(!properties.is_empty(), "{name}");
        for argument in properties.keys() {
            assert!(
                arguments.contains(&format!("`{argument}`")),
                "docs/MCP.md: {name} lacks the argument {argument}: {arguments}"
            );
        }
        assert!(readme.contains(&format!("`{name}`")), "README lacks {name}");
    }
}

#[test]
fn tool_errors_are_catalogue_codes_of_the_operations() {
    use agentaddress_api::openapi::operation_error_codes;
    let text = errors_text();
    for (code, _) in TOOL_ERRORS {
        assert!(text.contains(code.as_str()), "{text}");
        let some_operation = [
            "create_address",
            "list_events",
            "ack_event",
            "list_state",
            "get_state",
            "put_state",
            "delete_state",
            "get_attachment",
            "list_contacts",
            "add_contact",
            "send_email",
            "add_hook",
            "create_timer",
            "list_timers",
            "cancel_timer",
        ]
        .iter()
        .any(|op| operation_error_codes(op, true, true).contains(&code));
        assert!(some_operation, "{} is answered by no tool", code.as_str());
    }
}

#[test]
fn input_schemas_come_from_the_request_structs() {
    use agentaddress_api::inputs::{EXPIRES_IN_MAX_SECONDS, FEED_LIMIT_MAX, LABEL_MAX_CHARS};
    let input = |name: &str| {
        let tool = TOOLS.iter().find(|t| t.name == name).expect("tool");
        Value::Object(tool.input_schema.as_ref().clone())
    };
    let create = input("create_return_address");
    let props = &create["properties"];
    assert_eq!(props["name"]["maxLength"], LABEL_MAX_CHARS);
    assert_eq!(
        props["expires_in_seconds"]["maximum"],
        EXPIRES_IN_MAX_SECONDS
    );
    assert!(create.get("required").is_none(), "{create}");
    // Verified webhooks (docs/API.md §15): the optional signing secret.
    assert_eq!(
        props["verification"]["properties"]["scheme"]["enum"],
        json!([
            "standard-webhooks",
            "stripe",
            "github",
            "slack",
            "zoom",
            "shopify",
            "meta",
            "twilio",
            "linear"
        ])
    );
    assert_eq!(
        props["verification"]["required"],
        json!(["scheme", "secret"])
    );
    let poll = input("poll_events");
    assert_eq!(poll["properties"]["limit"]["maximum"], FEED_LIMIT_MAX);
    assert_eq!(poll["properties"]["wait"]["type"], "number");
    assert_eq!(poll["required"], json!(["address_id", "read_token"]));
    assert_eq!(
        input("set_state")["required"],
        json!(["address_id", "read_token", "key", "value"])
    );
    let delete = input("delete_state");
    assert_eq!(delete["properties"]["if_revision"]["minimum"], 0);
    assert_eq!(
        delete["required"],
        json!(["address_id", "read_token", "key"])
    );
    assert_eq!(
        input("acknowledge_event")["required"],
        json!(["address_id", "read_token", "event_id"])
    );
    let get = input("get_state");
    assert_eq!(get["required"], json!(["address_id", "read_token"]));
    assert!(get["properties"]["key"].is_object());
    // Timers (docs/API.md §20): the body of `POST {root}/timers`, and the timer to cancel.
    let set = input("set_timer");
    assert_eq!(set["required"], json!(["address_id", "read_token"]));
    let props = &set["properties"];
    assert_eq!(
        props["in_seconds"]["maximum"],
        agentaddress_core::domain::timer::MAX_TIMER_SECONDS
    );
    assert_eq!(props["in_seconds"]["minimum"], 1);
    assert_eq!(props["fire_at"]["format"], "date-time");
    assert!(props["type"]["pattern"].is_string(), "{set}");
    assert!(props["data"].is_object() && props["idempotency_key"].is_object());
    assert_eq!(
        input("cancel_timer")["required"],
        json!(["address_id", "read_token", "timer_id"])
    );
    assert_eq!(
        input("list_timers")["required"],
        json!(["address_id", "read_token"])
    );
}

/// The timer tools say what the event looks like and how to wait for it, and each answers
/// the timer's schema from `/openapi.json`.
#[test]
fn timer_tools_say_how_to_wait_for_the_event() {
    let tool = |name: &str| TOOLS.iter().find(|t| t.name == name).expect("tool");
    let set = tool("set_timer").description.as_deref().unwrap_or("");
    for needle in [
        "poll_events",
        "\"timer.*\"",
        "timer_id",
        "timer.fired",
        "source",
    ] {
        assert!(set.contains(needle), "set_timer lacks {needle}: {set}");
    }
    let cancel = tool("cancel_timer").description.as_deref().unwrap_or("");
    assert!(cancel.contains("timer_fired"), "{cancel}");
    for name in ["set_timer", "cancel_timer"] {
        let out = tool(name).output_schema.as_ref().expect("schema");
        assert!(out["properties"]["timer"].is_object(), "{name}: {out:?}");
    }
    let out = tool("list_timers").output_schema.as_ref().expect("schema");
    assert_eq!(out["properties"]["timers"]["type"], "array", "{out:?}");
    let annotations = tool("cancel_timer")
        .annotations
        .clone()
        .expect("annotations");
    assert_eq!(annotations.idempotent_hint, Some(true));
    assert_eq!(
        tool("list_timers")
            .annotations
            .clone()
            .expect("a")
            .read_only_hint,
        Some(true)
    );
}

#[test]
fn every_tool_has_object_schemas_without_dangling_refs() {
    assert_eq!(TOOLS.len(), 15);
    for tool in TOOLS.iter() {
        assert_eq!(tool.input_schema["type"], "object", "{}", tool.name);
        let out = tool.output_schema.as_ref().expect("output schema");
        assert_eq!(out["type"], "object", "{}", tool.name);
        let text = serde_json::to_string(out.as_ref()).expect("json");
        assert!(!text.contains("#/components/"), "{}: {text}", tool.name);
        let mut refs = Vec::new();
        collect_refs(&Value::Object(out.as_ref().clone()), &mut refs);
        for r in refs {
            assert!(
                out.get("$defs").and_then(|d| d.get(&r)).is_some(),
                "{}: $ref {r} is not in $defs",
                tool.name
            );
        }
        let description = tool.description.as_deref().unwrap_or("");
        assert!(description.contains("isError"), "{}", tool.name);
    }
    let create = &TOOLS[0];
    assert!(create.description.as_deref().unwrap_or("").contains("ONCE"));
    let poll = &TOOLS[1];
    assert!(poll
        .description
        .as_deref()
        .unwrap_or("")
        .contains("untrusted"));
    let created = TOOLS[0].output_schema.as_ref().expect("schema");
    assert_eq!(
        created["properties"]["credentials"]["$ref"],
        "#/$defs/Credentials"
    );
}
