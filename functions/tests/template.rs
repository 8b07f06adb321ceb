//! `template.yaml` and the `cargo lambda watch` router agree with the code: every route of the
//! router is deployed to the function of its group and nothing else is, every function's
//! `Binary` is a binary of this crate built with cargo-lambda for arm64 on provided.al2023,
//! and the purge function consumes the queue with per-message failures.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use agentaddress_api::RouteGroup;
use serde_norway::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn template() -> Value {
    let text = std::fs::read_to_string(root().join("template.yaml")).expect("read template.yaml");
    serde_norway::from_str(&text).expect("template.yaml is YAML")
}

fn crate_binaries() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("functions/Cargo.toml")).expect("Cargo.toml");
    let manifest: toml::Value = toml::from_str(&text).expect("TOML");
    manifest["bin"]
        .as_array()
        .expect("[[bin]] entries")
        .iter()
        .map(|b| b["name"].as_str().expect("bin name").to_owned())
        .collect()
}

/// Every route a Lambda function serves: every group's (`cargo xtask routes` writes them into
/// `template.yaml` and the `cargo lambda watch` router).
fn expected_routes() -> BTreeSet<(String, String, String)> {
    RouteGroup::ALL
        .iter()
        .flat_map(|g| {
            g.endpoints()
                .into_iter()
                .map(|(m, p)| (m.to_string(), p, g.function_name().to_owned()))
        })
        .collect()
}

fn s(v: &Value) -> String {
    v.as_str().map(str::to_owned).unwrap_or_default()
}

#[test]
fn template_routes_and_binaries_match_the_code() {
    let t = template();
    let globals = &t["Globals"]["Function"];
    assert_eq!(s(&globals["Runtime"]), "provided.al2023");
    assert_eq!(globals["Architectures"][0].as_str(), Some("arm64"));
    let binaries = crate_binaries();
    let resources = t["Resources"].as_mapping().expect("Resources");
    let mut routes = BTreeSet::new();
    let mut fallback = Vec::new();
    let mut deployed = BTreeSet::new();
    let mut sqs_consumers = Vec::new();
    for (name, r) in resources {
        if s(&r["Type"]) != "AWS::Serverless::Function" {
            continue;
        }
        let name = s(name);
        assert_eq!(
            s(&r["Metadata"]["BuildMethod"]),
            "rust-cargolambda",
            "{name}"
        );
        let binary = s(&r["Metadata"]["BuildProperties"]["Binary"]);
        assert!(
            binaries.contains(&binary),
            "{name}: Binary {binary:?} is not a binary of agentaddress-functions ({binaries:?})"
        );
        assert!(deployed.insert(binary.clone()), "{binary} deployed twice");
        let events = r["Properties"]["Events"]
            .as_mapping()
            .cloned()
            .unwrap_or_default();
        for (_, e) in events {
            match s(&e["Type"]).as_str() {
                "HttpApi" => {
                    let method = s(&e["Properties"]["Method"]).to_uppercase();
                    let path = s(&e["Properties"]["Path"]);
                    if path == "$default" {
                        fallback.push(binary.clone());
                    } else {
                        routes.insert((method, path, binary.clone()));
                    }
                }
                "SQS" => {
                    let types = &e["Properties"]["FunctionResponseTypes"];
                    assert_eq!(types[0].as_str(), Some("ReportBatchItemFailures"), "{name}");
                    sqs_consumers.push(binary.clone());
                }
                other => panic!("{name}: unexpected event type {other}"),
            }
        }
    }
    let expected = expected_routes();
    let missing: Vec<_> = expected.difference(&routes).collect();
    let extra: Vec<_> = routes.difference(&expected).collect();
    assert!(
        missing.is_empty(),
        "routes of the router missing from template.yaml (run `cargo xtask routes`): {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "routes in template.yaml that the router does not have (run `cargo xtask routes`): {extra:?}"
    );
    assert_eq!(
        fallback,
        vec!["service".to_owned()],
        "the catch-all goes to service"
    );
    sqs_consumers.sort();
    assert_eq!(
        sqs_consumers,
        vec![
            "email".to_owned(),
            "purge".to_owned(),
            "send".to_owned(),
            "wake".to_owned()
        ],
        "the queue consumers: the email, purge, send and wake queues'"
    );
    assert_eq!(deployed, binaries, "every binary of the crate is deployed");
}

/// `GET events` and the MCP tool `poll_events` long-poll up to 25 s.
#[test]
fn long_polling_functions_outlive_a_long_poll_but_not_the_http_api() {
    let t = template();
    for function in ["EventsFunction", "McpFunction"] {
        let timeout = t["Resources"][function]["Properties"]["Timeout"]
            .as_u64()
            .unwrap_or_else(|| panic!("{function} has its own timeout"));
        assert!(
            (26..30).contains(&timeout),
            "{function}: 25 s long poll < {timeout} s < 30 s HTTP API limit"
        );
    }
    let max_wait = t["Parameters"]["MaxWaitSeconds"]["MaxValue"].as_u64();
    assert_eq!(max_wait, Some(25));
}

#[test]
fn no_wildcard_data_permissions() {
    let text = std::fs::read_to_string(root().join("template.yaml")).expect("read");
    assert!(!text.contains("dynamodb:*"), "no dynamodb:*");
    assert!(!text.contains("sqs:*"), "no sqs:*");
    assert!(!text.contains("Resource: \"*\"") && !text.contains("Resource: '*'"));
}

#[test]
fn cargo_lambda_router_matches_the_code() {
    let text = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let manifest: toml::Value = toml::from_str(&text).expect("TOML");
    let router = manifest["workspace"]["metadata"]["lambda"]["watch"]["router"]
        .as_table()
        .expect("[workspace.metadata.lambda.watch.router]");
    let mut local: BTreeMap<(String, String), String> = BTreeMap::new();
    for (path, entries) in router {
        for e in entries.as_array().expect("array of routes") {
            let method = e["method"].as_str().expect("method").to_owned();
            let function = e["function"].as_str().expect("function").to_owned();
            local.insert((method, path.clone()), function);
        }
    }
    for (method, path, function) in expected_routes() {
        assert_eq!(
            local.get(&(method.clone(), path.clone())),
            Some(&function),
            "cargo lambda watch sends {method} {path} elsewhere (run `cargo xtask routes`)"
        );
    }
    for ((method, path), function) in &local {
        let routed = expected_routes()
            .iter()
            .any(|(m, p, f)| m == method && p == path && f == function);
        let head_of_get = method == "HEAD"
            && expected_routes()
                .iter()
                .any(|(m, p, f)| m == "GET" && p == path && f == function);
        assert!(
            routed || head_of_get || function == "service",
            "{method} {path} goes to {function}, which does not serve it"
        );
    }
}

/// Every function is covered by an alarm on its throttles, and every dead-letter queue by an
/// alarm on its depth, each notifying the stack's topic (README, "Metrics").
#[test]
fn every_function_and_dead_letter_queue_has_an_alarm() {
    let t = template();
    let resources = t["Resources"].as_mapping().expect("Resources");
    let of_type = |kind: &str| -> Vec<(String, String)> {
        resources
            .iter()
            .filter(|(_, r)| r["Type"].as_str() == Some(kind))
            .map(|(name, r)| {
                (
                    s(name),
                    serde_norway::to_string(&r["Properties"]).expect("serialize"),
                )
            })
            .collect()
    };
    let alarms = of_type("AWS::CloudWatch::Alarm");
    assert!(!alarms.is_empty(), "the template has alarms");
    for (name, body) in &alarms {
        assert!(
            body.contains("AlarmActions") && body.contains("AlarmTopic"),
            "{name} notifies the alarm topic"
        );
    }
    let functions = of_type("AWS::Serverless::Function");
    assert!(functions.len() >= 11);
    for (function, _) in &functions {
        let needle = format!("!Ref {function}\n");
        assert!(
            alarms
                .iter()
                .any(|(_, body)| body.contains("Throttles") && body.contains(&needle)),
            "{function} has no throttle alarm"
        );
    }
    let queues: Vec<String> = resources
        .iter()
        .filter(|(name, r)| {
            r["Type"].as_str() == Some("AWS::SQS::Queue") && s(name).ends_with("DeadLetterQueue")
        })
        .map(|(name, _)| s(name))
        .collect();
    assert_eq!(queues.len(), 4, "{queues:?}");
    for queue in &queues {
        assert!(
            alarms.iter().any(
                |(_, body)| body.contains("ApproximateNumberOfMessagesVisible")
                    && body.contains(&format!("{queue}.QueueName"))
            ),
            "{queue} has no depth alarm"
        );
    }
}

/// The wake-up socket (docs/API.md §17): a WebSocket API whose `$connect`, `$disconnect` and
/// `$default` routes run the `ws` function (two-way on `$default`), whose `ping` route is
/// answered by a mock integration, and whose connections only the functions that append may
/// post to, on this API's stage alone.
#[test]
fn socket_api_routes_and_notifier_permissions() {
    let t = template();
    let r = &t["Resources"];
    assert_eq!(s(&r["SocketApi"]["Type"]), "AWS::ApiGatewayV2::Api");
    assert_eq!(
        s(&r["SocketApi"]["Properties"]["ProtocolType"]),
        "WEBSOCKET"
    );
    assert_eq!(
        s(&r["SocketApi"]["Properties"]["RouteSelectionExpression"]),
        "$request.body.action"
    );
    assert_eq!(
        s(&r["WsFunction"]["Metadata"]["BuildProperties"]["Binary"]),
        "ws"
    );
    let uri = serde_norway::to_string(&r["SocketIntegration"]["Properties"]["IntegrationUri"])
        .expect("yaml");
    assert!(uri.contains("${WsFunction.Arn}"), "{uri}");
    assert_eq!(
        s(&r["SocketIntegration"]["Properties"]["IntegrationType"]),
        "AWS_PROXY"
    );
    let routes: BTreeMap<String, (String, String)> = r
        .as_mapping()
        .expect("Resources")
        .iter()
        .filter(|(_, v)| s(&v["Type"]) == "AWS::ApiGatewayV2::Route")
        .map(|(name, v)| {
            let p = &v["Properties"];
            let target = serde_norway::to_string(&p["Target"]).expect("yaml");
            (
                s(&p["RouteKey"]),
                (s(name), target + &s(&p["RouteResponseSelectionExpression"])),
            )
        })
        .collect();
    let keys: BTreeSet<&str> = routes.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        BTreeSet::from(["$connect", "$disconnect", "$default", "ping"])
    );
    for key in ["$connect", "$disconnect", "$default"] {
        assert!(routes[key].1.contains("${SocketIntegration}"), "{key}");
    }
    assert!(routes["ping"].1.contains("${SocketPingIntegration}"));
    assert_eq!(
        s(&r["SocketPingIntegration"]["Properties"]["IntegrationType"]),
        "MOCK"
    );
    let pong = serde_norway::to_string(&r["SocketPingIntegrationResponse"]).expect("yaml");
    assert!(pong.contains(r#"{"type": "pong"}"#), "{pong}");
    // Two-way routes have a route response.
    for (key, route) in [
        ("$default", "SocketDefaultRoute"),
        ("ping", "SocketPingRoute"),
    ] {
        assert!(routes[key].1.ends_with("$default"), "{key} is two-way");
        let has_response = r.as_mapping().expect("Resources").values().any(|v| {
            s(&v["Type"]) == "AWS::ApiGatewayV2::RouteResponse"
                && serde_norway::to_string(&v["Properties"]["RouteId"])
                    .expect("yaml")
                    .contains(route)
        });
        assert!(has_response, "{route} has a route response");
    }
    let permission = serde_norway::to_string(&r["WsPermission"]).expect("yaml");
    assert!(permission.contains("apigateway.amazonaws.com") && permission.contains("${SocketApi}"));
    // The notifier may post to this API's connections only.
    let policy = serde_norway::to_string(&r["SocketNotifierPolicy"]).expect("yaml");
    assert!(policy.contains("execute-api:ManageConnections"));
    assert!(
        policy.contains("${SocketApi}/live/POST/@connections/*"),
        "{policy}"
    );
    for function in [
        "AddressFunction",
        "InboxFunction",
        "EventsFunction",
        "StateFunction",
        "RequestsFunction",
        "McpFunction",
        "OutboundFunction",
        "SendFunction",
        "EmailFunction",
        "EmailApiFunction",
        "PurgeFunction",
    ] {
        let policies =
            serde_norway::to_string(&r[function]["Properties"]["Policies"]).expect("yaml");
        assert!(
            policies.contains("SocketNotifierPolicy"),
            "{function} appends (or handles expiry watches), so it tells the sockets"
        );
    }
    // A subscribe starts an expiry watch: a message on the purge queue.
    let ws = serde_norway::to_string(&r["WsFunction"]["Properties"]["Policies"]).expect("yaml");
    assert!(
        ws.contains("sqs:SendMessage") && ws.contains("PurgeQueue"),
        "{ws}"
    );
    let env = &t["Globals"]["Function"]["Environment"]["Variables"];
    for var in ["AGENTADDRESS_WS_URL", "AGENTADDRESS_WS_MANAGEMENT_URL"] {
        let v = serde_norway::to_string(&env[var]).expect("yaml");
        assert!(
            v.contains("${SocketApi}") && v.contains("/live"),
            "{var}: {v}"
        );
    }
    let out = serde_norway::to_string(&t["Outputs"]["SocketUrl"]).expect("yaml");
    assert!(out.contains("wss://${SocketApi}"), "{out}");
}

/// Timers (docs/API.md §20): the functions that create timers (`requests`, and `mcp`'s tools)
/// arm the address's timer watch on the purge queue, and are updated after the purge function,
/// which handles those watches by firing the due timers (appends: PutItem, UpdateItem, and the
/// pending timer's DeleteItem through SocketNotifierPolicy).
#[test]
fn timer_watches_are_sent_by_the_timer_functions_and_handled_by_purge() {
    let t = template();
    let r = &t["Resources"];
    for function in ["RequestsFunction", "McpFunction"] {
        let policies =
            serde_norway::to_string(&r[function]["Properties"]["Policies"]).expect("yaml");
        assert!(
            policies.contains("sqs:SendMessage") && policies.contains("PurgeQueue"),
            "{function} arms timer watches: {policies}"
        );
        assert_eq!(
            s(&r[function]["DependsOn"]),
            "PurgeFunction",
            "{function} is updated after the purge function knows timer watches"
        );
    }
    let purge =
        serde_norway::to_string(&r["PurgeFunction"]["Properties"]["Policies"]).expect("yaml");
    for action in [
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "SocketNotifierPolicy",
    ] {
        assert!(
            purge.contains(action),
            "PurgeFunction fires timers: {action}"
        );
    }
    let notifier = serde_norway::to_string(&r["SocketNotifierPolicy"]).expect("yaml");
    assert!(notifier.contains("dynamodb:DeleteItem"), "{notifier}");
}

/// Waiting never starves writing (docs/SCALE.md): every function that receives (the inbox, the
/// email doors) or consumes a queue has concurrency reserved by `ReceiverReservedConcurrency`;
/// the functions that wait have none reserved (a reservation would take capacity from the
/// others, and a Lambda throttle answers without `Retry-After`) and read the stack-wide cap
/// `WaitingPollCap` from `AGENTADDRESS_MAX_WAITING_POLLS` instead. Both parameters have
/// defaults that deploy.
#[test]
fn receivers_have_reserved_concurrency_and_waits_a_cap() {
    let t = template();
    let resources = t["Resources"].as_mapping().expect("Resources");
    let reserved = |f: &str| {
        let v = &t["Resources"][f]["Properties"]["ReservedConcurrentExecutions"];
        (!v.is_null()).then(|| format!("{v:?}"))
    };
    let receivers = [
        "InboxFunction",
        "EmailFunction",
        "EmailApiFunction",
        "SendFunction",
        "WakeFunction",
        "PurgeFunction",
    ];
    for f in receivers {
        let r = reserved(f).unwrap_or_else(|| panic!("{f} has no reserved concurrency"));
        assert!(r.contains("ReceiverReservedConcurrency"), "{f}: {r}");
    }
    // Every queue consumer is among them.
    for (name, res) in resources {
        let name = s(name);
        let consumes = res["Properties"]["Events"]
            .as_mapping()
            .into_iter()
            .flatten()
            .any(|(_, e)| s(&e["Type"]) == "SQS");
        if consumes {
            assert!(
                receivers.contains(&name.as_str()),
                "{name} consumes a queue"
            );
            // Its pollers are held to the reservation (a batch it could not take would count
            // as a receive towards the dead-letter queue).
            for (_, e) in res["Properties"]["Events"]
                .as_mapping()
                .into_iter()
                .flatten()
            {
                if s(&e["Type"]) == "SQS" {
                    let scaling = format!("{:?}", e["Properties"]["ScalingConfig"]);
                    assert!(
                        scaling.contains("ReceiverReservedConcurrency"),
                        "{name}: {scaling}"
                    );
                }
            }
        }
    }
    for f in ["EventsFunction", "RequestsFunction", "McpFunction"] {
        assert_eq!(reserved(f), None, "{f} waits: capped, not reserved");
    }
    let env = &t["Globals"]["Function"]["Environment"]["Variables"];
    let cap = format!("{:?}", env["AGENTADDRESS_MAX_WAITING_POLLS"]);
    assert!(cap.contains("WaitingPollCap"), "{cap}");
    for p in ["WaitingPollCap", "ReceiverReservedConcurrency"] {
        let default = t["Parameters"][p]["Default"].as_u64();
        assert!(
            default.is_some_and(|d| d > 0),
            "{p} defaults to {default:?}"
        );
    }
    // Lambda keeps 100 of an account's 1,000 unreserved: the default reservations fit.
    let per = t["Parameters"]["ReceiverReservedConcurrency"]["Default"]
        .as_u64()
        .unwrap_or(0);
    let waits = t["Parameters"]["WaitingPollCap"]["Default"]
        .as_u64()
        .unwrap_or(0);
    assert!(per * receivers.len() as u64 + waits <= 900);
}

/// Hot addresses (docs/SCALE.md, "Hot addresses"): an alarm fires when the table throttles
/// (reads or writes), and `HotKeyInsights` turns on DynamoDB Contributor Insights, which names
/// the throttled partition keys — the hot addresses.
#[test]
fn a_hot_address_is_alarmed_and_can_be_named() {
    let t = template();
    let alarm = &t["Resources"]["TableThrottleAlarm"]["Properties"];
    let metrics = format!("{:?}", alarm["Metrics"]);
    for m in ["ReadThrottleEvents", "WriteThrottleEvents", "AWS/DynamoDB"] {
        assert!(metrics.contains(m), "TableThrottleAlarm lacks {m}");
    }
    assert!(format!("{:?}", alarm["AlarmActions"]).contains("AlarmTopic"));
    let insights = format!(
        "{:?}",
        t["Resources"]["Table"]["Properties"]["ContributorInsightsSpecification"]
    );
    assert!(insights.contains("HotKeyInsightsOn"), "{insights}");
    assert_eq!(
        t["Parameters"]["HotKeyInsights"]["AllowedValues"],
        serde_norway::from_str::<Value>("[\"true\", \"false\"]").expect("yaml")
    );
}
