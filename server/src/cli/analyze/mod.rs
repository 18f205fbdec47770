//! `deltapilot analyze`: every problem with the traffic rules, one message each,
//! with a stable code, in the spirit of `istioctl analyze`.
//!
//! - `analyze PATH…`: reads files and directories exactly as the file adapter
//!   does (its parser, its last-good rules, its desired view; nothing is
//!   written), folds the result in memory through the engine's own fold, and
//!   reports parse problems (with file, line and column), rule problems
//!   (`DP1xxx`), route and policy problems (`DP2xxx`) and references the
//!   registry cannot satisfy (`DP3xxx`), each with the object's kind, namespace,
//!   name, and the file and first line of its document. Only the given files
//!   are known: a host served by another registry reads as missing (`DP3001`).
//! - `analyze --admin ADDR`: the same for a running server, from `/debug/rules`
//!   (with file and line where the server's in-process file adapter knows them:
//!   the log holds objects, not where they were written; see
//!   `deltapilot_adapters::file::Loaded::origins`), plus, from `/debug/syncz`,
//!   every Gateway that selects no connected proxy (`DP3005`, warning).
//!
//! Both modes report the cross-rule references of `/debug/rules`: `DP3003`
//! (a VirtualService bound to a Gateway that does not exist) and `DP3004` (a
//! Sidecar hiding a host a VirtualService of its namespace routes to).
//! - `analyze --impact PATH… --admin ADDR`: folds the files' objects onto the
//!   server's current state in memory (`POST /debug/impact`; nothing reaches
//!   the log) and prints every resource that would be added, changed or
//!   removed, with a unified diff of its Envoy config (the JSON `proxy-config`
//!   shows) and the connected proxies, by type, that would receive it, then the
//!   problems the change would introduce and resolve.
//!
//! Parse problems get codes of their own:
//!
//! | code | severity | meaning |
//! | --- | --- | --- |
//! | `DP0001` | error | the file cannot be used: not valid YAML, not UTF-8, unreadable or too large |
//! | `DP0002` | error | a document is malformed (no name, a field of the wrong type, …); it is skipped |
//! | `DP0003` | warning | a document of a kind or API group the adapter does not carry; ignored |
//! | `DP0004` | warning | part of an object left out (an endpoint whose address is not an IP) |
//! | `DP0005` | error | the object is defined twice; the first in path order wins |
//! | `DP0006` | error | a directory cannot be listed |
//! | `DP0010` | warning | the fold skips an event (e.g. an endpoint of a service that does not exist) |
//!
//! Output: text by default, one line per message and a summary; `-o json`:
//! one object `{"messages": [...], "counts": {"error": N, "warning": N},
//! "rules": N}` (`rules`: how many VirtualServices and DestinationRules were
//! checked) (with `--impact`,
//! the server's answer plus a `diff` per change and the local `messages`).
//!
//! Exit status: 0 when no error-level problem was found (warnings allowed), 3
//! when at least one was (with `--impact`: one the change would introduce, or a
//! file that does not parse), 1 when the analysis itself could not run (a path
//! that does not exist, an unreachable server).
//!
//! What it does NOT do: write to the log or change the server.

mod report;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use deltapilot_adapters::file::{Loaded, load_paths};
use deltapilot_log::RecordPos;
use deltapilot_model::fold::fold_iter;
use deltapilot_model::state::ModelState;
use deltapilot_proto::event::Payload;
use deltapilot_server::admin::impact::encode_events;
use deltapilot_server::admin::rules_view::{problem_list, rules_report};
use deltapilot_xds::generate::GenOptions;
use serde_json::Value;

use self::report::{Message, file_message, print_impact, print_messages, rule_message};
use super::proxy_status::request;

/// The exit status when error-level problems were found.
pub(crate) const EXIT_PROBLEMS: u8 = 3;

/// Returned (as an error) when error-level problems were found: `main` exits
/// with [`EXIT_PROBLEMS`] without printing more (the report is out).
#[derive(Debug)]
pub(crate) struct ProblemsFound;

impl std::fmt::Display for ProblemsFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("error-level problems found")
    }
}

impl std::error::Error for ProblemsFound {}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// One line per message.
    Text,
    /// One JSON object.
    Json,
}

/// Arguments of `deltapilot analyze`.
#[derive(Debug, clap::Args)]
pub(crate) struct AnalyzeArgs {
    /// Files and directories of Istio YAML (directories as the file adapter
    /// reads them: `*.yaml`, `*.yml`, `*.json`, not recursive).
    #[arg(value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// A running server's admin address: analyze its state (or, with --impact,
    /// preview PATHs against it).
    #[arg(long, value_name = "ADDR")]
    admin: Option<SocketAddr>,
    /// Preview what PATHs would change on the server at --admin, applying nothing.
    #[arg(long, requires = "admin")]
    impact: bool,
    /// As `run --root-namespace`, for PATHs: whose selector-less Sidecar is the
    /// mesh default (with --admin the server's own applies) [default: istio-system].
    #[arg(long, value_name = "NAMESPACE", conflicts_with = "admin")]
    root_namespace: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    output: Format,
}

/// The source the analyzed objects are folded under (never written anywhere).
const SOURCE: &str = "analyze";

/// Runs `deltapilot analyze`.
pub(crate) async fn main(args: AnalyzeArgs) -> anyhow::Result<()> {
    let (messages, rules) = match (&args.admin, args.impact, args.paths.is_empty()) {
        (Some(addr), true, false) => return impact(*addr, &args).await,
        (_, true, true) => {
            bail!("--impact needs the files to preview: analyze --impact FILE… --admin ADDR")
        }
        (Some(addr), false, true) => remote(*addr).await?,
        (Some(_), false, false) => bail!(
            "give either PATHs (analyze them alone) or --admin (analyze the server), or both with --impact (preview PATHs on the server)"
        ),
        (None, _, true) => bail!("nothing to analyze: give files or directories, or --admin ADDR"),
        (None, _, false) => local(&args.paths, args.root_namespace.as_deref())?,
    };
    finish(print_messages(&messages, rules, args.output)?)
}

fn finish(errors: bool) -> anyhow::Result<()> {
    if errors {
        Err(ProblemsFound.into())
    } else {
        Ok(())
    }
}

/// Paths stay as given, so messages name files the way the operator did.
fn load(paths: &[PathBuf]) -> anyhow::Result<Loaded> {
    load_paths(paths, SOURCE).context("reading the input")
}

/// Folds `loaded` into an empty state, as the engine would from a log holding
/// only these events.
fn fold_loaded(loaded: &Loaded) -> (ModelState, Vec<Message>) {
    let out = fold_iter(
        &ModelState::default(),
        loaded.events.iter().enumerate().map(|(i, e)| {
            (
                RecordPos {
                    partition: 0,
                    offset: i as u64,
                },
                e,
            )
        }),
    );
    let skipped = out
        .skipped
        .iter()
        .map(|s| Message::skipped(s.key.as_deref(), s.reason.as_str(), &s.detail))
        .collect();
    (out.state, skipped)
}

/// The messages, and how many rules were checked.
fn local(paths: &[PathBuf], root_namespace: Option<&str>) -> anyhow::Result<(Vec<Message>, usize)> {
    let loaded = load(paths)?;
    let (model, mut messages) = fold_loaded(&loaded);
    messages.extend(loaded.problems.iter().map(file_message));
    let mut opts = GenOptions::default();
    if let Some(ns) = root_namespace {
        opts.root_namespace = ns.to_owned();
    }
    for p in problem_list(&rules_report(&model, &opts)) {
        let origin = p["key"].as_str().and_then(|k| loaded.origins.get(k));
        messages.push(rule_message(&p, origin));
    }
    Ok((messages, model.rules().rules().count()))
}

async fn get_json(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> anyhow::Result<Value> {
    let (status, body) = request(addr, method, path, body).await?;
    let v: Value = serde_json::from_slice(&body).with_context(|| {
        let text = String::from_utf8_lossy(&body);
        let head: String = text.chars().take(200).collect();
        format!("{method} {path} at {addr}: the answer (status {status}) is not JSON: {head}")
    })?;
    if status != 200 {
        let why = v["error"].as_str().unwrap_or("(no reason given)");
        if status == 404 {
            bail!(
                "{method} {path} at {addr}: 404 {why} (is this deltapilot with its debug endpoints on?)"
            );
        }
        bail!("{method} {path} at {addr}: {status} {why}");
    }
    Ok(v)
}

async fn remote(addr: SocketAddr) -> anyhow::Result<(Vec<Message>, usize)> {
    let report = get_json(addr, "GET", "/debug/rules", None).await?;
    let rules = report["rules"].as_array().map_or(0, Vec::len);
    let mut messages: Vec<Message> = problem_list(&report)
        .iter()
        .map(|p| rule_message(p, None))
        .collect();
    let syncz = get_json(addr, "GET", "/debug/syncz", None).await?;
    messages.extend(
        idle_gateways(&report, &syncz)
            .iter()
            .map(|p| rule_message(p, None)),
    );
    Ok((messages, rules))
}

/// `DP3005`: the Gateways of a `/debug/rules` report that select no proxy
/// connected now, by the view keys `/debug/syncz` lists (`gateway/<id>,…`):
/// their listeners reach no router.
fn idle_gateways(report: &Value, syncz: &Value) -> Vec<Value> {
    let selected: std::collections::BTreeSet<&str> = syncz["proxies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["view_key"].as_str()?.strip_prefix("gateway/"))
        .flat_map(|ids| ids.split(','))
        .collect();
    report["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["kind"] == "Gateway")
        .filter_map(|r| {
            let id = format!("{}/{}", r["namespace"].as_str()?, r["name"].as_str()?);
            if selected.contains(id.as_str()) {
                return None;
            }
            let mut m = serde_json::json!({
                "key": r["key"], "kind": "Gateway", "namespace": r["namespace"], "name": r["name"],
                "code": "DP3005", "severity": "warning", "path": "selector",
                "message": format!(
                    "Gateway {id} selects no connected proxy: its listeners reach no router \
                     (no router connected now carries labels matching its selector)"
                ),
            });
            for k in ["file", "line"] {
                if !r[k].is_null() {
                    m[k] = r[k].clone();
                }
            }
            Some(m)
        })
        .collect()
}

async fn impact(addr: SocketAddr, args: &AnalyzeArgs) -> anyhow::Result<()> {
    let loaded = load(&args.paths)?;
    let local: Vec<Message> = loaded.problems.iter().map(file_message).collect();
    let events: Vec<_> = loaded
        .events
        .iter()
        .filter(|e| !matches!(e.payload, Some(Payload::Resync(_))))
        .cloned()
        .collect();
    if events.is_empty() {
        print_messages(&local, 0, args.output)?;
        bail!("the input holds no object to preview");
    }
    let answer = get_json(addr, "POST", "/debug/impact", Some(&encode_events(&events))).await?;
    finish(print_impact(&answer, &local, &loaded.origins, args.output)?)
}
