//! Running a [`Replayer`] over an [`EventLog`]: positions checked against the log,
//! a start from the newest usable checkpoint, then records folded fast (in
//! batches) or one event at a time with what each changed.
//!
//! A record the log reports as corrupt stops the replay there, as it stops the
//! engine: everything before it is folded, and the [`StoppedAt`] says where and
//! why. A record that reads but is not an event this build decodes (a newer
//! schema, or not an event at all) is skipped and counted, as the engine skips
//! it, so that a replay reaches the states the engine served past it; it is not
//! quiet about it: [`each_event`] hands it to its caller with the reason, and
//! [`Replayer::stats`] counts it.
//!
//! What it does NOT do: print anything (callers get callbacks) or open logs.

use std::ops::ControlFlow;
use std::path::PathBuf;

use deltapilot_proto::Event;

use super::{EventReport, Replayer, StoppedAt};
use crate::checkpoint::{CheckpointStore, Rejected, load_verified};
use crate::{Error, Result};
use deltapilot_log::{EventLog, Position, Record, RecordPos};
use deltapilot_xds::generate::GenOptions;

/// Records asked of the log per read: enough to amortise a read, and one batch
/// for the fast fold (the fold runner's batches are of the same order).
pub const READ_CHUNK: usize = 65536;

/// Checks that `pos` lies within `log` (between its start and head in every
/// partition, no partition it does not have); the error states the valid range,
/// or, below a start that retention moved, the oldest position still available.
pub async fn check_position<L: EventLog + ?Sized>(log: &L, pos: &Position) -> Result<()> {
    let head = log.head().await?;
    let start = log.start();
    let partitions = head.partitions().max(start.partitions());
    let beyond = pos.offsets().iter().skip(partitions).any(|o| *o > 0);
    let below_start = (0..partitions).any(|p| {
        let p = u32::try_from(p).unwrap_or(u32::MAX);
        pos.offset(p) < start.offset(p)
    });
    if below_start && !beyond && head.covers(pos) {
        return Err(deltapilot_log::Error::BeforeRetention {
            requested: pos.to_string(),
            oldest: start.to_string(),
        }
        .into());
    }
    let outside = (0..partitions).any(|p| {
        let p = u32::try_from(p).unwrap_or(u32::MAX);
        pos.offset(p) < start.offset(p) || pos.offset(p) > head.offset(p)
    });
    if beyond || outside {
        return Err(deltapilot_log::Error::PositionOutOfRange {
            requested: pos.to_string(),
            start: start.to_string(),
            head: head.to_string(),
        }
        .into());
    }
    Ok(())
}

/// Where a replay started.
#[derive(Debug)]
pub struct Start {
    /// The replayer, at the checkpoint's position or the log's start.
    pub replayer: Replayer,
    /// The checkpoint it was restored from, if any.
    pub checkpoint: Option<PathBuf>,
    /// Newer checkpoints passed over, and why.
    pub rejected: Vec<Rejected>,
}

/// A replayer restored from the newest usable checkpoint at or before `at` in
/// `store` (when given), else at the start of the log.
pub async fn start_before<L: EventLog + ?Sized>(
    log: &L,
    store: Option<&CheckpointStore>,
    at: &Position,
    opts: GenOptions,
) -> Result<Start> {
    let Some(store) = store else {
        return Ok(Start {
            replayer: Replayer::new(opts),
            checkpoint: None,
            rejected: Vec::new(),
        });
    };
    let loaded = load_verified(store, log, Some(at)).await?;
    Ok(match loaded.checkpoint {
        Some((path, cp)) => Start {
            replayer: Replayer::from_checkpoint(cp, opts),
            checkpoint: Some(path),
            rejected: loaded.rejected,
        },
        None => Start {
            replayer: Replayer::new(opts),
            checkpoint: None,
            rejected: loaded.rejected,
        },
    })
}

/// The next records after `r`'s position and before `to`; `Err` when the log
/// reports corruption there.
async fn next_chunk<L: EventLog + ?Sized>(
    log: &L,
    at: &Position,
    to: &Position,
    head: &Position,
) -> Result<std::result::Result<Vec<Record>, StoppedAt>> {
    // Partitions already at `to` are read from their head, so they return nothing
    // and cannot crowd out the partitions that still have records to give.
    let n = at.partitions().max(to.partitions()).max(head.partitions());
    let from: Vec<u64> = (0..n as u32)
        .map(|p| {
            let (a, t) = (at.offset(p), to.offset(p));
            if a >= t { head.offset(p).max(a) } else { a }
        })
        .collect();
    match log.read(&Position::from_offsets(from), READ_CHUNK).await {
        Ok(recs) => Ok(Ok(recs
            .into_iter()
            .filter(|r| !at.contains(r.pos) && r.pos.offset < to.offset(r.pos.partition))
            .collect())),
        Err(deltapilot_log::Error::Corrupt {
            offset,
            reason,
            segment,
            byte_offset,
        }) => Ok(Err(StoppedAt {
            position: RecordPos {
                partition: 0,
                offset,
            }
            .to_string(),
            reason: format!(
                "corrupt record (segment {}, byte {byte_offset}): {reason}",
                segment.display()
            ),
        })),
        Err(e) => Err(e.into()),
    }
}

/// Folds every record from `r`'s position up to `to` in batches. `progress` is
/// called after each batch with the records folded so far by this call.
///
/// Decoding runs on a blocking thread, one batch ahead of the fold, so the two
/// overlap on a machine with two cores; at most two batches are in memory.
pub async fn fold_to<L: EventLog + ?Sized>(
    log: &L,
    r: &mut Replayer,
    to: &Position,
    progress: &mut dyn FnMut(u64),
) -> Result<Option<StoppedAt>> {
    let head = log.head().await?;
    let mut read_at = r.position().clone();
    let mut done = 0u64;
    let mut ahead: Option<tokio::task::JoinHandle<super::Decoded>> = None;
    let mut read_stop = None;
    loop {
        // Read (and start decoding) the next batch while the previous one folds.
        let next = if read_stop.is_none() && !read_at.covers(to) {
            match next_chunk(log, &read_at, to, &head).await? {
                Err(stop) => {
                    read_stop = Some(stop);
                    None
                }
                Ok(recs) if recs.is_empty() => None,
                Ok(recs) => {
                    for rec in &recs {
                        read_at.advance(rec.pos);
                    }
                    let folded = r.position().clone();
                    Some(tokio::task::spawn_blocking(move || {
                        super::decode_records(&recs, &folded)
                    }))
                }
            }
        } else {
            None
        };
        let Some(batch) = ahead.take() else {
            if next.is_none() {
                return Ok(read_stop);
            }
            ahead = next;
            continue;
        };
        let decoded = batch.await.map_err(|e| Error::Io {
            op: "decode records (task failed)",
            path: std::path::PathBuf::new(),
            source: std::io::Error::other(e.to_string()),
        })?;
        done += (decoded.events.len() + decoded.skipped.len()) as u64;
        r.apply_decoded(decoded);
        progress(done);
        ahead = next;
        if ahead.is_none() {
            return Ok(read_stop);
        }
    }
}

/// What [`each_event`] calls per record: its position, its event (`None` when
/// it did not decode), what folding it did, and the replayer after it.
pub type EachEvent<'a> =
    dyn FnMut(RecordPos, Option<&Event>, &EventReport, &Replayer) -> ControlFlow<()> + 'a;

/// Folds every record from `r`'s position up to `to` one event at a time, calling
/// `f` with each event and what it changed; `f` may break to stop early (the
/// event it was given is folded). A record that does not decode comes with no
/// event, and its report's `skipped` says why (it is passed over, as the engine
/// passes over it).
pub async fn each_event<L: EventLog + ?Sized>(
    log: &L,
    r: &mut Replayer,
    to: &Position,
    f: &mut EachEvent<'_>,
) -> Result<Option<StoppedAt>> {
    let head = log.head().await?;
    while !r.position().covers(to) {
        let recs = match next_chunk(log, r.position(), to, &head).await? {
            Ok(recs) => recs,
            Err(stop) => return Ok(Some(stop)),
        };
        if recs.is_empty() {
            break;
        }
        for rec in &recs {
            let (event, report) = match rec.decode() {
                Ok(event) => {
                    let report = r.apply_event(rec.pos, &event);
                    (Some(event), report)
                }
                Err(e) => (None, r.skip_record(crate::runner::undecodable(rec.pos, &e))),
            };
            if f(rec.pos, event.as_ref(), &report, r).is_break() {
                return Ok(None);
            }
        }
    }
    Ok(None)
}
