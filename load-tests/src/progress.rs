//! The progress line on stderr while a run goes on: phase, proxies synced,
//! changes converged, responses per second, NACKs, errors, server CPU. Drawn only
//! when stderr is a terminal; otherwise the run is quiet until its report.
//!
//! What it does NOT do: log (warnings go through `tracing`), or keep history.

use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::procstat;
use crate::proxy::fleet::FleetShared;
use crate::tracker::Tracker;

/// How often the line is redrawn.
const EVERY: Duration = Duration::from_millis(500);

#[derive(Default)]
struct View {
    phase: String,
    fleet: Option<(Arc<FleetShared>, usize)>,
    tracker: Option<Arc<Tracker>>,
}

/// The progress display.
pub struct Progress {
    view: Arc<Mutex<View>>,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    /// Starts drawing if stderr is a terminal (and `enabled`); `server_pid` adds
    /// the server's CPU use.
    pub fn start(enabled: bool, server_pid: Option<u32>) -> Self {
        let view = Arc::new(Mutex::new(View::default()));
        let (stop, mut stopped) = watch::channel(false);
        let task = (enabled && std::io::stderr().is_terminal()).then(|| {
            let view = view.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let mut last: Option<(Instant, u64, f64)> = None;
                loop {
                    tokio::select! {
                        _ = stopped.wait_for(|s| *s) => break,
                        () = tokio::time::sleep(EVERY) => {}
                    }
                    let line = draw(&view, started, server_pid, &mut last);
                    let mut err = std::io::stderr().lock();
                    let _ = write!(err, "\r\x1b[2K{line}");
                    let _ = err.flush();
                }
                let _ = write!(std::io::stderr().lock(), "\r\x1b[2K");
            })
        });
        Progress { view, stop, task }
    }

    /// Shows a new phase.
    pub fn phase(
        &self,
        name: &str,
        fleet: Option<(Arc<FleetShared>, usize)>,
        tracker: Option<Arc<Tracker>>,
    ) {
        let mut v = self.view.lock().unwrap_or_else(|p| p.into_inner());
        *v = View {
            phase: name.to_owned(),
            fleet,
            tracker,
        };
    }

    /// Stops drawing and clears the line.
    pub async fn finish(mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

fn draw(
    view: &Mutex<View>,
    started: Instant,
    pid: Option<u32>,
    last: &mut Option<(Instant, u64, f64)>,
) -> String {
    let v = view.lock().unwrap_or_else(|p| p.into_inner());
    let mut parts = vec![format!(
        "[{} {:.0}s]",
        v.phase,
        started.elapsed().as_secs_f64()
    )];
    let now = Instant::now();
    let cpu = pid.and_then(procstat::sample).map(|s| s.cpu_seconds);
    if let Some((f, n)) = &v.fleet {
        let c = &f.counters;
        let responses = c.responses.load(Ordering::Relaxed);
        parts.push(format!(
            "proxies {}/{n} synced",
            c.synced.load(Ordering::Relaxed)
        ));
        let rate = last
            .map(|(t, r, _)| {
                (responses.saturating_sub(r)) as f64 / now.duration_since(t).as_secs_f64()
            })
            .unwrap_or(0.0);
        parts.push(format!("{responses} responses ({rate:.0}/s)"));
        parts.push(format!(
            "nacks {} · errors {}",
            c.nacks.load(Ordering::Relaxed),
            c.errors.load(Ordering::Relaxed)
        ));
        if let (Some(cpu), Some((t, _, c0))) = (cpu, *last) {
            parts.push(format!(
                "server CPU {:.0}%",
                (cpu - c0) / now.duration_since(t).as_secs_f64() * 100.0
            ));
        }
        *last = Some((now, responses, cpu.unwrap_or(0.0)));
    }
    if let Some(t) = &v.tracker {
        let (n, done) = t.counts();
        parts.push(format!("changes {done}/{n} converged"));
    }
    parts.join(" · ")
}
