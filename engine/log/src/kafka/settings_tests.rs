use super::*;

fn uri(pairs: &[(&str, &str)]) -> Result<ClientSettings, String> {
    let mut s = ClientSettings::default();
    for (k, v) in pairs {
        s.add_uri(k, v)?;
    }
    Ok(s)
}

#[test]
fn security_settings_pass_through() {
    let s = uri(&[
        ("security.protocol", "SASL_SSL"),
        ("ssl.ca.location", "/etc/ca.pem"),
        ("ssl.endpoint.identification.algorithm", "https"),
        ("sasl.mechanism", "SCRAM-SHA-512"),
        ("sasl.username", "alice"),
        ("linger.ms", "20"),
    ])
    .expect("valid");
    let r = s.resolve().expect("resolve");
    let mut c = ClientConfig::new();
    c.set("linger.ms", "5");
    r.apply(&mut c);
    assert_eq!(c.get("security.protocol"), Some("SASL_SSL"));
    assert_eq!(c.get("sasl.username"), Some("alice"));
    // The operator's tuning wins over deltapilot's default.
    assert_eq!(c.get("linger.ms"), Some("20"));
}

#[test]
fn a_secret_in_the_uri_is_refused_with_the_way_out() {
    for key in [
        "sasl.password",
        "ssl.key.password",
        "sasl.oauthbearer.client.secret",
        "ssl.truststore.password",
    ] {
        let e = uri(&[(key, "hunter2")]).expect_err(key);
        assert!(e.contains("in the URI is refused"), "{key}: {e}");
        assert!(e.contains(&format!("{key}.file=PATH")), "{key}: {e}");
        assert!(!e.contains("hunter2"), "{key}: {e}");
    }
}

#[test]
fn owned_keys_and_typos_are_errors_that_name_the_key() {
    for (key, value, needle) in [
        ("enable.idempotence", "false", "set by deltapilot"),
        ("group.id", "g", "by assignment"),
        ("message.timeout.ms", "1", "append_timeout_ms"),
        ("bootstrap.servers", "h:1", "from the URI"),
        ("ssl.ca.locaton", "/x", "ssl.ca.locaton"),
        ("security.protocol", "TLS", "security.protocol=TLS"),
        (
            "sasl.username.file",
            "/x",
            "librdkafka refused sasl.username.file",
        ),
    ] {
        let e = uri(&[(key, value)]).expect_err(key);
        assert!(e.contains(needle), "{key}: {e}");
    }
    let e = uri(&[("linger.ms", "1"), ("linger.ms", "2")]).expect_err("twice");
    assert!(e.contains("twice"), "{e}");
}

#[test]
fn gssapi_is_refused_at_resolve() {
    let s = uri(&[("sasl.mechanism", "GSSAPI")]).expect("librdkafka knows the name");
    let e = s.resolve().expect_err("no Cyrus SASL");
    assert!(e.contains("GSSAPI (Kerberos) is not supported"), "{e}");
}

#[test]
fn secrets_come_from_files_and_variables_and_are_redacted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pw = dir.path().join("password");
    std::fs::write(&pw, "s3cret-from-file\n").expect("write");
    // A variable every test process has (setting one needs `unsafe`, which the
    // workspace forbids); the server test passes a real one to its child.
    let var = "PATH";
    let from_env = std::env::var(var).expect("PATH is set");
    let s = uri(&[
        ("security.protocol", "SASL_SSL"),
        ("sasl.mechanism", "PLAIN"),
        ("sasl.username", "alice"),
        ("sasl.password.file", pw.to_str().expect("utf-8")),
        ("ssl.key.password.env", var),
    ])
    .expect("valid");
    let debug = format!("{s:?}");
    let r = s.resolve().expect("resolve");
    let mut c = ClientConfig::new();
    r.apply(&mut c);
    // The trailing newline `echo` leaves is not part of the password.
    assert_eq!(c.get("sasl.password"), Some("s3cret-from-file"));
    assert_eq!(c.get("ssl.key.password"), Some(from_env.as_str()));

    let described = r.describe();
    let effective = describe_config(&c);
    for shown in [&described, &effective, &format!("{r:?}"), &debug] {
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(!shown.contains(&from_env), "{shown}");
        assert!(shown.contains("sasl.password=[redacted]"), "{shown}");
        assert!(shown.contains("sasl.username=alice"), "{shown}");
    }
    assert!(
        described.contains(&format!("(file {})", pw.display())),
        "{described}"
    );
    assert!(described.contains(&format!("(env {var})")), "{described}");

    let missing = uri(&[("sasl.password.env", "DP_TEST_NOT_SET_ANYWHERE")])
        .expect("syntax")
        .resolve()
        .expect_err("unset");
    assert!(missing.contains("DP_TEST_NOT_SET_ANYWHERE"), "{missing}");
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "").expect("write");
    let e = uri(&[("sasl.password.file", empty.to_str().expect("utf-8"))])
        .expect("syntax")
        .resolve()
        .expect_err("empty");
    assert!(e.contains("empty"), "{e}");
}

#[test]
fn the_config_file_holds_properties_and_the_uri_wins() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("kafka.properties");
    std::fs::write(
        &file,
        "# TLS to the brokers\nsecurity.protocol = SSL\n\nssl.key.password=file-literal-secret\nlinger.ms=7\n",
    )
    .expect("write");
    let mut s = uri(&[("linger.ms", "9")]).expect("valid");
    s.set_file(file.to_str().expect("utf-8")).expect("file");
    let r = s.resolve().expect("resolve");
    let mut c = ClientConfig::new();
    r.apply(&mut c);
    assert_eq!(c.get("security.protocol"), Some("SSL"));
    assert_eq!(c.get("ssl.key.password"), Some("file-literal-secret"));
    assert_eq!(c.get("linger.ms"), Some("9"));
    assert!(!r.describe().contains("file-literal-secret"), "{r:?}");

    for (text, needle) in [
        (
            "ssl.ca.locaton=/x\n",
            "line 1: librdkafka refused ssl.ca.locaton",
        ),
        ("# c\nno equals sign\n", "line 2: expected key=value"),
        ("acks=1\n", "line 1: acks is set by deltapilot"),
        (
            "partitions=3\n",
            "line 1: librdkafka refused partitions=3: No such configuration",
        ),
        (
            "linger.ms=1\nlinger.ms=2\n",
            "line 2: linger.ms is given twice",
        ),
    ] {
        std::fs::write(&file, text).expect("write");
        let e = s.resolve().expect_err(text);
        assert!(e.contains(needle), "{text:?}: {e}");
        assert!(e.contains(&file.display().to_string()), "{e}");
    }
    let gone = dir.path().join("missing.properties");
    let mut s = ClientSettings::default();
    s.set_file(gone.to_str().expect("utf-8")).expect("file");
    let e = s.resolve().expect_err("missing");
    assert!(e.contains("cannot read"), "{e}");
}

#[test]
fn uris_are_redacted_for_messages() {
    assert_eq!(
        redact_uri("kafka://u:pw@h:1/t?sasl.password=x&sasl.username=u"),
        "kafka://[redacted]@h:1/t?sasl.password=[redacted]&sasl.username=u"
    );
    assert_eq!(
        redact_uri("kafka://h:1/t?partitions=3"),
        "kafka://h:1/t?partitions=3"
    );
}

#[test]
fn oauthbearer_values_are_redacted_and_oidc_is_not_in_this_build() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("kafka.properties");
    std::fs::write(
        &file,
        "sasl.mechanism=OAUTHBEARER\nsasl.oauthbearer.config=principal=dp hidden-value\n",
    )
    .expect("write");
    let mut s = ClientSettings::default();
    s.set_file(file.to_str().expect("utf-8")).expect("file");
    let shown = s.resolve().expect("resolve").describe();
    assert!(shown.contains("sasl.mechanism=OAUTHBEARER"), "{shown}");
    assert!(
        shown.contains("sasl.oauthbearer.config=[redacted]"),
        "{shown}"
    );
    assert!(!shown.contains("hidden-value"), "{shown}");
    // Every other sasl.oauthbearer.* value is hidden too, bar the public few.
    assert!(is_redacted("sasl.oauthbearer.extensions"));
    assert!(is_redacted("sasl.oauthbearer.assertion.claim.sub"));
    assert!(!is_redacted("sasl.oauthbearer.method"));
    assert!(!is_redacted("sasl.username"));
    let e = uri(&[("sasl.oauthbearer.client.secret", "x")]).expect_err("secret");
    assert!(
        e.contains("sasl.oauthbearer.client.secret.file=PATH"),
        "{e}"
    );
    // OIDC needs libcurl, which this build does not link: librdkafka says so.
    let e = uri(&[("sasl.oauthbearer.method", "oidc")]).expect_err("no OIDC");
    assert!(
        e.contains("sasl.oauthbearer.method") && e.contains("not supported in this build"),
        "{e}"
    );
}

#[test]
fn without_a_ca_the_system_bundle_is_trusted() {
    let mut c = ClientConfig::new();
    Resolved::default().apply(&mut c);
    assert_eq!(c.get("ssl.ca.location"), Some("probe"));
    let mut c = ClientConfig::new();
    uri(&[("ssl.ca.location", "/etc/ca.pem")])
        .expect("valid")
        .resolve()
        .expect("resolve")
        .apply(&mut c);
    assert_eq!(c.get("ssl.ca.location"), Some("/etc/ca.pem"));
    let mut c = ClientConfig::new();
    uri(&[("ssl.ca.pem", "-----BEGIN CERTIFICATE-----")])
        .expect("valid")
        .resolve()
        .expect("resolve")
        .apply(&mut c);
    assert_eq!(
        c.get("ssl.ca.location"),
        None,
        "a PEM CA alone, not widened"
    );
}
