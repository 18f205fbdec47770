//! The store against real files and certificates made by the openssl CLI.

use super::*;

pub(crate) use deltapilot_testkit::tls::make_cert;

#[test]
fn loads_pairs_keeps_the_last_good_one_and_reports_by_name() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    make_cert(&dir.join("a"), "a.example.com");
    make_cert(&dir.join("b"), "b.example.com");
    std::fs::copy(dir.join("a/tls.crt"), dir.join("b/ca.crt")).expect("ca");
    let store = CredentialStore::new(Some(dir.to_path_buf()), None);
    let set = store.current();
    let names: Vec<&str> = set.secrets.keys().map(|k| &**k).collect::<Vec<_>>();
    let mut names = names;
    names.sort();
    assert_eq!(
        names,
        ["kubernetes://a", "kubernetes://b", "kubernetes://b-cacert"]
    );
    let a_version = set
        .secrets
        .get("kubernetes://a")
        .expect("a")
        .version
        .clone();

    // A key that does not belong to the certificate: refused, the last good
    // pair stays served, and the name is reported.
    let elsewhere = tempfile::tempdir().expect("tempdir");
    make_cert(elsewhere.path(), "other");
    std::fs::copy(elsewhere.path().join("tls.key"), dir.join("a/tls.key")).expect("copy");
    assert!(!store.rescan(), "nothing served changes");
    assert_eq!(
        store
            .current()
            .secrets
            .get("kubernetes://a")
            .expect("a")
            .version,
        a_version
    );
    let (report, _) = store.report();
    let a = report
        .iter()
        .find(|r| r.name == "kubernetes://a")
        .expect("a reported");
    assert_eq!(a.state, "error");
    let why = a.reason.as_deref().expect("reason");
    assert!(why.contains("does not belong"), "{why}");
    assert!(
        !format!("{report:?}").contains("PRIVATE KEY"),
        "no key material"
    );

    // Asked for but absent: missing, by name.
    store.request(&Arc::from("kubernetes://nope"));
    let (report, _) = store.report();
    let nope = report
        .iter()
        .find(|r| r.name == "kubernetes://nope")
        .expect("nope");
    assert_eq!((nope.state, nope.subscribers), ("missing", 1));
    store.release("kubernetes://nope");
    let (report, _) = store.report();
    assert!(report.iter().all(|r| r.name != "kubernetes://nope"));

    // A matching pair again: served, with a new version.
    make_cert(&dir.join("a"), "a.example.com");
    assert!(store.rescan());
    assert_ne!(
        store
            .current()
            .secrets
            .get("kubernetes://a")
            .expect("a")
            .version,
        a_version
    );
}

#[test]
fn pair_check_rejects_garbage_with_a_reason() {
    let tmp = tempfile::tempdir().expect("tempdir");
    make_cert(tmp.path(), "x");
    let cert = std::fs::read(tmp.path().join("tls.crt")).expect("crt");
    let key = std::fs::read(tmp.path().join("tls.key")).expect("key");
    assert_eq!(check_pair(&cert, &key), Ok(()));
    assert!(
        check_pair(b"junk", &key)
            .expect_err("junk")
            .contains("tls.crt")
    );
    assert!(
        check_pair(&cert, b"junk")
            .expect_err("junk")
            .contains("tls.key")
    );
}
