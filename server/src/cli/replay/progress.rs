//! A progress bar on stderr for long replays, drawn only when stderr is a
//! terminal: piped or redirected, a replay prints nothing extra.
//!
//! One line, redrawn in place at most every [`REDRAW`]:
//! `replaying [#########...........]  45%  450000/1000000 records  1.2s`.
//! Before anything is written to stdout the line is cleared ([`Progress::clear`])
//! so output and bar never share a line on a terminal.
//!
//! What it does NOT do: estimate time left, or draw anything on a non-terminal.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Smallest interval between redraws.
const REDRAW: Duration = Duration::from_millis(100);
/// Width of the bar in characters.
const WIDTH: usize = 30;

/// A progress line (inert unless stderr is a terminal).
pub(crate) struct Progress {
    enabled: bool,
    label: &'static str,
    total: u64,
    started: Instant,
    last: Option<Instant>,
    drawn: bool,
}

impl Progress {
    /// A bar for `total` records, shown only if stderr is a terminal.
    pub(crate) fn new(label: &'static str, total: u64) -> Self {
        Progress {
            enabled: std::io::stderr().is_terminal() && total > 0,
            label,
            total,
            started: Instant::now(),
            last: None,
            drawn: false,
        }
    }

    /// Records `done` of the total (redraws if due).
    pub(crate) fn set(&mut self, done: u64) {
        if !self.enabled || self.last.is_some_and(|t| t.elapsed() < REDRAW) {
            return;
        }
        self.last = Some(Instant::now());
        let done = done.min(self.total);
        let filled = (done as u128 * WIDTH as u128 / self.total.max(1) as u128) as usize;
        let pct = done as u128 * 100 / self.total.max(1) as u128;
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[K{} [{}{}] {pct:>3}%  {done}/{} records  {:.1}s",
            self.label,
            "#".repeat(filled),
            ".".repeat(WIDTH - filled),
            self.total,
            self.started.elapsed().as_secs_f64()
        );
        let _ = err.flush();
        self.drawn = true;
    }

    /// Clears the line (before output is printed; it is redrawn at the next
    /// [`Progress::set`]).
    pub(crate) fn clear(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
            self.drawn = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}
