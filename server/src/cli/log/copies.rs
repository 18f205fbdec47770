//! Merging the per-partition copies of a `COMPLETED` resync marker back into one
//! event, for `deltapilot log append`.
//!
//! A multi-partition Kafka log stores a `COMPLETED` marker once per partition
//! (`ResyncMarker.copies` = the partition count), and the engine sweeps only once
//! it has folded a copy from that many distinct partitions. Appended as they are
//! to another log (a file log has one partition), those copies could never all
//! arrive from distinct partitions, so the sweep would never happen. This keeps
//! one marker per (source, generation), placed where its last copy is in the
//! input, with `copies` cleared so the destination applies its own rule (a Kafka
//! destination writes its own copies). Each copy follows, in its partition, every
//! event the adapter wrote before the marker, so once the last copy has been read
//! every one of those events precedes it in the input: the merged marker keeps
//! the guarantee.
//!
//! A marker with fewer copies in the input than it announces (a read that started
//! or stopped partway) is dropped, with a count the caller reports: placing it
//! could sweep entities whose re-upserts are not in the input, and leaving it out
//! only defers that source's sweep to its next resync.
//!
//! What it does NOT do: touch any other event, or reorder anything.

use std::collections::HashMap;

use deltapilot_proto::Event;
use deltapilot_proto::event::Payload;
use deltapilot_proto::resync_marker::Phase;

/// The input after merging, and how many incomplete markers were dropped.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Merged {
    /// The events to append, each with its input line.
    pub events: Vec<(usize, Event)>,
    /// Distinct (source, generation) markers dropped because some copies were
    /// missing from the input.
    pub incomplete: usize,
}

/// The (source, generation, copies) of a multi-copy `COMPLETED` marker.
fn multi_copy(e: &Event) -> Option<(&str, u64, u32)> {
    match &e.payload {
        Some(Payload::Resync(m)) if m.phase() == Phase::Completed && m.copies > 1 => {
            Some((e.source.as_str(), e.generation, m.copies))
        }
        _ => None,
    }
}

/// Merges marker copies in `events` (each with its input line); see the module doc.
pub(super) fn merge(events: Vec<(usize, Event)>) -> Merged {
    // Pass 1: how many copies of each marker the input holds, and where the one
    // that completes it sits.
    let mut seen: HashMap<(String, u64), (u32, u32, usize)> = HashMap::new();
    for (i, (_, e)) in events.iter().enumerate() {
        if let Some((source, generation, copies)) = multi_copy(e) {
            let entry = seen
                .entry((source.to_owned(), generation))
                .or_insert((0, copies, i));
            entry.0 += 1;
            entry.1 = entry.1.max(copies);
            if entry.0 == entry.1 {
                entry.2 = i;
            }
        }
    }
    let incomplete = seen.values().filter(|(n, want, _)| n < want).count();
    // Pass 2: keep the completing copy of each complete marker, cleared.
    let mut out = Vec::with_capacity(events.len());
    for (i, (line, mut e)) in events.into_iter().enumerate() {
        let Some((source, generation, _)) = multi_copy(&e) else {
            out.push((line, e));
            continue;
        };
        let completes = seen
            .get(&(source.to_owned(), generation))
            .is_some_and(|(n, want, at)| n >= want && *at == i);
        if completes {
            if let Some(Payload::Resync(m)) = &mut e.payload {
                m.copies = 0;
            }
            out.push((line, e));
        }
    }
    Merged {
        events: out,
        incomplete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltapilot_proto::{EntityDelete, ResyncMarker, SCHEMA_VERSION};

    fn marker(source: &str, generation: u64, copies: u32) -> Event {
        Event {
            schema_version: SCHEMA_VERSION,
            source: source.into(),
            generation,
            observed_at_unix_micros: 1,
            payload: Some(Payload::Resync(ResyncMarker {
                phase: Phase::Completed as i32,
                copies,
            })),
        }
    }

    fn delete(key: &str) -> Event {
        Event {
            schema_version: SCHEMA_VERSION,
            source: "a".into(),
            generation: 2,
            observed_at_unix_micros: 1,
            payload: Some(Payload::EndpointDelete(EntityDelete { key: key.into() })),
        }
    }

    fn lines(events: Vec<Event>) -> Vec<(usize, Event)> {
        events.into_iter().enumerate().collect()
    }

    #[test]
    fn copies_become_one_marker_where_the_last_copy_was() {
        let input = lines(vec![
            delete("p0"),
            marker("a", 2, 3),
            delete("p1"),
            marker("a", 2, 3),
            delete("p2"),
            marker("a", 2, 3),
            delete("after"),
        ]);
        let merged = merge(input);
        assert_eq!(merged.incomplete, 0);
        let got: Vec<(usize, Event)> = merged.events;
        assert_eq!(
            got,
            vec![
                (0, delete("p0")),
                (2, delete("p1")),
                (4, delete("p2")),
                (5, marker("a", 2, 0)),
                (6, delete("after")),
            ]
        );
    }

    #[test]
    fn an_incomplete_marker_is_dropped_and_counted() {
        let merged = merge(lines(vec![
            marker("a", 2, 3),
            delete("x"),
            marker("a", 2, 3),
            marker("b", 5, 2),
            marker("b", 5, 2),
        ]));
        assert_eq!(merged.incomplete, 1);
        assert_eq!(
            merged.events,
            vec![(1, delete("x")), (4, marker("b", 5, 0))]
        );
    }

    #[test]
    fn single_copy_markers_and_other_events_pass_through() {
        let input = lines(vec![marker("a", 1, 0), delete("x"), marker("a", 2, 1)]);
        let merged = merge(input.clone());
        assert_eq!(merged.incomplete, 0);
        assert_eq!(
            merged.events,
            vec![
                (0, marker("a", 1, 0)),
                (1, delete("x")),
                (2, marker("a", 2, 1)),
            ]
        );
    }
}
