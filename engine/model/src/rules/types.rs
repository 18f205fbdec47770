//! Small value types both rule kinds share: string matches, percentages, port
//! selectors and a float that compares by bits (so rules can be `Eq`, as the
//! folded state is).

use serde::{Deserialize, Serialize};

/// A float compared and hashed by its bits, so that a rule holding one is `Eq`:
/// the folded state must compare equal to its rebuild, and `NaN` cannot arrive
/// (JSON has none).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(transparent)]
pub struct F64(pub f64);

impl PartialEq for F64 {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for F64 {}

/// Istio's `StringMatch`: exactly one of `exact`, `prefix` or `regex` (RE2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StringMatch {
    /// Equal to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    /// Starts with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Matches this RE2 regular expression (whole value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
}

/// The one condition a [`StringMatch`] states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StringMatchKind<'a> {
    /// Equal to.
    Exact(&'a str),
    /// Starts with.
    Prefix(&'a str),
    /// Matches the regex.
    Regex(&'a str),
}

impl StringMatch {
    /// The condition, or `None` when none or several are set (a problem that
    /// `parse` reports).
    pub fn kind(&self) -> Option<StringMatchKind<'_>> {
        match (&self.exact, &self.prefix, &self.regex) {
            (Some(e), None, None) => Some(StringMatchKind::Exact(e)),
            (None, Some(p), None) => Some(StringMatchKind::Prefix(p)),
            (None, None, Some(r)) => Some(StringMatchKind::Regex(r)),
            _ => None,
        }
    }
}

/// Istio's `Percent`: `{"value": 12.5}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Percent {
    /// Percentage in `[0, 100]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<F64>,
}

/// Istio's `PortSelector`: `{"number": 9080}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortSelector {
    /// Port number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<u32>,
}
