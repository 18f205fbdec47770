//! The human format of `deltapilot log`: one JSON object per line.
//!
//! A line is an `Event` in canonical proto3 JSON (pbjson: camelCase names, enums as
//! their names, 64-bit integers as strings, default values omitted) with one extra
//! top-level key, `"position"`, that `log read` and `log tail` add and `log append`
//! ignores. So `log read` prints exactly what `log append` accepts, and a log copies
//! with `log read --log A | log append --log B --file -`.
//!
//! When parsing, this module fills two defaults and refuses anything the log must
//! not hold: a syntax error (with its column), an unknown field, a missing payload,
//! an event that has no entity key, and a schema version this build cannot write.
//!
//! What it does NOT do: I/O (reading files, writing stdout) or validate semantics
//! that depend on state (ports in range, services that exist): that is the fold's.

use deltapilot_log::RecordPos;
use deltapilot_proto::{ConfigKind, Event, SCHEMA_VERSION, event::Payload, resync_marker::Phase};
use serde::Serialize;
use serde_json::Value;

/// The extra key `log read` adds to every line; `log append` ignores it.
pub(crate) const POSITION_KEY: &str = "position";

/// The key of the last line `log read`/`log tail` print when they stop on a bad
/// record. `log append` refuses a line carrying it, so a copy through a pipe fails as
/// a whole instead of silently copying a prefix of the log.
pub(crate) const ERROR_KEY: &str = "error";

/// The payload field names an event must carry exactly one of (for messages).
const PAYLOAD_FIELDS: &str = "serviceUpsert, serviceDelete, endpointUpsert, endpointDelete, \
                              configUpsert, configDelete or resync";

/// One parsed event and the input line it came from (1-based).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LineEvent {
    /// Input line number, 1-based.
    pub(crate) line: usize,
    /// The event, with defaults filled in.
    pub(crate) event: Event,
}

/// Why one input line was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LineError {
    /// Input line number, 1-based.
    pub(crate) line: usize,
    /// What is wrong, for a human.
    pub(crate) reason: String,
}

/// The result of parsing a whole input.
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    /// Events in input order.
    pub(crate) events: Vec<LineEvent>,
    /// Every refused line, in input order.
    pub(crate) errors: Vec<LineError>,
}

/// Parses a whole JSON-lines input. Blank lines and lines whose first non-blank
/// character is `#` are skipped; every other line must be one event. All lines are
/// parsed (not just up to the first bad one) so the caller can report every problem
/// at once; events get `observed_at_default` when they carry no
/// `observedAtUnixMicros`.
pub(crate) fn parse_all(input: &[u8], observed_at_default: i64) -> Parsed {
    let mut parsed = Parsed::default();
    let input = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    for (i, raw) in input.split(|b| *b == b'\n').enumerate() {
        let line = i + 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let text = match std::str::from_utf8(raw) {
            Ok(t) => t,
            Err(e) => {
                parsed.errors.push(LineError {
                    line,
                    reason: format!("not valid UTF-8 at column {}", e.valid_up_to() + 1),
                });
                continue;
            }
        };
        let trimmed = text.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        match parse_line(text, observed_at_default) {
            Ok(event) => parsed.events.push(LineEvent { line, event }),
            Err(reason) => parsed.errors.push(LineError { line, reason }),
        }
    }
    parsed
}

/// Parses one event line (not blank, not a comment).
///
/// Defaults: an absent `schemaVersion` becomes [`SCHEMA_VERSION`]; an absent
/// `observedAtUnixMicros` becomes `observed_at_default`. An explicit
/// `"observedAtUnixMicros": "0"` stays 0 (that is how `log read` prints 0).
pub(crate) fn parse_line(text: &str, observed_at_default: i64) -> Result<Event, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| json_syntax_error(&e))?;
    let Value::Object(mut obj) = value else {
        return Err(format!(
            "expected a JSON object (one event per line), found {}",
            json_kind(&value)
        ));
    };
    if let Some(err) = obj.get(ERROR_KEY) {
        let err = err.as_str().map_or_else(|| err.to_string(), str::to_owned);
        return Err(format!(
            "this line reports an error from the command that produced the input, \
             not an event: {err}"
        ));
    }
    obj.remove(POSITION_KEY);
    let has_schema = obj.contains_key("schemaVersion") || obj.contains_key("schema_version");
    let has_observed =
        obj.contains_key("observedAtUnixMicros") || obj.contains_key("observed_at_unix_micros");

    let mut event: Event =
        serde_json::from_value(Value::Object(obj)).map_err(|e| tidy_field_error(e.to_string()))?;

    if event.schema_version == 0 {
        if has_schema {
            return Err(format!(
                "schemaVersion 0 is invalid (0 means unset); omit the field to write \
                 version {SCHEMA_VERSION}"
            ));
        }
        event.schema_version = SCHEMA_VERSION;
    }
    if event.schema_version > SCHEMA_VERSION {
        return Err(format!(
            "schemaVersion {} is newer than the newest this build supports ({SCHEMA_VERSION}); \
             upgrade deltapilot to write it",
            event.schema_version
        ));
    }
    if !has_observed {
        event.observed_at_unix_micros = observed_at_default;
    }
    check_entity(&event)?;
    Ok(event)
}

/// Refuses events that have no payload or no usable entity key: the log is keyed
/// by entity (the Kafka message key), so a keyless event cannot be placed, and a
/// delete whose key has the wrong form would silently match nothing.
fn check_entity(event: &Event) -> Result<(), String> {
    let Some(payload) = &event.payload else {
        return Err(format!(
            "the event has no payload (so no entity key); it needs exactly one of {PAYLOAD_FIELDS}"
        ));
    };
    match payload {
        Payload::ServiceUpsert(u) => {
            let s = u
                .service
                .as_ref()
                .ok_or("serviceUpsert has no `service`, so the event has no entity key")?;
            non_empty(&s.namespace, "serviceUpsert.service.namespace")?;
            non_empty(&s.hostname, "serviceUpsert.service.hostname")?;
        }
        Payload::EndpointUpsert(u) => {
            key_with_prefix(
                &u.key,
                "endpointUpsert.key",
                "ep/",
                "ep/<stable workload id>",
            )?;
            if u.endpoint.is_none() {
                return Err("endpointUpsert has no `endpoint`".into());
            }
        }
        Payload::ConfigUpsert(u) => {
            let c = u
                .config
                .as_ref()
                .ok_or("configUpsert has no `config`, so the event has no entity key")?;
            if c.kind() == ConfigKind::Unspecified {
                return Err(
                    "configUpsert.config.kind is missing; expected VIRTUAL_SERVICE, \
                     DESTINATION_RULE, GATEWAY, SERVICE_ENTRY, SIDECAR or WORKLOAD_ENTRY"
                        .into(),
                );
            }
            non_empty(&c.namespace, "configUpsert.config.namespace")?;
            non_empty(&c.name, "configUpsert.config.name")?;
        }
        Payload::ServiceDelete(d) => key_with_prefix(
            &d.key,
            "serviceDelete.key",
            "svc/",
            "svc/<namespace>/<hostname>",
        )?,
        Payload::EndpointDelete(d) => key_with_prefix(
            &d.key,
            "endpointDelete.key",
            "ep/",
            "ep/<stable workload id>",
        )?,
        Payload::ConfigDelete(d) => key_with_prefix(
            &d.key,
            "configDelete.key",
            "cfg/",
            "cfg/<kind>/<namespace>/<name>",
        )?,
        Payload::Resync(r) => {
            non_empty(
                &event.source,
                "source (resync markers are keyed by their source)",
            )?;
            if r.phase() == Phase::Unspecified {
                return Err("resync.phase is missing; expected STARTED or COMPLETED".into());
            }
        }
    }
    Ok(())
}

fn non_empty(value: &str, field: &str) -> Result<(), String> {
    if value.trim().is_empty() {
        return Err(format!(
            "{field} is missing or empty, so the event has no entity key"
        ));
    }
    Ok(())
}

fn key_with_prefix(key: &str, field: &str, prefix: &str, form: &str) -> Result<(), String> {
    non_empty(key, field)?;
    match key.strip_prefix(prefix) {
        Some(rest) if !rest.is_empty() => Ok(()),
        _ => Err(format!("{field} {key:?} does not have the form {form}")),
    }
}

/// A serde_json syntax error as "invalid JSON at column C: what". The line number
/// serde_json reports is always 1 (it parsed one line); the caller names the line.
fn json_syntax_error(e: &serde_json::Error) -> String {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let what = full.strip_suffix(&suffix).unwrap_or(&full);
    format!("invalid JSON at column {}: {what}", e.column())
}

/// pbjson lists every field twice in "unknown field" errors (`schema_version`,
/// `schemaVersion`, …); keep the JSON (camelCase) names, the ones `log read` prints.
fn tidy_field_error(msg: String) -> String {
    match msg.split_once(", expected one of ") {
        Some((head, names)) if head.starts_with("unknown field") => {
            let names: Vec<&str> = names.split(", ").filter(|n| !n.contains('_')).collect();
            format!("{head}; expected one of {}", names.join(", "))
        }
        _ => msg,
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The shape of one output line: `position`, then the event's own fields.
#[derive(Serialize)]
struct Line<'a> {
    position: String,
    /// pbjson omits a zero `observedAtUnixMicros`; `log append` would then fill in
    /// "now", and a copied log would differ from its source. So a zero is printed
    /// explicitly (as proto3 JSON allows).
    #[serde(
        rename = "observedAtUnixMicros",
        skip_serializing_if = "Option::is_none"
    )]
    observed_zero: Option<&'static str>,
    #[serde(flatten)]
    event: &'a Event,
}

/// Appends the line for the event at `pos` (with its trailing newline) to `out`.
pub(crate) fn write_line(
    pos: RecordPos,
    event: &Event,
    out: &mut Vec<u8>,
) -> serde_json::Result<()> {
    let line = Line {
        position: pos.to_string(),
        observed_zero: (event.observed_at_unix_micros == 0).then_some("0"),
        event,
    };
    serde_json::to_writer(&mut *out, &line)?;
    out.push(b'\n');
    Ok(())
}

/// Appends the final line printed when reading stops on a record that cannot be
/// shown (see [`ERROR_KEY`]).
pub(crate) fn write_error_line(
    pos: RecordPos,
    error: &str,
    out: &mut Vec<u8>,
) -> serde_json::Result<()> {
    #[derive(Serialize)]
    struct ErrorLine<'a> {
        position: String,
        error: &'a str,
    }
    let line = ErrorLine {
        position: pos.to_string(),
        error,
    };
    serde_json::to_writer(&mut *out, &line)?;
    out.push(b'\n');
    Ok(())
}

#[cfg(test)]
#[path = "jsonl_fuzz.rs"]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;
    use deltapilot_proto::EntityDelete;

    const NOW: i64 = 1_800_000_000_000_000;

    fn reason(line: &str) -> String {
        parse_line(line, NOW).expect_err(line)
    }

    const DELETE: &str = r#"{"schemaVersion":1,"source":"t","observedAtUnixMicros":"5","serviceDelete":{"key":"svc/ns/h"}}"#;

    #[test]
    fn output_line_parses_back_to_the_same_event() {
        let event = parse_line(DELETE, NOW).expect("parse");
        let mut out = Vec::new();
        write_line(
            RecordPos {
                partition: 0,
                offset: 17,
            },
            &event,
            &mut out,
        )
        .expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert!(
            text.starts_with(r#"{"position":"0:17","schemaVersion":1,"#),
            "{text}"
        );
        assert!(text.ends_with("}\n"), "{text}");
        assert_eq!(parse_line(text.trim_end(), NOW).expect("reparse"), event);
    }

    #[test]
    fn zero_observed_at_is_printed_so_a_copy_keeps_it() {
        let event = Event {
            schema_version: 1,
            source: "t".into(),
            payload: Some(Payload::ServiceDelete(EntityDelete {
                key: "svc/a/b".into(),
            })),
            ..Default::default()
        };
        let mut out = Vec::new();
        write_line(
            RecordPos {
                partition: 2,
                offset: 0,
            },
            &event,
            &mut out,
        )
        .expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.contains(r#""observedAtUnixMicros":"0""#), "{text}");
        assert_eq!(parse_line(text.trim_end(), NOW).expect("reparse"), event);
    }

    #[test]
    fn error_line_puts_position_first_and_is_refused_by_append() {
        let mut out = Vec::new();
        write_error_line(
            RecordPos {
                partition: 0,
                offset: 2,
            },
            "too \"new\"",
            &mut out,
        )
        .expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert_eq!(
            text,
            "{\"position\":\"0:2\",\"error\":\"too \\\"new\\\"\"}\n"
        );
        assert!(reason(text.trim_end()).contains("too \"new\""));
    }

    #[test]
    fn defaults_fill_only_absent_fields() {
        let e = parse_line(r#"{"source":"s","resync":{"phase":"STARTED"}}"#, NOW).expect("parse");
        assert_eq!(e.schema_version, SCHEMA_VERSION);
        assert_eq!(e.observed_at_unix_micros, NOW);
        let e = parse_line(DELETE, NOW).expect("parse");
        assert_eq!(e.observed_at_unix_micros, 5);
    }

    #[test]
    fn bad_lines_say_why() {
        for (line, needle) in [
            (r#"{"source": "x",}"#, "invalid JSON at column 16"),
            ("[1,2]", "found an array"),
            (
                r#"{"source":"x","colour":"blue","serviceDelete":{"key":"svc/a/b"}}"#,
                "unknown field `colour`; expected one of `schemaVersion`, `source`, \
                 `generation`, `observedAtUnixMicros`, `serviceUpsert`",
            ),
            (
                r#"{"serviceUpsert":{"service":{"port":[]}}}"#,
                "unknown field `port`; expected one of `hostname`, `namespace`, `ports`, \
                 `labels`, `resolution`",
            ),
            (
                r#"{"serviceUpsert":{"service":{"resolution":"DNZ"}}}"#,
                "unknown variant `DNZ`, expected one of `RESOLUTION_UNSPECIFIED`",
            ),
            (r#"{"source":"x"}"#, "no payload"),
            (
                r#"{"schemaVersion":2,"serviceDelete":{"key":"svc/a/b"}}"#,
                "schemaVersion 2 is newer",
            ),
            (
                r#"{"schemaVersion":0,"serviceDelete":{"key":"svc/a/b"}}"#,
                "schemaVersion 0 is invalid",
            ),
            (r#"{"serviceDelete":{}}"#, "serviceDelete.key is missing"),
            (
                r#"{"serviceDelete":{"key":"reviews"}}"#,
                "svc/<namespace>/<hostname>",
            ),
            (r#"{"serviceUpsert":{}}"#, "no `service`"),
            (
                r#"{"serviceUpsert":{"service":{"namespace":"a"}}}"#,
                "hostname is missing",
            ),
            (r#"{"endpointUpsert":{"key":"ep/x"}}"#, "no `endpoint`"),
            (
                r#"{"configUpsert":{"config":{"namespace":"a","name":"b"}}}"#,
                "kind is missing",
            ),
            (r#"{"resync":{"phase":"STARTED"}}"#, "source"),
            (r#"{"source":"s","resync":{}}"#, "phase is missing"),
            (r#"{"error":"boom","position":"0:3"}"#, "reports an error"),
        ] {
            let r = reason(line);
            assert!(r.contains(needle), "{line}: {r}");
        }
    }

    #[test]
    fn position_is_ignored_and_snake_case_names_are_accepted() {
        let e = parse_line(
            r#"{"position":"9:99","schema_version":1,"source":"s","observed_at_unix_micros":7,"config_delete":{"key":"cfg/gateway/a/b"}}"#,
            NOW,
        )
        .expect("parse");
        assert_eq!(e.observed_at_unix_micros, 7);
        assert_eq!(e.kind_name(), "config_delete");
    }

    #[test]
    fn parse_all_skips_comments_and_blank_lines_and_numbers_lines() {
        let input = format!("# header\n\n   \n{DELETE}\r\n  # indented comment\nnope\n{DELETE}");
        let p = parse_all(input.as_bytes(), NOW);
        assert_eq!(p.events.iter().map(|e| e.line).collect::<Vec<_>>(), [4, 7]);
        assert_eq!(p.errors.len(), 1);
        assert_eq!(p.errors[0].line, 6);
        assert!(
            p.errors[0].reason.starts_with("invalid JSON at column 2"),
            "{:?}",
            p.errors
        );
    }

    #[test]
    fn invalid_utf8_is_reported_with_its_line() {
        let p = parse_all(b"# ok\n{\"source\":\"\xff\"}\n", NOW);
        assert_eq!(
            p.errors,
            [LineError {
                line: 2,
                reason: "not valid UTF-8 at column 12".into()
            }]
        );
    }
}
