//! Project chores. `cargo xtask routes` writes the two copies of the route table that
//! deployment tools read — the `cargo lambda watch` router at the end of `Cargo.toml`, and each
//! API function's `HttpApi` events in `template.yaml` — from [`RouteGroup::endpoints`], so
//! that adding a route is one edit of `shared/api/src/routes.rs` and this command.
//! `cargo xtask routes --check` changes nothing and fails if either file is out of date (the
//! tests in `functions/tests/template.rs` check the same agreement).

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agentaddress_api::RouteGroup;

/// Where the generated router starts in `Cargo.toml`; it runs to the end of the file.
const ROUTER_HEADER: &str = "[workspace.metadata.lambda.watch.router]";
/// The methods `cargo lambda watch` is told about for every path.
const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
/// The function that answers what no other serves (404, 405 with `Allow`), as API Gateway's
/// `$default` route does.
const CATCH_ALL: &str = "service";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let check = args.iter().any(|a| a == "--check");
    match args.first().map(String::as_str) {
        Some("routes") => match routes(&root(), check) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("xtask routes: {e}");
                ExitCode::FAILURE
            }
        },
        _ => {
            eprintln!("usage: cargo xtask routes [--check]");
            ExitCode::from(2)
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every (method, path, function) the API functions serve, in the route table's order.
fn table() -> Vec<(&'static str, String, &'static str, &'static str)> {
    RouteGroup::ALL
        .iter()
        .flat_map(|g| {
            let routes = g.routes();
            let names: Vec<&'static str> = if *g == RouteGroup::Mcp {
                vec!["mcp"]
            } else {
                routes.routes.iter().map(|r| r.shape.operation).collect()
            };
            g.endpoints()
                .into_iter()
                .zip(names)
                .map(|((method, path), name)| (method, path, routes.function, name))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn routes(root: &Path, check: bool) -> Result<(), String> {
    let mut stale = Vec::new();
    for (file, make) in [
        (
            "Cargo.toml",
            cargo_router as fn(&str) -> Result<String, String>,
        ),
        ("template.yaml", template_events),
    ] {
        let path = root.join(file);
        let old = std::fs::read_to_string(&path).map_err(|e| format!("{file}: {e}"))?;
        let new = make(&old).map_err(|e| format!("{file}: {e}"))?;
        if new == old {
            continue;
        }
        if check {
            stale.push(file);
        } else {
            std::fs::write(&path, new).map_err(|e| format!("{file}: {e}"))?;
            eprintln!("xtask routes: wrote {file}");
        }
    }
    if stale.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} out of date with the route table: run `cargo xtask routes`",
            stale.join(" and ")
        ))
    }
}

/// `Cargo.toml` with its router (from [`ROUTER_HEADER`] to the end) written anew: each path's
/// served methods go to its function (`HEAD` with `GET`), every other method to [`CATCH_ALL`].
fn cargo_router(manifest: &str) -> Result<String, String> {
    let start = manifest
        .find(ROUTER_HEADER)
        .ok_or_else(|| format!("no {ROUTER_HEADER} section"))?;
    let mut paths: Vec<(String, Vec<(&str, &str)>)> = Vec::new();
    for (method, path, function, _) in table() {
        let at = match paths.iter().position(|(p, _)| *p == path) {
            Some(i) => i,
            None => {
                paths.push((path.clone(), Vec::new()));
                paths.len() - 1
            }
        };
        paths[at].1.push((method, function));
        if method == "GET" {
            paths[at].1.push(("HEAD", function));
        }
    }
    paths.push(("/{*path}".to_owned(), Vec::new()));
    let mut out = String::from(&manifest[..start]);
    out.push_str(ROUTER_HEADER);
    out.push('\n');
    for (path, served) in &paths {
        out.push_str(&format!("{path:?} = [\n"));
        for method in METHODS {
            let function = served
                .iter()
                .find(|(m, _)| *m == method)
                .map_or(CATCH_ALL, |(_, f)| f);
            out.push_str(&format!(
                "    {{ method = \"{method}\", function = \"{function}\" }},\n"
            ));
        }
        out.push_str("]\n");
    }
    Ok(out)
}

/// `template.yaml` with the `Events` of each API function written anew: one `HttpApi` event per
/// route of its group, named after its handler, and the catch-all's `$default` route.
fn template_events(template: &str) -> Result<String, String> {
    let mut lines: Vec<String> = template.lines().map(str::to_owned).collect();
    for group in RouteGroup::ALL {
        let function = group.function_name();
        let binary = lines
            .iter()
            .position(|l| l.trim() == format!("Binary: {function}"))
            .ok_or_else(|| format!("no function with `Binary: {function}`"))?;
        let events = (binary..lines.len())
            .find(|&i| lines[i] == "      Events:")
            .ok_or_else(|| format!("the {function} function has no `Events:`"))?;
        let end = (events + 1..lines.len())
            .find(|&i| {
                let l = &lines[i];
                !l.trim().is_empty() && l.len() - l.trim_start().len() <= 6
            })
            .unwrap_or(lines.len());
        // The blank lines (and comments of the next resource) before `end` stay where they are.
        let mut last = end;
        while last > events + 1 && {
            let l = lines[last - 1].trim();
            l.is_empty() || l.starts_with('#')
        } {
            last -= 1;
        }
        if lines[events + 1..last]
            .iter()
            .any(|l| l.trim() != "Type: HttpApi" && l.trim().starts_with("Type:"))
        {
            return Err(format!(
                "the {function} function has events other than HttpApi; this command writes only API functions' events"
            ));
        }
        let mut block = Vec::new();
        for (method, path, f, name) in table() {
            if f == function {
                block.extend(event(&camel(name), method, &format!("{path:?}")));
            }
        }
        if function == CATCH_ALL {
            block.extend(event("Fallback", "ANY", "\"$default\""));
        }
        lines.splice(events + 1..last, block);
    }
    let mut out = lines.join("\n");
    out.push('\n');
    Ok(out)
}

fn event(name: &str, method: &str, path: &str) -> Vec<String> {
    vec![
        format!("        {name}:"),
        "          Type: HttpApi".to_owned(),
        "          Properties:".to_owned(),
        "            ApiId: !Ref Api".to_owned(),
        format!("            Method: {method}"),
        format!("            Path: {path}"),
    ]
}

/// `create_address` → `CreateAddress`.
fn camel(snake: &str) -> String {
    snake
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}
