//! The key the large maps are ordered by: a hash of a hostname or entity key.
//!
//! On the ground floor of the model so that the state, the records maps and the
//! xDS resource maps all use one definition.

/// The key of a hostname or endpoint key in the large maps: the 128-bit xxh3 hash
/// of its text. Lookups then compare integers held inside the tree nodes, and
/// copying a node on write clones no string reference (with string keys, every
/// comparison and every copied entry is a likely cache miss, which dominated the
/// fold's cost). Two distinct texts with the same hash must never share a slot:
/// the maps that hold the text compare it whenever two hashes are equal
/// (`records::FullKey`), and the endpoint store, whose records hold no text,
/// has the fold refuse the second text of a key, by value (see
/// `fold::SkipReason::HashCollision`). Iteration order is by hash:
/// deterministic, not alphabetical. Two 64-bit halves (high first, so the order
/// is the 128-bit value's) rather than a `u128`, which is aligned to 16 bytes:
/// a map entry of a key and a pointer then takes 24 bytes instead of 32, and
/// the tree nodes the fold copies on every write are a quarter smaller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HKey {
    pub(crate) high: u64,
    pub(crate) low: u64,
}

impl HKey {
    /// The smallest key, to start a range at.
    pub const MIN: HKey = HKey { high: 0, low: 0 };

    /// The key of `text`.
    pub fn of(text: &str) -> Self {
        // Unit tests force texts that begin with `same-hash-` (endpoint keys
        // and hostnames alike) onto one key, to show that two such texts are
        // never taken for one.
        #[cfg(test)]
        if text.starts_with("same-hash-") {
            return HKey::of_text("same-hash-");
        }
        HKey::of_text(text)
    }

    fn of_text(text: &str) -> Self {
        let h = xxhash_rust::xxh3::xxh3_128(text.as_bytes());
        HKey {
            high: (h >> 64) as u64,
            low: h as u64,
        }
    }

    /// Its top 64 bits: a sort key in the same order as the whole key.
    pub fn prefix(self) -> u64 {
        self.high
    }
}
