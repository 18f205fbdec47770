//! `/debug/events?from=POS&limit=N`: records of the log as JSON lines, in exactly
//! the format `deltapilot log read` prints (and `log append` accepts): the event
//! in canonical proto3 JSON with a leading `"position":"P:O"` key. A record that
//! cannot be shown ends the output with `{"position":…,"error":…}`, as in `log
//! read`.
//!
//! The line format is written here rather than shared with `cli/log` because that
//! module lives in the binary; both follow the README's description of it.
//!
//! What it does NOT do: follow the log (a debug endpoint answers and returns).

use deltapilot_log::{EventLog, Log, Position, RecordPos};
use deltapilot_proto::Event;
use serde::Serialize;

use super::render::Json;

/// Records returned when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 100;
/// Most records one request returns.
pub const MAX_LIMIT: usize = 10_000;

#[derive(Serialize)]
struct Line<'a> {
    position: String,
    /// pbjson omits a zero `observedAtUnixMicros`; `log read` prints it so that a
    /// copy keeps it, and so does this.
    #[serde(
        rename = "observedAtUnixMicros",
        skip_serializing_if = "Option::is_none"
    )]
    observed_zero: Option<&'static str>,
    #[serde(flatten)]
    event: &'a Event,
}

/// Appends the `log read` line of the event at `pos` (with a trailing newline).
pub fn write_event_line(
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

/// The `log read` line of an event as a JSON value, keys in the same order (for
/// embedding in other output).
pub fn event_json(pos: RecordPos, event: &Event) -> Json {
    let mut buf = Vec::new();
    match write_event_line(pos, event, &mut buf).and_then(|()| serde_json::from_slice(&buf)) {
        Ok(v) => v,
        Err(e) => {
            let mut o = Json::obj();
            o.push("position", Json::from(pos.to_string()));
            o.push("error", Json::from(e.to_string()));
            o
        }
    }
}

/// Why a request for events was refused.
#[derive(Debug)]
pub enum EventsError {
    /// The request itself is wrong (bad position, out of range): a 400.
    BadRequest(String),
    /// The log failed: a 500.
    Log(String),
}

/// Up to `limit` records from `from` (the log's start if `None`), as JSON lines.
pub async fn read_lines(
    log: &Log,
    from: Option<&str>,
    limit: Option<usize>,
) -> Result<Vec<u8>, EventsError> {
    let start = log.start();
    let head = log
        .head()
        .await
        .map_err(|e| EventsError::Log(e.to_string()))?;
    let mut pos = match from {
        None | Some("") | Some("start") => start.clone(),
        Some(text) => text
            .parse::<Position>()
            .map_err(|e| EventsError::BadRequest(e.to_string()))?,
    };
    deltapilot_engine::replay::drive::check_position(log, &pos)
        .await
        .map_err(|e| EventsError::BadRequest(format!("from={pos}: {e}")))?;
    let limit = limit.unwrap_or(DEFAULT_LIMIT).min(MAX_LIMIT);
    let mut out = Vec::new();
    let mut left = limit;
    while left > 0 && !pos.covers(&head) {
        let recs = match log.read(&pos, left).await {
            Ok(r) => r,
            Err(e) => {
                let at = RecordPos {
                    partition: 0,
                    offset: pos.offset(0),
                };
                let _ = write_error_line(at, &e.to_string(), &mut out);
                return Ok(out);
            }
        };
        if recs.is_empty() {
            break;
        }
        for rec in recs {
            if pos.contains(rec.pos) || rec.pos.offset >= head.offset(rec.pos.partition) {
                continue;
            }
            pos.advance(rec.pos);
            match rec.decode() {
                Ok(ev) => write_event_line(rec.pos, &ev, &mut out)
                    .map_err(|e| EventsError::Log(e.to_string()))?,
                Err(e) => {
                    let _ = write_error_line(rec.pos, &e.to_string(), &mut out);
                    return Ok(out);
                }
            }
            left -= 1;
            if left == 0 {
                break;
            }
        }
    }
    Ok(out)
}

fn write_error_line(pos: RecordPos, error: &str, out: &mut Vec<u8>) -> serde_json::Result<()> {
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
