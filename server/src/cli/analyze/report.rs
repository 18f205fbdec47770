//! What `deltapilot analyze` prints: one [`Message`] per problem, as text or
//! JSON, and the impact preview.
//!
//! Text, one line per message, compiler style when the file is known:
//!
//! ```text
//! mesh/rules.yaml:12: error DP2005 VirtualService demo/hello at http[0].route[0].destination.subset [hello.demo.local:8080 sidecar]: ...
//! warning DP3001 DestinationRule demo/old at hosts: host old.demo.local matches no service ...
//! ```
//!
//! What it does NOT do: analyze (see the module above).

use std::collections::BTreeMap;
use std::io::Write as _;

use deltapilot_adapters::file::{FileProblem, Origin, ProblemKind};
use serde::Serialize;
use serde_json::{Value, json};

use super::Format;
use crate::cli::replay::diff::unified;

/// One problem, wherever it was found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) struct Message {
    /// The file, when known.
    file: Option<String>,
    /// 1-based line, when known.
    line: Option<usize>,
    /// 1-based column, when known.
    column: Option<usize>,
    /// Stable code.
    code: String,
    /// `error` or `warning`.
    severity: String,
    /// Object kind (`VirtualService`, …), when the problem concerns one.
    kind: Option<String>,
    /// Its namespace.
    namespace: Option<String>,
    /// Its name.
    name: Option<String>,
    /// Where in the spec (`http[0].route[1].weight`), when known.
    path: Option<String>,
    /// The host, port and client flavour a route problem was found for.
    host: Option<String>,
    /// The port of `host`.
    port: Option<u64>,
    /// `sidecar` or `proxyless-grpc`.
    client: Option<String>,
    /// What is wrong and what deltapilot does about it.
    message: String,
}

impl Message {
    fn is_error(&self) -> bool {
        self.severity == "error"
    }

    /// An event the fold skips.
    pub(crate) fn skipped(key: Option<&str>, reason: &str, detail: &str) -> Message {
        Message {
            file: None,
            line: None,
            column: None,
            code: "DP0010".into(),
            severity: "warning".into(),
            kind: None,
            namespace: None,
            name: key.map(str::to_owned),
            path: None,
            host: None,
            port: None,
            client: None,
            message: format!("the fold skips this ({reason}): {detail}"),
        }
    }

    fn text(&self) -> String {
        let mut s = String::new();
        if let Some(f) = &self.file {
            s.push_str(f);
            if let Some(l) = self.line {
                s.push_str(&format!(":{l}"));
                if let Some(c) = self.column {
                    s.push_str(&format!(":{c}"));
                }
            }
            s.push_str(": ");
        }
        s.push_str(&format!("{} {}", self.severity, self.code));
        match (&self.kind, &self.namespace, &self.name) {
            (Some(k), Some(ns), Some(n)) => s.push_str(&format!(" {k} {ns}/{n}")),
            (_, _, Some(n)) => s.push_str(&format!(" {n}")),
            _ => {}
        }
        if let Some(p) = self.path.as_ref().filter(|p| !p.is_empty()) {
            s.push_str(&format!(" at {p}"));
        }
        if let (Some(h), Some(port)) = (&self.host, self.port) {
            s.push_str(&format!(
                " [{h}:{port} {}]",
                self.client.as_deref().unwrap_or("")
            ));
        }
        s.push_str(": ");
        s.push_str(&self.message);
        s
    }
}

fn code_of(kind: ProblemKind) -> (&'static str, &'static str) {
    match kind {
        ProblemKind::InvalidFile => ("DP0001", "error"),
        ProblemKind::MalformedDocument => ("DP0002", "error"),
        ProblemKind::IgnoredDocument => ("DP0003", "warning"),
        ProblemKind::SkippedPart => ("DP0004", "warning"),
        ProblemKind::Conflict => ("DP0005", "error"),
        ProblemKind::InvalidDirectory => ("DP0006", "error"),
    }
}

/// A file adapter problem as a message.
pub(crate) fn file_message(p: &FileProblem) -> Message {
    let (code, severity) = code_of(p.kind);
    let message = match p.document {
        Some(d) => format!("document {}: {}", d + 1, p.reason),
        None => p.reason.clone(),
    };
    Message {
        file: Some(p.path.display().to_string()),
        line: p.line,
        column: p.column,
        code: code.into(),
        severity: severity.into(),
        kind: None,
        namespace: None,
        name: None,
        path: None,
        host: None,
        port: None,
        client: None,
        message,
    }
}

/// A problem of `rules_view::problem_list` as a message, placed at `origin`.
pub(crate) fn rule_message(p: &Value, origin: Option<&Origin>) -> Message {
    let s = |k: &str| p[k].as_str().map(str::to_owned);
    // From the files read here, else from the server (its file adapter's).
    let (file, line) = match origin {
        Some(o) => (Some(o.path.display().to_string()), o.line),
        None => (s("file"), p["line"].as_u64().map(|l| l as usize)),
    };
    Message {
        file,
        line,
        column: None,
        code: s("code").unwrap_or_default(),
        severity: s("severity").unwrap_or_else(|| "error".into()),
        kind: s("kind"),
        namespace: s("namespace"),
        name: s("name"),
        path: s("path"),
        host: s("host"),
        port: p["port"].as_u64(),
        client: s("client"),
        message: s("message").unwrap_or_default(),
    }
}

fn counts(messages: &[Message]) -> Value {
    let errors = messages.iter().filter(|m| m.is_error()).count();
    json!({ "error": errors, "warning": messages.len() - errors })
}

fn write_out(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()?;
    Ok(())
}

/// Prints `messages` (sorted: by file and line, then code) with how many
/// `rules` were checked, and returns whether any is error-level.
pub(crate) fn print_messages(
    messages: &[Message],
    rules: usize,
    format: Format,
) -> anyhow::Result<bool> {
    let mut sorted = messages.to_vec();
    sorted.sort();
    let errors = sorted.iter().any(Message::is_error);
    let text = match format {
        Format::Json => {
            let mut v = serde_json::to_vec_pretty(&json!({
                "messages": sorted,
                "counts": counts(&sorted),
                "rules": rules,
            }))?;
            v.push(b'\n');
            v
        }
        Format::Text => text_lines(&sorted, rules).into_bytes(),
    };
    write_out(&text)?;
    Ok(errors)
}

fn text_lines(sorted: &[Message], rules: usize) -> String {
    let mut s = String::new();
    for m in sorted {
        s.push_str(&m.text());
        s.push('\n');
    }
    let c = counts(sorted);
    if sorted.is_empty() {
        s.push_str(&format!("no problems found ({rules} rule(s) checked)\n"));
    } else {
        s.push_str(&format!(
            "{} error(s), {} warning(s)\n",
            c["error"], c["warning"]
        ));
    }
    s
}

fn pretty(v: &Value) -> String {
    if v.is_null() {
        return String::new();
    }
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

/// Prints the answer of `/debug/impact` (see `admin::impact`), the local file
/// problems first; returns whether the change would introduce an error-level
/// problem or a file does not parse.
pub(crate) fn print_impact(
    answer: &Value,
    local: &[Message],
    origins: &BTreeMap<String, Origin>,
    format: Format,
) -> anyhow::Result<bool> {
    let place = |list: &Value| -> Vec<Message> {
        list.as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
            .iter()
            .map(|p| rule_message(p, p["key"].as_str().and_then(|k| origins.get(k))))
            .collect()
    };
    let introduced = place(&answer["problems_introduced"]);
    let resolved = place(&answer["problems_resolved"]);
    let errors = local.iter().chain(&introduced).any(Message::is_error);
    let changes = answer["changes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let diffs: Vec<String> = changes
        .iter()
        .map(|c| unified(&pretty(&c["old"]), &pretty(&c["new"]), "    "))
        .collect();
    let out = match format {
        Format::Json => {
            let mut v = answer.clone();
            if let Some(list) = v["changes"].as_array_mut() {
                for (c, d) in list.iter_mut().zip(&diffs) {
                    c["diff"] = json!(d);
                }
            }
            v["problems_introduced"] = json!(introduced);
            v["problems_resolved"] = json!(resolved);
            v["messages"] = json!(local);
            let mut b = serde_json::to_vec_pretty(&v)?;
            b.push(b'\n');
            b
        }
        Format::Text => {
            let mut s = String::new();
            let mut sorted = local.to_vec();
            sorted.sort();
            for m in &sorted {
                s.push_str(&m.text());
                s.push('\n');
            }
            s.push_str(&format!(
                "impact against the state at position {} (snapshot {}); nothing was applied or written to the log\n",
                answer["position"].as_str().unwrap_or("?"),
                answer["seq"]
            ));
            if changes.is_empty() {
                s.push_str("no xDS resource would change\n");
            }
            for (c, d) in changes.iter().zip(&diffs) {
                let mark = match c["action"].as_str() {
                    Some("added") => '+',
                    Some("removed") => '-',
                    _ => '~',
                };
                let by_type: Vec<String> = c["proxies"]
                    .as_object()
                    .map(|m| m.iter().map(|(t, n)| format!("{t} {n}")).collect())
                    .unwrap_or_default();
                s.push_str(&format!(
                    "{mark} {} {} {}: {} connected prox{} would receive it{}\n",
                    c["type"].as_str().unwrap_or("?"),
                    c["name"].as_str().unwrap_or("?"),
                    c["action"].as_str().unwrap_or("?"),
                    c["proxies_total"],
                    if c["proxies_total"] == 1 { "y" } else { "ies" },
                    if by_type.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", by_type.join(", "))
                    }
                ));
                s.push_str(d);
            }
            for (title, list) in [
                ("problems the change would introduce", &introduced),
                ("problems the change would resolve", &resolved),
            ] {
                if list.is_empty() {
                    continue;
                }
                s.push_str(&format!("{title}:\n"));
                for m in list {
                    s.push_str(&format!("  {}\n", m.text()));
                }
            }
            for key in ["skipped", "gen_errors"] {
                for x in answer[key].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                    s.push_str(&format!("{key}: {x}\n"));
                }
            }
            s.into_bytes()
        }
    };
    write_out(&out)?;
    Ok(errors)
}
