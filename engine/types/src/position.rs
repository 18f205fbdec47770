//! Log positions.
//!
//! A [`Position`] is "where a reader is": for each partition, the offset of the next
//! record to read. The embedded log has one partition; a Kafka topic has several.
//! Within a partition offsets are totally ordered; across partitions a position is
//! only partially ordered (a reader may be ahead on one partition and behind on
//! another), so `Position` implements `PartialOrd`, not `Ord`.
//!
//! Text form (CLI flags, JSON, debug views): a single-partition position is the bare
//! offset (`42`); a multi-partition one lists `partition:offset` pairs (`0:42,1:17`).

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use crate::{Error, Result};

/// Where one record sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordPos {
    /// Partition index (always 0 for the embedded log).
    pub partition: u32,
    /// Offset within the partition.
    pub offset: u64,
}

impl fmt::Display for RecordPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.partition, self.offset)
    }
}

/// The next offset to read, per partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Position {
    offsets: Vec<u64>,
}

impl Position {
    /// The beginning of a log with `partitions` partitions.
    pub fn start(partitions: usize) -> Self {
        Self {
            offsets: vec![0; partitions],
        }
    }

    /// A position from explicit per-partition next offsets (index = partition).
    pub fn from_offsets(offsets: Vec<u64>) -> Self {
        Self { offsets }
    }

    /// A single-partition position (the embedded log).
    pub fn single(offset: u64) -> Self {
        Self {
            offsets: vec![offset],
        }
    }

    /// Per-partition next offsets (index = partition).
    pub fn offsets(&self) -> &[u64] {
        &self.offsets
    }

    /// Number of partitions this position covers.
    pub fn partitions(&self) -> usize {
        self.offsets.len()
    }

    /// Next offset to read in `partition` (0 for a partition not yet tracked).
    pub fn offset(&self, partition: u32) -> u64 {
        self.offsets.get(partition as usize).copied().unwrap_or(0)
    }

    /// Total number of records before this position, summed over partitions.
    pub fn total(&self) -> u64 {
        self.offsets.iter().sum()
    }

    /// Moves past `rec`: afterwards the next record to read in its partition is the
    /// one after it. Never moves backwards.
    pub fn advance(&mut self, rec: RecordPos) {
        let p = rec.partition as usize;
        if self.offsets.len() <= p {
            self.offsets.resize(p + 1, 0);
        }
        self.offsets[p] = self.offsets[p].max(rec.offset + 1);
    }

    /// Whether this position has read everything before `other` in every partition.
    pub fn covers(&self, other: &Position) -> bool {
        matches!(
            self.partial_cmp(other),
            Some(Ordering::Greater | Ordering::Equal)
        )
    }

    /// Whether the record at `rec` lies before this position (already read).
    pub fn contains(&self, rec: RecordPos) -> bool {
        rec.offset < self.offset(rec.partition)
    }
}

impl PartialOrd for Position {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        let n = self.offsets.len().max(other.offsets.len());
        let mut acc = Ordering::Equal;
        for p in 0..n {
            let a = self.offsets.get(p).copied().unwrap_or(0);
            let b = other.offsets.get(p).copied().unwrap_or(0);
            match (acc, a.cmp(&b)) {
                (_, Ordering::Equal) => {}
                (Ordering::Equal, o) => acc = o,
                (x, o) if x == o => {}
                _ => return None,
            }
        }
        Some(acc)
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.offsets.as_slice() {
            [] => f.write_str("0"),
            [single] => write!(f, "{single}"),
            many => {
                for (i, o) in many.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{i}:{o}")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for Position {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let bad = |reason: &str| Error::InvalidPosition {
            text: text.to_owned(),
            reason: reason.to_owned(),
        };
        let t = text.trim();
        if t.is_empty() {
            return Err(bad("empty; expected an offset like `42` or `0:42,1:17`"));
        }
        if !t.contains(':') {
            let o = t
                .parse::<u64>()
                .map_err(|_| bad("not a non-negative integer offset"))?;
            return Ok(Self::single(o));
        }
        let mut pos = Position::default();
        for part in t.split(',') {
            let (p, o) = part
                .split_once(':')
                .ok_or_else(|| bad("every element must be `partition:offset`"))?;
            let p: u32 = p
                .trim()
                .parse()
                .map_err(|_| bad("partition is not a non-negative integer"))?;
            let o: u64 = o
                .trim()
                .parse()
                .map_err(|_| bad("offset is not a non-negative integer"))?;
            if (p as usize) < pos.offsets.len() && pos.offsets[p as usize] != 0 {
                return Err(bad("partition listed twice"));
            }
            if p > 65_535 {
                return Err(bad("partition index above 65535"));
            }
            if pos.offsets.len() <= p as usize {
                pos.offsets.resize(p as usize + 1, 0);
            }
            pos.offsets[p as usize] = o;
        }
        Ok(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trip() {
        for t in ["0", "42", "0:42,1:17", "0:0,1:0,2:9"] {
            let p: Position = t.parse().expect(t);
            assert_eq!(p.to_string(), t);
        }
    }

    #[test]
    fn partial_order_across_partitions() {
        let a = Position::from_offsets(vec![3, 1]);
        let b = Position::from_offsets(vec![1, 3]);
        assert_eq!(a.partial_cmp(&b), None);
        assert!(Position::from_offsets(vec![3, 3]).covers(&a));
        assert!(!b.covers(&a));
    }

    #[test]
    fn advance_never_moves_back() {
        let mut p = Position::start(2);
        p.advance(RecordPos {
            partition: 1,
            offset: 5,
        });
        p.advance(RecordPos {
            partition: 1,
            offset: 2,
        });
        assert_eq!(p.offsets(), &[0, 6]);
        assert!(p.contains(RecordPos {
            partition: 1,
            offset: 5
        }));
    }

    #[test]
    fn garbage_is_a_clear_error() {
        let e = "x:1".parse::<Position>().expect_err("must fail");
        assert!(e.to_string().contains("partition"), "{e}");
        assert!("".parse::<Position>().is_err());
        assert!("-1".parse::<Position>().is_err());
    }
}
