//! The hook item codec and META's hook types, without DynamoDB.

use super::*;

fn record() -> HookRecord {
    let mut hook = HookRecord::new(
        "addr_x",
        NewHook {
            id: "hk_1".into(),
            url: "https://hooks.example/wake".into(),
            types: vec!["email.*".into(), "*.failed".into()],
            format: HookFormat::Slack,
            headers: vec![("x-b".into(), "2".into()), ("x-a".into(), "1".into())],
            secret: "whsec_c2VjcmV0".into(),
            debounce_seconds: 30,
        },
        7,
        5,
    );
    hook.delivery.pending_to = Some(9);
    hook.delivery.attempts = 2;
    hook.delivery.lease_until = Some(40);
    hook.delivery.last_error = Some("timeout".into());
    hook
}

#[test]
fn a_hook_item_reads_back_as_its_record() {
    let hook = record();
    let item = hook_item(&hook, 3, Some(1_000), "w");
    assert_eq!(HookRecord::from_item(&item), Ok(hook));
    assert_eq!(get_i(&item, "order"), Some(3));
    assert_eq!(get_i(&item, "ttl"), Some(1));
    let projected: Vec<&str> = item
        .keys()
        .map(String::as_str)
        .filter(|k| !["pk", "sk", "write_id", "ttl"].contains(k))
        .collect();
    assert!(
        projected.iter().all(|k| HOOK_ATTRIBUTES.contains(k)),
        "listing projects every attribute a record is read from: {projected:?}"
    );
}

#[test]
fn a_damaged_hook_item_is_an_internal_error_naming_the_attribute() {
    let good = hook_item(&record(), 1, None, "w");
    for (name, value) in [
        ("secret", None),
        ("types", Some(s("*"))),
        (
            "headers",
            Some(AttributeValue::L(vec![AttributeValue::L(vec![s("a")])])),
        ),
        ("status", Some(s("sleeping"))),
        ("attempts", Some(n(-1))),
        ("pending_to", Some(s("9"))),
    ] {
        let mut item = good.clone();
        match value {
            Some(v) => item.insert(name.into(), v),
            None => item.remove(name),
        };
        assert!(
            matches!(HookRecord::from_item(&item), Err(StoreError::Internal(m)) if m.contains(name)),
            "{name}"
        );
    }
}

#[test]
fn an_update_sets_what_is_known_and_removes_what_is_not() {
    let mut hook = record();
    hook.delivery.pending_to = None;
    let (update, values) = delivery_update(&hook, "w");
    assert!(update.contains("lease_until = :lu") && update.contains("last_error = :le"));
    assert!(
        update.ends_with("REMOVE pending_to, not_before, last_wake_at"),
        "{update}"
    );
    assert_eq!(values.get(":next_rev"), Some(&n(hook.revision + 1)));
    assert!(!values.contains_key(":pt"));
}

#[test]
fn the_address_types_are_the_union_of_its_active_hooks() {
    let meta: Item = HashMap::from([(
        HOOK_TYPES.to_owned(),
        AttributeValue::M(HashMap::from([
            ("hk_b".to_owned(), string_list(&["a.*".into(), "*".into()])),
            ("hk_a".to_owned(), string_list(&["*".into(), "b".into()])),
        ])),
    )]);
    assert_eq!(
        meta_hook_types(&Fields::of(&meta, "META")),
        Ok(vec!["*".to_owned(), "b".into(), "a.*".into()])
    );
    assert_eq!(
        meta_hook_types(&Fields::of(&Item::new(), "META")),
        Ok(Vec::new())
    );
    let damaged: Item = HashMap::from([(HOOK_TYPES.to_owned(), s("*"))]);
    assert!(meta_hook_types(&Fields::of(&damaged, "META")).is_err());
}
