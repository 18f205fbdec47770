//! The container image's recipe (`Dockerfile`, `.dockerignore`) against the repo
//! and the binary. No image can be built here, so this is hadolint
//! (`DELTAPILOT_HADOLINT`) plus a check of everything the file names: the Rust
//! version equals rust-toolchain.toml's, the package and binary exist, every
//! `DELTAPILOT_*` variable is one `deltapilot run --help` documents with a value
//! it accepts, the declared ports and volume are the ones those variables
//! configure (and the chart uses), the default command is a real subcommand,
//! the user is not root, and the build context keeps what the build needs.

mod deploy_support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;

use deploy_support::{DATA_DIR, chart, has_env, help, repo, run_ok, tool};

/// One instruction: keyword (upper case) and its arguments, continuation lines
/// joined.
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && cur.is_empty()) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(head) => {
                cur.push_str(head);
                cur.push(' ');
            }
            None => {
                cur.push_str(t);
                let (kw, rest) = cur.split_once(char::is_whitespace).unwrap_or((&cur, ""));
                out.push((kw.to_uppercase(), rest.trim().to_owned()));
                cur.clear();
            }
        }
    }
    assert!(cur.is_empty(), "Dockerfile ends inside a continued line");
    out
}

fn json_list(what: &str, s: &str) -> Vec<String> {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{what} {s}: not the JSON form: {e}"))
}

#[test]
fn dockerfile_lints_and_names_only_what_exists() {
    let path = repo().join("Dockerfile");
    run_ok(
        "hadolint Dockerfile",
        Command::new(tool("DELTAPILOT_HADOLINT")).arg(&path),
    );
    let text = std::fs::read_to_string(&path).expect("Dockerfile");
    let ins = instructions(&text);

    // Stages, and the toolchain of the build stage.
    let froms: Vec<&String> = ins
        .iter()
        .filter(|(k, _)| k == "FROM")
        .map(|(_, a)| a)
        .collect();
    assert!(froms.len() >= 2, "a multi-stage build");
    let channel = toolchain_channel();
    let build_image = froms[0].split_whitespace().next().expect("image");
    assert!(
        build_image.starts_with(&format!("rust:{channel}-")),
        "the build stage {build_image} must use rust-toolchain.toml's {channel}"
    );
    let stages: Vec<&str> = froms
        .iter()
        .filter_map(|f| {
            f.split_whitespace()
                .collect::<Vec<_>>()
                .windows(2)
                .find(|w| w[0].eq_ignore_ascii_case("AS"))
                .map(|w| w[1])
        })
        .collect();
    let runtime = froms.last().expect("runtime stage");
    assert!(
        runtime.contains("distroless") || runtime.contains("scratch"),
        "the runtime needs no shell: {runtime}"
    );

    // COPY: from the context, paths that exist; from a stage, a stage that exists.
    for (_, args) in ins.iter().filter(|(k, _)| k == "COPY") {
        let words: Vec<&str> = args.split_whitespace().collect();
        let from = words.iter().find_map(|w| w.strip_prefix("--from="));
        let paths: Vec<&&str> = words.iter().filter(|w| !w.starts_with("--")).collect();
        let (srcs, _dest) = paths.split_at(paths.len() - 1);
        match from {
            Some(stage) => assert!(
                stages.contains(&stage),
                "COPY --from={stage}: no such stage"
            ),
            None => {
                for s in srcs {
                    assert!(repo().join(s).exists(), "COPY {s}: not in the repo");
                }
            }
        }
    }

    // The cargo build names the server package and its binary.
    let server_toml = std::fs::read_to_string(repo().join("server/Cargo.toml")).expect("toml");
    let build = ins
        .iter()
        .find(|(k, a)| k == "RUN" && a.contains("cargo build"))
        .map(|(_, a)| a.clone())
        .expect("a cargo build");
    assert!(build.contains("--locked"), "the build uses Cargo.lock");
    let pkg = arg_after(&build, "-p");
    let bin = arg_after(&build, "--bin");
    assert!(
        server_toml.contains(&format!("name = \"{pkg}\"")) && pkg == env!("CARGO_PKG_NAME"),
        "-p {pkg} is not the server package"
    );
    assert!(
        server_toml.contains(&format!("[[bin]]\nname = \"{bin}\"")),
        "--bin {bin} is not a binary of {pkg}"
    );
    assert!(
        build.contains(&format!("target/release/{bin}")),
        "copies the binary it built"
    );

    // ENV: documented variables with values the binary accepts.
    let run_help = help(&["run"]);
    let mut env = BTreeMap::new();
    for (_, args) in ins.iter().filter(|(k, _)| k == "ENV") {
        for pair in args.split_whitespace() {
            let (k, v) = pair
                .split_once('=')
                .unwrap_or_else(|| panic!("ENV {pair}: use NAME=value"));
            env.insert(k.to_owned(), v.to_owned());
        }
    }
    for (k, v) in &env {
        if let Some(name) = k.strip_prefix("DELTAPILOT_") {
            assert!(
                has_env(&run_help, k),
                "ENV {k}: `deltapilot run` does not read it ({name})"
            );
        }
        if k.ends_with("_ADDR") {
            v.parse::<SocketAddr>()
                .unwrap_or_else(|e| panic!("ENV {k}={v}: {e}"));
        }
    }
    let port_of = |k: &str| -> u16 {
        env.get(k)
            .and_then(|v| v.parse::<SocketAddr>().ok())
            .unwrap_or_else(|| panic!("ENV {k} is not set"))
            .port()
    };
    let (xds, admin) = (
        port_of("DELTAPILOT_XDS_ADDR"),
        port_of("DELTAPILOT_ADMIN_ADDR"),
    );
    assert_eq!(
        env.get("DELTAPILOT_DATA_DIR").map(String::as_str),
        Some(DATA_DIR)
    );

    // EXPOSE and VOLUME are what those variables configure, and the chart's.
    let exposed: Vec<u16> = ins
        .iter()
        .filter(|(k, _)| k == "EXPOSE")
        .flat_map(|(_, a)| {
            a.split_whitespace()
                .map(|p| p.parse::<u16>().expect("EXPOSE port"))
        })
        .collect();
    assert_eq!(exposed, [xds, admin], "EXPOSE the xDS and admin ports");
    let values: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(chart().join("values.yaml")).expect("values.yaml"),
    )
    .expect("values");
    assert_eq!(
        values["xds"]["port"].as_u64(),
        Some(u64::from(xds)),
        "chart xds.port"
    );
    assert_eq!(
        values["admin"]["port"].as_u64(),
        Some(u64::from(admin)),
        "chart admin.port"
    );
    let volume = ins
        .iter()
        .find(|(k, _)| k == "VOLUME")
        .map(|(_, a)| json_list("VOLUME", a));
    assert_eq!(volume, Some(vec![DATA_DIR.to_owned()]));

    // The default command is `deltapilot run`, by the path the binary was copied to.
    let entry = ins
        .iter()
        .rfind(|(k, _)| k == "ENTRYPOINT")
        .map(|(_, a)| json_list("ENTRYPOINT", a))
        .expect("ENTRYPOINT");
    let cmd = ins
        .iter()
        .rfind(|(k, _)| k == "CMD")
        .map(|(_, a)| json_list("CMD", a))
        .expect("CMD");
    assert_eq!(cmd, ["run"]);
    assert!(
        ins.iter()
            .any(|(k, a)| k == "COPY" && a.contains("--from=") && a.ends_with(&entry[0])),
        "ENTRYPOINT {} is where the binary is copied",
        entry[0]
    );
    help(&cmd.iter().map(String::as_str).collect::<Vec<_>>());

    // Not root.
    let user = ins
        .iter()
        .rfind(|(k, _)| k == "USER")
        .map(|(_, a)| a.clone())
        .expect("USER");
    let uid: u32 = user
        .split(':')
        .next()
        .and_then(|u| u.parse().ok())
        .expect("a numeric USER");
    assert_ne!(uid, 0, "USER must not be root");
}

#[test]
fn dockerignore_keeps_the_build_inputs_and_drops_build_output() {
    let text = std::fs::read_to_string(repo().join(".dockerignore")).expect(".dockerignore");
    let patterns: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for must in ["target/", ".git/"] {
        assert!(patterns.contains(&must), ".dockerignore must drop {must}");
    }
    // Every workspace member and the files cargo needs stay in the context.
    let ws = std::fs::read_to_string(repo().join("Cargo.toml")).expect("Cargo.toml");
    let members = ws
        .split_once("members = [")
        .and_then(|(_, r)| r.split_once(']'))
        .map(|(m, _)| m)
        .expect("workspace members");
    let mut needed: Vec<String> = members
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .filter(|m| !m.is_empty())
        .collect();
    needed.extend(["Cargo.toml", "Cargo.lock", "rust-toolchain.toml"].map(String::from));
    for n in &needed {
        for p in &patterns {
            let p = p.trim_start_matches("**/").trim_end_matches('/');
            assert!(
                !(n == p || n.starts_with(&format!("{p}/"))),
                ".dockerignore pattern {p} drops {n}, which the build needs"
            );
        }
    }
}

fn arg_after(cmd: &str, flag: &str) -> String {
    let words: Vec<&str> = cmd.split_whitespace().collect();
    words
        .windows(2)
        .find(|w| w[0] == flag)
        .map(|w| w[1].to_owned())
        .unwrap_or_else(|| panic!("{cmd}: no {flag}"))
}

/// The `channel` of rust-toolchain.toml.
fn toolchain_channel() -> String {
    let text =
        std::fs::read_to_string(repo().join("rust-toolchain.toml")).expect("rust-toolchain.toml");
    text.lines()
        .find_map(|l| l.trim().strip_prefix("channel"))
        .and_then(|r| r.split('"').nth(1))
        .expect("channel = \"...\"")
        .to_owned()
}
