//! Bearer authentication of the address routes (docs/API.md, §0 and §9): missing or wrong
//! credentials, unknown and malformed ids, the case of the scheme.

use http::StatusCode;

use crate::common::{bearer_routes, get, route_req, Addr, TestApp};

#[tokio::test]
async fn bearer_routes_answer_401_for_missing_or_wrong_credentials() {
    let t = TestApp::new();
    let a = t.create().await;
    let b = t.create().await;
    let mut bodies = Vec::new();
    for (method, path, body) in bearer_routes(&a) {
        let variants: Vec<(&str, Option<String>)> = vec![
            ("missing", None),
            (
                "wrong token",
                Some(format!("Bearer aat_{}", "x".repeat(43))),
            ),
            ("other address's token", Some(format!("Bearer {}", b.token))),
            ("basic scheme", Some(format!("Basic {}", a.token))),
            ("token scheme", Some(format!("Token {}", a.token))),
            ("bare token", Some(a.token.clone())),
            ("empty bearer", Some("Bearer ".into())),
            ("empty header", Some(String::new())),
        ];
        for (what, auth) in variants {
            let mut r = route_req(&method, &path, &body);
            if let Some(v) = auth {
                r = r.header("authorization", v);
            }
            let resp = t.send(r).await;
            assert_eq!(
                resp.status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} with {what}: {}",
                resp.text
            );
            resp.err(StatusCode::UNAUTHORIZED, "unauthorized");
            bodies.push(resp.text);
        }
    }
    // No oracle: every 401 reads the same.
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "{bodies:?}");
    // Nothing happened to A (the DELETE with bad credentials did not delete it).
    t.inspect(&a).await;
    t.inspect(&b).await;
}

#[tokio::test]
async fn unknown_and_malformed_address_ids_answer_401_like_a_wrong_token() {
    let t = TestApp::new();
    let a = t.create().await;
    let wrong_token = t
        .send(get(&a.root).bearer(&format!("aat_{}", "y".repeat(43))))
        .await;
    wrong_token.err(StatusCode::UNAUTHORIZED, "unauthorized");
    let ids = [
        "addr_unknownunknownunknow".to_owned(),
        "addr_".to_owned() + &"a".repeat(60),
        "addr%21bang".to_owned(),
        "addr.dot".to_owned(),
        "..".to_owned(),
        "addr%20space".to_owned(),
        "%C3%A9".to_owned(),
    ];
    for id in &ids {
        let root = format!("/api/v1/addresses/{id}");
        let fake = Addr {
            root: root.clone(),
            ..a.clone()
        };
        for (method, path, body) in bearer_routes(&fake) {
            let r = t
                .send(route_req(&method, &path, &body).bearer(&a.token))
                .await;
            assert_eq!(
                r.status,
                StatusCode::UNAUTHORIZED,
                "{method} {path}: {}",
                r.text
            );
            r.err(StatusCode::UNAUTHORIZED, "unauthorized");
            assert_eq!(r.text, wrong_token.text, "no oracle for {path}");
        }
    }
}

#[tokio::test]
async fn bearer_scheme_is_case_insensitive() {
    let t = TestApp::new();
    let a = t.create().await;
    let r = t
        .send(get(&a.root).header("authorization", format!("bearer {}", a.token)))
        .await;
    r.ok(StatusCode::OK);
    let r = t
        .send(get(&a.root).header("authorization", format!("BEARER {}", a.token)))
        .await;
    r.ok(StatusCode::OK);
}
