//! One task per watch: kube-runtime's `watcher` (list, then watch from the list's
//! resourceVersion, with bookmarks, resuming from the last resourceVersion after a
//! dropped connection, relisting after 410 Gone) turned into parsed updates for the
//! adapter loop.
//!
//! - A list (`Init`, `InitApply`…, `InitDone`) is buffered and sent as one
//!   [`Update::Relisted`], so the loop replaces the watch's scope atomically and
//!   diffs it against its last-known view: a relist emits no spurious deletes.
//! - Errors keep the last state: the task reports [`Update::Failed`] and waits a
//!   capped, jittered exponential backoff before polling again. A list answered
//!   404 for an optional kind (an Istio CRD that is not installed) is reported as
//!   absent. After a failed watch (not list), the task proves the API server
//!   serves the resource again with a one-object list before reporting
//!   [`Update::Recovered`]: a resumed watch is otherwise silent until something
//!   changes.
//! - A watch line that does not decode is a malformed object ([`Update::Malformed`]),
//!   not an outage: the watch goes on.
//!
//! What it does NOT do: hold state beyond the list being buffered, or decide what
//! the updates mean (see `adapter` and `store`).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use kube::api::{Api, ListParams};
use kube::core::DynamicObject;
use kube::runtime::watcher;
use tokio::sync::{mpsc, watch};

use super::kinds::WatchSpec;
use super::options::KubernetesOptions;
use super::parse::{ObjId, Parsed, parse};

/// Capacity of the channel from all watch tasks to the adapter loop. A full list
/// is one message and watch events are small, so 256 covers bursts from every
/// watch; when the loop is slow (a log that refuses appends), the tasks wait and
/// the back-pressure reaches the API server's streams instead of memory.
pub const UPDATE_CHANNEL_CAPACITY: usize = 256;

/// What a watch task tells the adapter loop. `watch` indexes the adapter's list of
/// [`WatchSpec`]s.
#[derive(Debug)]
pub(crate) enum Update {
    /// A complete list of the watch's scope.
    Relisted { watch: usize, objects: Vec<Parsed> },
    /// An object was added or modified.
    Applied { watch: usize, object: Parsed },
    /// An object was deleted.
    Deleted { watch: usize, id: ObjId },
    /// A watch event could not be decoded at all; skipped.
    Malformed { watch: usize, reason: String },
    /// A list or watch failed; the task retries after `retry_in`.
    Failed {
        watch: usize,
        error: String,
        absent: bool,
        attempt: u32,
        retry_in: Duration,
    },
    /// After failures, the API server serves the resource again.
    Recovered { watch: usize },
}

/// Everything a watch task needs.
pub(crate) struct WatchTask {
    pub(crate) index: usize,
    pub(crate) spec: WatchSpec,
    pub(crate) client: kube::Client,
    pub(crate) opts: Arc<KubernetesOptions>,
    pub(crate) tx: mpsc::Sender<Update>,
    pub(crate) shutdown: watch::Receiver<bool>,
}

type EventStream = BoxStream<'static, Result<watcher::Event<DynamicObject>, watcher::Error>>;

impl WatchTask {
    fn api(&self) -> Api<DynamicObject> {
        let ar = self.spec.kind.api_resource();
        match (&self.spec.namespace, self.spec.kind.namespaced()) {
            (Some(ns), true) => Api::namespaced_with(self.client.clone(), ns, &ar),
            _ => Api::all_with(self.client.clone(), &ar),
        }
    }

    fn stream(&self) -> EventStream {
        // `any_semantic` lists from the API server's cache (`resourceVersion=0`);
        // kube drops that in favour of a consistent read as soon as a page size
        // is set, so it only applies when `page_size` is `None`.
        let mut cfg = watcher::Config::default()
            .any_semantic()
            .timeout(self.opts.watch_timeout_secs());
        cfg.page_size = self.opts.page_size;
        if let Some(sel) = &self.spec.label_selector {
            cfg = cfg.labels(sel);
        }
        watcher::watcher(self.api(), cfg).boxed()
    }

    /// Runs until shutdown or until the adapter loop is gone.
    pub(crate) async fn run(mut self) {
        let index = self.index;
        let kind = self.spec.kind;
        let ns = self.spec.namespace.clone().unwrap_or_default();
        let mut stream = self.stream();
        let mut buffer: Vec<Parsed> = Vec::new();
        let mut failures: u32 = 0;
        let mut probe = false;
        loop {
            if probe {
                let api = self.api();
                let one = ListParams::default().limit(1);
                let result = tokio::select! {
                    _ = self.shutdown.changed() => return,
                    r = api.list(&one) => r,
                };
                match result {
                    Ok(_) => {
                        probe = false;
                        failures = 0;
                        tracing::info!(%kind, namespace = %ns, "kubernetes adapter: watch recovered");
                        if !self.send(Update::Recovered { watch: index }).await {
                            return;
                        }
                    }
                    Err(e) => {
                        if !self.fail(&mut failures, e.to_string(), false).await {
                            return;
                        }
                        continue;
                    }
                }
            }
            let item = tokio::select! {
                _ = self.shutdown.changed() => return,
                item = stream.next() => item,
            };
            let update = match item {
                // The watcher stream never ends; if it did, there is nothing to watch.
                None => return,
                Some(Ok(event)) => match event {
                    watcher::Event::Init => {
                        buffer.clear();
                        continue;
                    }
                    watcher::Event::InitApply(obj) => {
                        buffer.push(parse(
                            kind,
                            &obj,
                            &self.opts.cluster_domain,
                            &self.opts.cluster_id,
                        ));
                        continue;
                    }
                    watcher::Event::InitDone => {
                        failures = 0;
                        Update::Relisted {
                            watch: index,
                            objects: std::mem::take(&mut buffer),
                        }
                    }
                    watcher::Event::Apply(obj) => {
                        failures = 0;
                        Update::Applied {
                            watch: index,
                            object: parse(
                                kind,
                                &obj,
                                &self.opts.cluster_domain,
                                &self.opts.cluster_id,
                            ),
                        }
                    }
                    watcher::Event::Delete(obj) => {
                        failures = 0;
                        Update::Deleted {
                            watch: index,
                            id: ObjId::of(&obj),
                        }
                    }
                },
                Some(Err(e)) => match classify(&e, kind.optional()) {
                    Failure::Expired => {
                        tracing::info!(%kind, namespace = %ns, error = %e,
                            "kubernetes adapter: resourceVersion expired; relisting");
                        buffer.clear();
                        continue;
                    }
                    Failure::ExpiredAtStart => {
                        tracing::info!(%kind, namespace = %ns, error = %e,
                            "kubernetes adapter: resourceVersion expired; relisting");
                        buffer.clear();
                        stream = self.stream();
                        continue;
                    }
                    Failure::Malformed => Update::Malformed {
                        watch: index,
                        reason: e.to_string(),
                    },
                    Failure::List { absent } => {
                        buffer.clear();
                        if !self.fail(&mut failures, e.to_string(), absent).await {
                            return;
                        }
                        continue;
                    }
                    Failure::Watch => {
                        probe = true;
                        if !self.fail(&mut failures, e.to_string(), false).await {
                            return;
                        }
                        continue;
                    }
                },
            };
            if !self.send(update).await {
                return;
            }
        }
    }

    /// Reports a failure and waits out the backoff; `false` on shutdown.
    async fn fail(&mut self, failures: &mut u32, error: String, absent: bool) -> bool {
        *failures = failures.saturating_add(1);
        let delay = self.opts.backoff(*failures);
        let (kind, ns) = (self.spec.kind, self.spec.namespace.as_deref().unwrap_or(""));
        if absent {
            tracing::info!(%kind, namespace = %ns, %error, retry_in = ?delay,
                "kubernetes adapter: kind not served (CRD not installed?); treating it as empty");
        } else {
            tracing::warn!(%kind, namespace = %ns, %error, retry_in = ?delay,
                "kubernetes adapter: list/watch failed; keeping the last state and retrying");
        }
        let update = Update::Failed {
            watch: self.index,
            error,
            absent,
            attempt: *failures,
            retry_in: delay,
        };
        if !self.send(update).await {
            return false;
        }
        tokio::select! {
            _ = self.shutdown.changed() => false,
            () = tokio::time::sleep(delay) => true,
        }
    }

    async fn send(&mut self, update: Update) -> bool {
        if *self.shutdown.borrow() {
            return false;
        }
        tokio::select! {
            _ = self.shutdown.changed() => false,
            sent = self.tx.send(update) => sent.is_ok(),
        }
    }
}

/// How a watcher error is handled.
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    /// 410 in the watch stream: kube relists by itself, at once.
    Expired,
    /// 410 answering the watch request itself: kube would retry the same
    /// resourceVersion forever, so the stream is restarted (a relist).
    ExpiredAtStart,
    /// One watch line did not decode: skip it.
    Malformed,
    /// The list failed (`absent`: 404 for a kind that may be missing).
    List { absent: bool },
    /// The watch failed to start or broke.
    Watch,
}

fn classify(e: &watcher::Error, optional: bool) -> Failure {
    match e {
        watcher::Error::WatchError(status) if status.code == 410 => Failure::Expired,
        watcher::Error::WatchStartFailed(kube::Error::Api(status)) if status.code == 410 => {
            Failure::ExpiredAtStart
        }
        watcher::Error::WatchFailed(kube::Error::SerdeError(_)) => Failure::Malformed,
        watcher::Error::InitialListFailed(kube::Error::Api(status)) => Failure::List {
            absent: optional && status.code == 404,
        },
        watcher::Error::InitialListFailed(_) | watcher::Error::NoResourceVersion => {
            Failure::List { absent: false }
        }
        watcher::Error::WatchStartFailed(_)
        | watcher::Error::WatchFailed(_)
        | watcher::Error::WatchError(_) => Failure::Watch,
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Status::failure("x", "y").with_code(code).boxed())
    }

    #[test]
    fn errors_are_classified_by_what_recovers_them() {
        use watcher::Error as E;
        assert_eq!(
            classify(
                &E::WatchError(Status::failure("gone", "Expired").with_code(410).boxed()),
                false
            ),
            Failure::Expired
        );
        assert_eq!(
            classify(&E::WatchStartFailed(api(410)), false),
            Failure::ExpiredAtStart
        );
        assert_eq!(
            classify(&E::InitialListFailed(api(404)), true),
            Failure::List { absent: true }
        );
        assert_eq!(
            classify(&E::InitialListFailed(api(404)), false),
            Failure::List { absent: false }
        );
        assert_eq!(
            classify(&E::InitialListFailed(api(403)), true),
            Failure::List { absent: false }
        );
        assert_eq!(
            classify(&E::WatchStartFailed(api(500)), false),
            Failure::Watch
        );
        let serde = serde_json::from_str::<u8>("x").expect_err("garbage");
        assert_eq!(
            classify(&E::WatchFailed(kube::Error::SerdeError(serde)), false),
            Failure::Malformed
        );
    }
}
