//! Helpers of the packaging tests (`deploy_*.rs`): the repo's `deploy/` files,
//! the helm and hadolint binaries from `scripts/install-test-deps.sh` (required:
//! a missing one fails the test), rendering the chart, and the `--help` text of
//! the real binary that every flag and variable is checked against.

#![allow(dead_code, unreachable_pub)]

pub mod pod;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The data directory: the image's volume and the chart's mount.
pub const DATA_DIR: &str = "/var/lib/deltapilot";

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("server/ has a parent")
        .to_path_buf()
}

/// The chart directory.
pub fn chart() -> PathBuf {
    repo().join("deploy/helm/deltapilot")
}

/// A required tool named by an environment variable; fails (never skips) when it
/// is missing.
pub fn tool(var: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(p) if Path::new(&p).is_file() => PathBuf::from(p),
        _ => panic!(
            "{var} is not set (or names no file): run scripts/install-test-deps.sh, then \
             `source ~/.cache/deltapilot-tools/env.sh`; this test never skips"
        ),
    }
}

/// Runs `cmd`, returning stdout, or panics with everything it printed.
pub fn run_ok(what: &str, cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap_or_else(|e| panic!("{what}: output is not UTF-8: {e}"))
}

/// The chart's CI value variants (`deploy/helm/ci/*.yaml`), by file stem, plus
/// `default` (the chart's own values) first.
pub fn variants() -> Vec<(String, Option<PathBuf>)> {
    let mut out = vec![("default".to_owned(), None)];
    let dir = repo().join("deploy/helm/ci");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    for f in files {
        let stem = f
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("utf-8 file name")
            .to_owned();
        out.push((stem, Some(f)));
    }
    out
}

/// `helm template` of the chart with `values` (and `--set` pairs): every
/// rendered manifest, as JSON values, with the template it came from.
pub fn render(values: Option<&Path>, set: &[&str]) -> Vec<(String, serde_json::Value)> {
    let text = render_text(values, set).unwrap_or_else(|e| panic!("{e}"));
    parse_manifests(&text)
}

/// `helm template`'s output, or its error message.
pub fn render_text(values: Option<&Path>, set: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new(tool("DELTAPILOT_HELM"));
    cmd.arg("template")
        .arg("dp")
        .arg(chart())
        .arg("--namespace")
        .arg("mesh");
    if let Some(v) = values {
        cmd.arg("--values").arg(v);
    }
    for s in set {
        cmd.arg("--set").arg(s);
    }
    let out = cmd.output().map_err(|e| format!("helm: {e}"))?;
    if out.status.success() {
        String::from_utf8(out.stdout).map_err(|e| e.to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Splits `helm template` output into documents, each with its `# Source:`.
pub fn parse_manifests(text: &str) -> Vec<(String, serde_json::Value)> {
    let mut out = Vec::new();
    for doc in text.split("\n---") {
        let source = doc
            .lines()
            .find_map(|l| l.strip_prefix("# Source: "))
            .unwrap_or("?")
            .to_owned();
        let v: serde_yaml::Value = serde_yaml::from_str(doc)
            .unwrap_or_else(|e| panic!("{source}: rendered YAML does not parse: {e}\n{doc}"));
        if v.is_null() {
            continue;
        }
        let json = serde_json::to_value(&v)
            .unwrap_or_else(|e| panic!("{source}: not representable as JSON: {e}"));
        out.push((source, json));
    }
    out
}

/// `deltapilot <args> --help` of the real binary.
pub fn help(args: &[&str]) -> String {
    run_ok(
        &format!("deltapilot {} --help", args.join(" ")),
        Command::new(env!("CARGO_BIN_EXE_deltapilot"))
            .args(args)
            .arg("--help"),
    )
}

/// Whether `help` documents the long flag `flag` (`--name`).
pub fn has_flag(help: &str, flag: &str) -> bool {
    help.lines().any(|l| {
        l.trim_start()
            .split([' ', ',', '='])
            .any(|word| word == flag)
    })
}

/// Whether `help` documents the environment variable `name`.
pub fn has_env(help: &str, name: &str) -> bool {
    help.contains(&format!("[env: {name}="))
}
