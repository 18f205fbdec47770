use bytes::Bytes;

use super::*;
use crate::xds::request::VersionEntry;

fn store_with(names: &[&str]) -> (tempfile::TempDir, Arc<CredentialStore>) {
    let tmp = tempfile::tempdir().expect("tempdir");
    for n in names {
        super::super::tests::make_cert(&tmp.path().join(n), n);
    }
    let store = CredentialStore::new(Some(tmp.path().to_path_buf()), None);
    (tmp, store)
}

fn delta(subscribe: &[&str], unsubscribe: &[&str], nonce: &str) -> DeltaRequest {
    DeltaRequest {
        type_url: Bytes::from_static(ResourceType::Secret.type_url().as_bytes()),
        subscribe: subscribe
            .iter()
            .map(|s| Bytes::from(s.to_string()))
            .collect(),
        unsubscribe: unsubscribe
            .iter()
            .map(|s| Bytes::from(s.to_string()))
            .collect(),
        response_nonce: Bytes::from(nonce.to_string()),
        ..Default::default()
    }
}

#[test]
fn delta_serves_explicit_names_and_forgets_on_unsubscribe() {
    let (tmp, store) = store_with(&["a", "b"]);
    let mut s = DeltaSecrets::new(store.clone());
    s.on_request(&delta(&["*"], &[], "")).expect("ok");
    assert!(
        s.next(&store.current()).is_none(),
        "a wildcard asks for nothing"
    );
    s.on_request(&delta(&["kubernetes://a", "kubernetes://missing"], &[], ""))
        .expect("ok");
    let (out, n) = s.next(&store.current()).expect("a is due");
    assert_eq!(n, 1);
    assert_eq!(&*out.resources[0].name, "kubernetes://a");
    assert!(out.nonce.starts_with('s'));
    assert!(s.next(&store.current()).is_none(), "one in flight");
    let o = s.on_request(&delta(&[], &[], &out.nonce)).expect("ack");
    assert!(o.ack.is_some());
    assert!(s.next(&store.current()).is_none(), "nothing changed");
    // Rotation: the new version goes out.
    super::super::tests::make_cert(&tmp.path().join("a"), "a");
    assert!(store.rescan());
    let (out, _) = s.next(&store.current()).expect("rotated");
    s.on_request(&delta(&[], &[], &out.nonce)).expect("ack");
    // Unsubscribe, then subscribe again: answered again.
    s.on_request(&delta(&[], &["kubernetes://a"], ""))
        .expect("ok");
    assert!(s.next(&store.current()).is_none());
    s.on_request(&delta(&["kubernetes://a"], &[], ""))
        .expect("ok");
    assert!(
        s.next(&store.current()).is_some(),
        "a resubscribe is answered"
    );
    let (report, _) = store.report();
    let missing = report
        .iter()
        .find(|r| r.name == "kubernetes://missing")
        .expect("missing");
    assert_eq!(missing.state, "missing");
    drop(s);
    let (report, _) = store.report();
    assert!(
        report.iter().all(|r| r.name != "kubernetes://missing"),
        "released on drop"
    );
}

#[test]
fn delta_reconnect_with_current_versions_sends_nothing() {
    let (_tmp, store) = store_with(&["a"]);
    let version = store
        .current()
        .secrets
        .get("kubernetes://a")
        .expect("a")
        .version
        .clone();
    let mut s = DeltaSecrets::new(store.clone());
    let mut req = delta(&["kubernetes://a"], &[], "");
    req.initial_resource_versions = vec![VersionEntry {
        name: Bytes::from_static(b"kubernetes://a"),
        version: Bytes::from(version.to_string()),
    }];
    s.on_request(&req).expect("ok");
    assert!(s.next(&store.current()).is_none());
}

#[test]
fn sotw_sends_the_subscribed_state_when_it_changes() {
    let (tmp, store) = store_with(&["a", "b"]);
    let mut s = SotwSecrets::new(store.clone());
    let req = |names: &[&str], nonce: &str| DiscoveryRequest {
        type_url: ResourceType::Secret.type_url().to_string(),
        resource_names: names.iter().map(|s| s.to_string()).collect(),
        response_nonce: nonce.to_string(),
        ..Default::default()
    };
    s.on_request(&req(&["kubernetes://a"], "")).expect("ok");
    let (out, n) = s.next(&store.current()).expect("due");
    assert_eq!(n, 1);
    s.on_request(&req(&["kubernetes://a", "kubernetes://b"], &out.nonce))
        .expect("ack");
    let (out, n) = s.next(&store.current()).expect("b added");
    assert_eq!(n, 2);
    s.on_request(&req(&["kubernetes://a", "kubernetes://b"], &out.nonce))
        .expect("ack");
    assert!(s.next(&store.current()).is_none());
    super::super::tests::make_cert(&tmp.path().join("b"), "b");
    store.rescan();
    assert!(s.next(&store.current()).is_some(), "rotated");
}
