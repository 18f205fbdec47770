//! The xDS services over real gRPC on loopback, with envoy-types' tonic clients:
//! delta and SotW ADS, a per-type service, and hostile inputs.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use deltapilot_server::metrics::Metrics;
use deltapilot_server::xds::Limits;
use deltapilot_server::xds::service::{PublishClock, XdsShared, serve};
use deltapilot_xds::snapshot::{Snapshot, SnapshotWriter};
use deltapilot_xds::{ChangeSet, Resource, ResourceType};
use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tonic::transport::Channel;

const WAIT: Duration = Duration::from_secs(10);

struct Server {
    writer: SnapshotWriter,
    metrics: Arc<Metrics>,
    addr: std::net::SocketAddr,
    drain: watch::Sender<bool>,
    _ready: watch::Sender<bool>,
}

fn next(prev: &Snapshot, edits: &[(ResourceType, &str, Option<&str>)]) -> Snapshot {
    let mut s = prev.clone();
    s.seq += 1;
    let mut cs = ChangeSet::default();
    for (t, name, body) in edits {
        let map = match t {
            ResourceType::Cluster => &mut s.resources.clusters,
            ResourceType::Endpoint => &mut s.resources.endpoints,
            ResourceType::Listener => &mut s.resources.sidecar_listeners,
            ResourceType::Route => &mut s.resources.routes,
            ResourceType::VirtualHost => &mut s.resources.virtual_hosts,
            ResourceType::Secret => unreachable!("secrets are not in snapshots"),
        };
        let n: Arc<str> = Arc::from(*name);
        match body {
            Some(b) => {
                map.insert(Arc::new(Resource::new(
                    n.clone(),
                    Bytes::from(b.to_string()),
                )));
                cs.of_mut(*t).upserted.insert(n);
            }
            None => {
                map.remove(&n);
                cs.of_mut(*t).removed.insert(n);
            }
        }
    }
    s.recent.push_back((s.seq, Arc::new(cs)));
    s
}

async fn start(limits: Limits) -> Server {
    let initial = next(
        &Snapshot::default(),
        &[
            (ResourceType::Cluster, "c1", Some("\x0a\x02c1")),
            (ResourceType::Endpoint, "c1", Some("\x0a\x02c1")),
            (ResourceType::Listener, "l1", Some("\x0a\x02l1")),
        ],
    );
    let (writer, reader) = SnapshotWriter::new(initial);
    let metrics = Arc::new(Metrics::new());
    let (drain, drain_rx) = watch::channel(false);
    let (ready, ready_rx) = watch::channel(true);
    let shared = XdsShared::new(
        reader,
        limits,
        metrics.clone(),
        drain_rx,
        ready_rx,
        Arc::new(PublishClock::default()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(serve(listener, shared));
    Server {
        writer,
        metrics,
        addr,
        drain,
        _ready: ready,
    }
}

async fn channel(addr: std::net::SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect")
}

async fn recv<T>(s: &mut Streaming<T>) -> T {
    tokio::time::timeout(WAIT, s.message())
        .await
        .expect("in time")
        .expect("ok")
        .expect("a message")
}

async fn delta(
    addr: std::net::SocketAddr,
) -> (
    mpsc::Sender<DeltaDiscoveryRequest>,
    Streaming<DeltaDiscoveryResponse>,
) {
    let (tx, rx) = mpsc::channel(16);
    let mut client = AggregatedDiscoveryServiceClient::new(channel(addr).await);
    let resp = client
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .expect("stream");
    (tx, resp.into_inner())
}

fn dreq(t: ResourceType, sub: &[&str], nonce: &str) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        type_url: t.type_url().into(),
        resource_names_subscribe: sub.iter().map(|s| s.to_string()).collect(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn delta_ads_wildcard_push_and_removal() {
    let srv = start(Limits::default()).await;
    let (tx, mut rx) = delta(srv.addr).await;
    tx.send(dreq(ResourceType::Cluster, &[], ""))
        .await
        .expect("send");
    let r = recv(&mut rx).await;
    assert_eq!(r.type_url, ResourceType::Cluster.type_url());
    assert_eq!(
        r.resources
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        ["c1"]
    );
    assert_eq!(
        r.resources[0].resource.as_ref().expect("any").value,
        b"\x0a\x02c1"
    );
    tx.send(dreq(ResourceType::Cluster, &[], &r.nonce))
        .await
        .expect("ack");
    tx.send(dreq(ResourceType::Endpoint, &["c1", "nope"], ""))
        .await
        .expect("eds");
    let e = recv(&mut rx).await;
    assert_eq!(e.resources.len(), 1);
    assert_eq!(e.removed_resources, ["nope"]);
    tx.send(dreq(ResourceType::Endpoint, &[], &e.nonce))
        .await
        .expect("ack");

    let s2 = next(
        &srv.writer.current(),
        &[(ResourceType::Cluster, "c2", Some("\x0a\x02c2"))],
    );
    srv.writer.publish(s2);
    let p = recv(&mut rx).await;
    assert_eq!(
        p.resources
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        ["c2"]
    );
    assert_ne!(p.nonce, r.nonce);
    tx.send(dreq(ResourceType::Cluster, &[], &p.nonce))
        .await
        .expect("ack");
    let s3 = next(
        &srv.writer.current(),
        &[(ResourceType::Cluster, "c2", None)],
    );
    srv.writer.publish(s3);
    let p = recv(&mut rx).await;
    assert_eq!(p.removed_resources, ["c2"]);
    assert!(p.resources.is_empty());
    let text = srv.metrics.encode();
    assert!(
        text.contains("deltapilot_xds_pushes_total{api=\"delta\",type=\"cds\"} 3"),
        "{text}"
    );
}

#[tokio::test]
async fn sotw_ads_and_unknown_type_keeps_stream() {
    let srv = start(Limits::default()).await;
    let (tx, rx) = mpsc::channel(16);
    let mut client = AggregatedDiscoveryServiceClient::new(channel(srv.addr).await);
    let mut rx = client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .expect("stream")
        .into_inner();
    tx.send(DiscoveryRequest {
        type_url: "type.googleapis.com/envoy.Unknown".into(),
        ..Default::default()
    })
    .await
    .expect("send");
    tx.send(DiscoveryRequest {
        type_url: ResourceType::Listener.type_url().into(),
        ..Default::default()
    })
    .await
    .expect("send");
    let r: DiscoveryResponse = recv(&mut rx).await;
    assert_eq!(r.type_url, ResourceType::Listener.type_url());
    assert_eq!(r.resources.len(), 1);
    assert!(!r.version_info.is_empty());
    assert!(
        srv.metrics
            .encode()
            .contains("deltapilot_xds_rejected_requests_total{reason=\"unknown_type\"} 1")
    );
}

#[tokio::test]
async fn too_many_names_is_resource_exhausted_and_others_keep_working() {
    let srv = start(Limits::default()).await;
    let (tx, mut rx) = delta(srv.addr).await;
    let names: Vec<String> = (0..100_001).map(|i| format!("n{i}")).collect();
    let big = DeltaDiscoveryRequest {
        type_url: ResourceType::Endpoint.type_url().into(),
        resource_names_subscribe: names,
        ..Default::default()
    };
    tx.send(big).await.expect("send");
    let err = tokio::time::timeout(WAIT, rx.message())
        .await
        .expect("in time")
        .expect_err("rejected");
    assert!(
        matches!(
            err.code(),
            tonic::Code::ResourceExhausted | tonic::Code::OutOfRange
        ),
        "{err:?}"
    );
    let (tx2, mut rx2) = delta(srv.addr).await;
    tx2.send(dreq(ResourceType::Cluster, &[], "garbage-nonce"))
        .await
        .expect("send");
    let r = recv(&mut rx2).await;
    assert_eq!(
        r.resources.len(),
        1,
        "a garbage nonce is ignored, the subscription still served"
    );
}

#[tokio::test]
async fn per_type_delta_clusters_service_and_drain() {
    let srv = start(Limits::default()).await;
    let (tx, rx) = mpsc::channel(16);
    let mut client = ClusterDiscoveryServiceClient::new(channel(srv.addr).await);
    let mut rx = client
        .delta_clusters(ReceiverStream::new(rx))
        .await
        .expect("stream")
        .into_inner();
    tx.send(DeltaDiscoveryRequest::default())
        .await
        .expect("send");
    let r = recv(&mut rx).await;
    assert_eq!(r.resources.len(), 1);
    srv.drain.send(true).expect("drain");
    let err = tokio::time::timeout(WAIT, rx.message())
        .await
        .expect("in time")
        .expect_err("drained");
    assert_eq!(err.code(), tonic::Code::Unavailable);
}

#[tokio::test]
async fn oversized_request_is_refused_with_a_status() {
    let srv = start(Limits {
        max_request_bytes: 4096,
        ..Limits::default()
    })
    .await;
    let (tx, mut rx) = delta(srv.addr).await;
    let names: Vec<String> = (0..1000).map(|i| format!("name-{i}")).collect();
    tx.send(DeltaDiscoveryRequest {
        type_url: ResourceType::Endpoint.type_url().into(),
        resource_names_subscribe: names,
        ..Default::default()
    })
    .await
    .expect("send");
    let err = tokio::time::timeout(WAIT, rx.message())
        .await
        .expect("in time")
        .expect_err("too big");
    assert!(
        matches!(
            err.code(),
            tonic::Code::OutOfRange | tonic::Code::ResourceExhausted
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_client_that_never_acks_is_closed_after_the_stall_timeout() {
    let srv = start(Limits {
        stall_timeout: Duration::from_millis(300),
        ..Limits::default()
    })
    .await;
    let (tx, mut rx) = delta(srv.addr).await;
    tx.send(dreq(ResourceType::Cluster, &[], ""))
        .await
        .expect("send");
    let _first = recv(&mut rx).await;
    let err = tokio::time::timeout(WAIT, rx.message())
        .await
        .expect("in time")
        .expect_err("stalled");
    assert_eq!(err.code(), tonic::Code::DeadlineExceeded);
    assert!(srv.metrics.encode().contains("reason=\"stalled\""));
}

#[tokio::test]
async fn reconnect_storm_leaves_no_stream_behind_and_others_are_served() {
    let srv = start(Limits::default()).await;
    let ch = channel(srv.addr).await;
    for _ in 0..100 {
        let (tx, rx) = mpsc::channel(1);
        let mut client = AggregatedDiscoveryServiceClient::new(ch.clone());
        let mut s = client
            .delta_aggregated_resources(ReceiverStream::new(rx))
            .await
            .expect("stream")
            .into_inner();
        tx.send(dreq(ResourceType::Cluster, &[], ""))
            .await
            .expect("send");
        let _ = recv(&mut s).await;
        drop(tx);
    }
    let (tx, mut rx) = delta(srv.addr).await;
    tx.send(dreq(ResourceType::Listener, &[], ""))
        .await
        .expect("send");
    assert_eq!(recv(&mut rx).await.resources.len(), 1);
    // Every closed stream is accounted for (bounded wait for their tasks to end).
    let mut open = f64::MAX;
    for _ in 0..100 {
        let m = srv.metrics.encode();
        open = m
            .lines()
            .find(|l| l.starts_with("deltapilot_xds_connected_proxies{"))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0);
        if open <= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(open <= 1.0, "streams left open: {open}");
}
