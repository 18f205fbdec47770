//! `deltapilot replay bisect --resource TYPE/NAME --until PREDICATE`: the first
//! event after which a resource matched.
//!
//! Predicates: `contains TEXT` (its proto3 JSON rendering, as `--diff` and
//! `config_dump` show it, contains TEXT: an address, a cluster name, `"EDS"`),
//! `routes-to CLUSTER [for HOST]` (an RDS route configuration sends traffic to
//! a cluster whose name contains CLUSTER: a route's cluster, or a weighted
//! cluster with a weight above 0; with `for HOST`, only from the virtual hosts
//! serving that domain; "which event first sent `reviews` traffic to v2" is
//! `--resource rds/9080 --until 'routes-to |v2|reviews.'`),
//! `version V` (its content version starts with V), `absent`, `present`. The
//! answer is the event that made it match having not matched before (see the
//! engine's `replay::bisect`); it is printed with its position and source, then
//! as `deltapilot log read` prints it. Exit status 0 when found, 1 otherwise.
//!
//! What it does NOT do: stop at a match that was already there where the search
//! starts (it says so instead).

use std::sync::Arc;

use anyhow::{Context as _, bail};
use deltapilot_engine::replay::bisect::{Outcome, Predicate, Target, bisect};
use deltapilot_log::{EventLog, Position};
use deltapilot_server::admin::events::event_json;
use deltapilot_server::admin::render::renderer;
use deltapilot_xds::Resource;

use super::print::Output;
use super::progress::Progress;
use super::{Source, StartAt, stopped_message, write_stdout};

/// Arguments of `deltapilot replay bisect`.
#[derive(Debug, clap::Args)]
pub(crate) struct BisectArgs {
    /// The resource: `TYPE/NAME`, e.g. `eds/outbound|9080||reviews.default.svc.cluster.local`.
    #[arg(long, value_name = "TYPE/NAME")]
    resource: Target,
    /// `contains TEXT`, `routes-to CLUSTER [for HOST]` (RDS only), `version V`, `absent` or `present`.
    #[arg(long, value_name = "PREDICATE")]
    until: Predicate,
    /// Search from this position [default: the start of the log].
    #[arg(long, value_name = "POS")]
    from: Option<Position>,
    /// Search up to this position [default: the head].
    #[arg(long, value_name = "POS")]
    to: Option<Position>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    output: Output,
}

fn version(r: Option<&Arc<Resource>>) -> String {
    r.map_or_else(|| "(absent)".to_owned(), |r| r.version.to_string())
}

/// Runs `replay bisect`.
pub(crate) async fn run(input: &Source, args: BisectArgs) -> anyhow::Result<()> {
    let session = input
        .open(StartAt::given_or(args.from.as_ref(), StartAt::LogStart))
        .await?;
    let from = match &args.from {
        Some(_) => session.position("--from", args.from.clone()).await?,
        // A compacted log's history starts at its horizon.
        None => session.opened.log.horizon(),
    };
    let to = session.position("--to", args.to.clone()).await?;
    if !to.covers(&from) {
        bail!("--from {from} is after --to {to}");
    }
    let t = args.resource.resource_type;
    if matches!(args.until, Predicate::RoutesTo { .. }) && t != deltapilot_xds::ResourceType::Route
    {
        bail!(
            "`routes-to` reads route configurations: give an RDS resource (--resource rds/NAME), not {}",
            t.short_name()
        );
    }
    let mut r = session.replayer_at(&from).await?;
    let text = move |res: &Resource| {
        serde_json::to_string(&renderer().resource(t, &res.bytes)).unwrap_or_default()
    };
    let mut bar = Progress::new("searching", to.total().saturating_sub(from.total()));
    let outcome = bisect(
        &session.opened.log,
        &mut r,
        &to,
        &args.resource,
        &args.until,
        &text,
        &mut |n| bar.set(n),
    )
    .await
    .context("reading the log")?;
    drop(bar);
    let what = format!("{}/{}", t.short_name(), args.resource.name);
    let until = match &args.until {
        Predicate::Contains(x) => format!("contains {x}"),
        Predicate::Version(v) => format!("version {v}"),
        Predicate::Absent => "absent".into(),
        Predicate::Present => "present".into(),
        Predicate::RoutesTo { cluster, host } => match host {
            Some(h) => format!("routes-to {cluster} for {h}"),
            None => format!("routes-to {cluster}"),
        },
    };
    match outcome {
        Outcome::Found(f) => {
            let out = match args.output {
                Output::Json => {
                    let mut line = serde_json::to_vec(&serde_json::json!({
                        "found": {
                            "position": f.pos.to_string(),
                            "source": f.event.source,
                            "resource": what,
                            "until": until,
                            "old_version": f.before.as_ref().map(|r| r.version.to_string()),
                            "new_version": f.after.as_ref().map(|r| r.version.to_string()),
                            "event": serde_json::to_value(event_json(f.pos, &f.event)).unwrap_or_default(),
                        }
                    }))
                    .unwrap_or_default();
                    line.push(b'\n');
                    line
                }
                Output::Text => {
                    let mut line =
                        serde_json::to_vec(&event_json(f.pos, &f.event)).unwrap_or_default();
                    line.push(b'\n');
                    let head = format!(
                        "{what} first matched `{until}` after the event at {} (source {}, {} {}): {} -> {}\n",
                        f.pos,
                        f.event.source,
                        f.event.kind_name(),
                        f.event.key().unwrap_or_default(),
                        version(f.before.as_ref()),
                        version(f.after.as_ref()),
                    );
                    [head.into_bytes(), line].concat()
                }
            };
            write_stdout(&out)?;
            Ok(())
        }
        Outcome::MatchedAtStart { matches_at_end } => {
            session.finish(r.position())?;
            bail!(
                "{what} already matched `{until}` at the start of the search (position {from}) and no event up to {to} made it match anew (it {} at the end); search from an earlier --from, or for the opposite",
                if matches_at_end {
                    "still matches"
                } else {
                    "no longer matches"
                }
            )
        }
        Outcome::Never => {
            session.finish(r.position())?;
            bail!("no event from {from} to {to} made {what} match `{until}`")
        }
        Outcome::Stopped(s) => bail!(
            "{} before {what} matched `{until}`",
            stopped_message(&s, r.position())
        ),
    }
}
