//! The Helm chart (`deploy/helm/deltapilot`) against the code: it lints
//! (`helm lint --strict`, helm 3 from `DELTAPILOT_HELM`), renders with the
//! default values and every CI variant (`deploy/helm/ci/*.yaml`: Kafka, Kafka
//! without Istio, embedded without Kubernetes, mutual TLS with an admin token),
//! and every rendered manifest parses into its k8s-openapi type without losing a
//! field. The RBAC rules equal the Kubernetes adapter's own list of watched
//! resources and verbs; every flag and variable a container passes is one
//! `deltapilot <subcommand> --help` documents, with a value the binary accepts;
//! the TLS and token files are in directory-mounted Secret volumes, and the
//! rendered TLS settings start the binary; settings the chosen mode cannot
//! honour fail the render instead of being dropped.

mod deploy_support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::process::Command;

use deltapilot_adapters::kubernetes::{KubernetesOptions, WATCH_VERBS, watched_resources};
use deploy_support::pod::{
    check_conn_age, check_probes, check_scrape, env_of, get_status, pod_non_root, start_rendered,
};
use deploy_support::{
    DATA_DIR, chart, has_env, has_flag, help, render, render_text, run_ok, tool, variants,
};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The service-account token the in-cluster kubeconfig reads.
const SA_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// Every manifest of one render, typed.
#[derive(Default)]
struct Rendered {
    statefulsets: Vec<StatefulSet>,
    deployments: Vec<Deployment>,
    services: Vec<Service>,
    service_accounts: Vec<ServiceAccount>,
    cluster_roles: Vec<ClusterRole>,
    bindings: Vec<ClusterRoleBinding>,
    pdbs: Vec<PodDisruptionBudget>,
    config_maps: Vec<ConfigMap>,
}

/// Parses `v` as `T` and serializes it back: a field k8s-openapi does not know
/// (a typo, a wrong nesting) is dropped on the way, and the two differ.
fn typed<T: DeserializeOwned + Serialize>(source: &str, v: &Value) -> T {
    let t: T = serde_json::from_value(v.clone()).unwrap_or_else(|e| {
        panic!(
            "{source}: does not parse as {}: {e}",
            std::any::type_name::<T>()
        )
    });
    let back = serde_json::to_value(&t).expect("serialize");
    if &back != v {
        let mut lost = Vec::new();
        diff("", v, &back, &mut lost);
        panic!(
            "{source}: {} drops or changes fields: {lost:?}",
            std::any::type_name::<T>()
        );
    }
    t
}

/// The paths where `want` and `got` differ.
fn diff(path: &str, want: &Value, got: &Value, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let p = format!("{path}.{k}");
                match b.get(k) {
                    Some(w) => diff(&p, v, w, out),
                    None => out.push(format!("{p}: dropped")),
                }
            }
            for k in b.keys().filter(|k| !a.contains_key(*k)) {
                out.push(format!("{path}.{k}: added"));
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(&format!("{path}[{i}]"), x, y, out);
            }
        }
        _ if want != got => out.push(format!("{path}: {want} != {got}")),
        _ => {}
    }
}

fn render_typed(values: Option<&std::path::Path>, set: &[&str]) -> Rendered {
    let mut r = Rendered::default();
    for (source, v) in render(values, set) {
        let kind = v["kind"].as_str().unwrap_or_default().to_owned();
        match kind.as_str() {
            "StatefulSet" => r.statefulsets.push(typed(&source, &v)),
            "Deployment" => r.deployments.push(typed(&source, &v)),
            "Service" => r.services.push(typed(&source, &v)),
            "ServiceAccount" => r.service_accounts.push(typed(&source, &v)),
            "ClusterRole" => r.cluster_roles.push(typed(&source, &v)),
            "ClusterRoleBinding" => r.bindings.push(typed(&source, &v)),
            "PodDisruptionBudget" => r.pdbs.push(typed(&source, &v)),
            "ConfigMap" => r.config_maps.push(typed(&source, &v)),
            other => panic!("{source}: kind {other:?} is not one this test checks"),
        }
    }
    r
}

/// The values a variant file sets (the chart's defaults when absent).
fn variant_values(file: Option<&std::path::Path>) -> serde_yaml::Value {
    let defaults: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(chart().join("values.yaml")).expect("values.yaml"),
    )
    .expect("values.yaml parses");
    let Some(f) = file else { return defaults };
    let over: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(f).expect("variant")).expect("variant");
    merge(defaults, over)
}

fn merge(base: serde_yaml::Value, over: serde_yaml::Value) -> serde_yaml::Value {
    match (base, over) {
        (serde_yaml::Value::Mapping(mut b), serde_yaml::Value::Mapping(o)) => {
            for (k, v) in o {
                let merged = match b.remove(&k) {
                    Some(old) => merge(old, v),
                    None => v,
                };
                b.insert(k, merged);
            }
            serde_yaml::Value::Mapping(b)
        }
        (_, o) => o,
    }
}

/// Every flag and variable of `c` is documented by the subcommand its args name,
/// and the values the binary parses itself parse here too.
fn check_container(what: &str, c: &Container) {
    let args = c.args.clone().unwrap_or_default();
    let sub: Vec<&str> = args
        .iter()
        .take_while(|a| !a.starts_with('-'))
        .map(String::as_str)
        .collect();
    assert!(
        matches!(sub.as_slice(), ["run"] | ["adapter", "kubernetes"]),
        "{what}: unexpected subcommand {sub:?}"
    );
    let text = help(&sub);
    for flag in args.iter().skip(sub.len()) {
        let name = flag.split('=').next().unwrap_or(flag);
        assert!(
            has_flag(&text, name),
            "{what}: passes {name}, which `deltapilot {}` does not have",
            sub.join(" ")
        );
    }
    for (name, value) in env_of(c) {
        assert!(
            has_env(&text, &name),
            "{what}: sets {name}, which `deltapilot {}` does not read",
            sub.join(" ")
        );
        match name.as_str() {
            "DELTAPILOT_LOG" => {
                deltapilot_log::parse_uri(&value)
                    .unwrap_or_else(|e| panic!("{what}: DELTAPILOT_LOG={value}: {e}"));
            }
            "DELTAPILOT_XDS_ADDR" | "DELTAPILOT_ADMIN_ADDR" | "DELTAPILOT_ADAPTER_ADMIN_ADDR" => {
                let a: SocketAddr = value
                    .parse()
                    .unwrap_or_else(|e| panic!("{what}: {name}={value}: {e}"));
                let port = i32::from(a.port());
                let named = if name == "DELTAPILOT_XDS_ADDR" {
                    "xds"
                } else {
                    "admin"
                };
                let declared = c
                    .ports
                    .iter()
                    .flatten()
                    .find(|p| p.name.as_deref() == Some(named))
                    .map(|p| p.container_port);
                assert_eq!(declared, Some(port), "{what}: port {named} != {name}");
            }
            "DELTAPILOT_DATA_DIR" => assert_eq!(value, DATA_DIR, "{what}"),
            // The binary refuses an age of 0; a grace of 0 closes at once.
            "DELTAPILOT_XDS_MAX_CONNECTION_AGE_SECS"
            | "DELTAPILOT_XDS_MAX_CONNECTION_AGE_GRACE_SECS" => {
                let n: u64 = value
                    .parse()
                    .unwrap_or_else(|e| panic!("{what}: {name}={value}: {e}"));
                assert!(
                    n > 0 || name.ends_with("GRACE_SECS"),
                    "{what}: {name}={value}"
                );
            }
            _ => {}
        }
    }
    let mounts: BTreeSet<String> = c
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| m.mount_path.clone())
        .collect();
    assert!(
        mounts.contains(DATA_DIR),
        "{what}: {DATA_DIR} is not a volume"
    );
    let sc = c
        .security_context
        .as_ref()
        .expect("container securityContext");
    assert_eq!(sc.read_only_root_filesystem, Some(true), "{what}");
    assert_eq!(sc.allow_privilege_escalation, Some(false), "{what}");
}

/// The RBAC rules as (group, resource, verb) triples.
fn rbac(r: &Rendered) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for role in &r.cluster_roles {
        for rule in role.rules.iter().flatten() {
            for g in rule.api_groups.iter().flatten() {
                for res in rule.resources.iter().flatten() {
                    for v in &rule.verbs {
                        out.insert((g.clone(), res.clone(), v.clone()));
                    }
                }
            }
        }
    }
    out
}

fn want_rbac(istio: bool) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for (g, res) in watched_resources(istio) {
        for v in WATCH_VERBS {
            out.insert((g.clone(), res.clone(), v.to_owned()));
        }
    }
    out
}

#[test]
fn chart_lints_and_renders_into_valid_objects_that_match_the_binary() {
    let helm = tool("DELTAPILOT_HELM");
    let chart_meta: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(chart().join("Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml parses");
    assert_eq!(
        chart_meta["appVersion"].as_str(),
        Some(env!("CARGO_PKG_VERSION")),
        "Chart.yaml appVersion must be the workspace version"
    );
    let mut seen_modes = BTreeSet::new();
    for (name, file) in variants() {
        let mut lint = Command::new(&helm);
        lint.arg("lint").arg("--strict").arg(chart());
        if let Some(f) = &file {
            lint.arg("--values").arg(f);
        }
        run_ok(&format!("helm lint --strict ({name})"), &mut lint);

        let values = variant_values(file.as_deref());
        let kafka = values["log"]["mode"].as_str() == Some("kafka");
        let k8s = values["kubernetes"]["enabled"].as_bool() == Some(true);
        let istio = values["kubernetes"]["istio"].as_bool() == Some(true);
        let pdb = values["podDisruptionBudget"]["enabled"].as_bool() == Some(true);
        seen_modes.insert((kafka, k8s, istio));
        let r = render_typed(file.as_deref(), &[]);

        // The replicas: a StatefulSet on the embedded log, a Deployment on Kafka.
        let (server_spec, server_labels) = if kafka {
            assert!(
                r.statefulsets.is_empty(),
                "{name}: Kafka mode has no StatefulSet"
            );
            let d = r
                .deployments
                .iter()
                .find(|d| d.metadata.name.as_deref() == Some("dp-deltapilot"))
                .unwrap_or_else(|| panic!("{name}: no server Deployment"));
            let spec = d.spec.as_ref().expect("spec");
            (
                spec.template.spec.clone().expect("pod spec"),
                spec.template.metadata.clone(),
            )
        } else {
            assert_eq!(r.statefulsets.len(), 1, "{name}: one StatefulSet");
            assert!(
                r.deployments.is_empty(),
                "{name}: embedded mode has no Deployment"
            );
            let s = r.statefulsets[0].spec.as_ref().expect("spec");
            let claims = s
                .volume_claim_templates
                .as_ref()
                .expect("a volume per replica");
            assert_eq!(claims[0].metadata.name.as_deref(), Some("data"), "{name}");
            (
                s.template.spec.clone().expect("pod spec"),
                s.template.metadata.clone(),
            )
        };
        pod_non_root(&name, &server_spec);
        check_secrets(&name, &values, &server_spec);
        check_kafka_files(&format!("{name}: server"), &values, &server_spec);
        let server = &server_spec.containers[0];
        check_container(&format!("{name}: server"), server);
        check_probes(&format!("{name}: server"), server);
        check_scrape(&format!("{name}: server"), server_labels.as_ref(), server);
        let env = env_of(server);
        let file_options = values["log"]["embedded"]["options"]
            .as_mapping()
            .is_some_and(|m| !m.is_empty());
        assert_eq!(
            env.contains_key("DELTAPILOT_LOG"),
            kafka || file_options,
            "{name}: --log for Kafka or embedded-log options, else the default DATA_DIR/log"
        );
        if let (false, Some(uri)) = (kafka, env.get("DELTAPILOT_LOG")) {
            match deltapilot_log::parse_uri(uri) {
                Ok((deltapilot_log::LogUri::File { dir }, _)) => assert!(
                    dir.starts_with(DATA_DIR),
                    "{name}: the embedded log {} is outside the data volume",
                    dir.display()
                ),
                other => panic!("{name}: embedded mode with --log {uri}: {other:?}"),
            }
        }
        check_conn_age(&name, &values, &env);
        assert_eq!(
            env.contains_key("DELTAPILOT_KUBECONFIG"),
            k8s && !kafka,
            "{name}: the in-process adapter only on the embedded log"
        );
        let requests = server
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .expect("resource requests");
        assert!(
            requests.contains_key("cpu") && requests.contains_key("memory"),
            "{name}"
        );

        // The single-writer adapter on Kafka.
        let adapter = r
            .deployments
            .iter()
            .find(|d| d.metadata.name.as_deref() == Some("dp-deltapilot-adapter"));
        assert_eq!(
            adapter.is_some(),
            kafka && k8s,
            "{name}: adapter Deployment"
        );
        if let Some(a) = adapter {
            let spec = a.spec.as_ref().expect("spec");
            assert_eq!(spec.replicas, Some(1), "{name}: one writer");
            assert_eq!(
                spec.strategy.as_ref().and_then(|s| s.type_.as_deref()),
                Some("Recreate"),
                "{name}: old and new adapter never overlap"
            );
            let pod = spec.template.spec.as_ref().expect("pod spec");
            pod_non_root(&name, pod);
            let c = &pod.containers[0];
            check_container(&format!("{name}: adapter"), c);
            check_kafka_files(&format!("{name}: adapter"), &values, pod);
            check_probes(&format!("{name}: adapter"), c);
            check_scrape(
                &format!("{name}: adapter"),
                spec.template.metadata.as_ref(),
                c,
            );
            // The probes reach the pod address, not the adapter's loopback default.
            let admin_addr = env_of(c)
                .get("DELTAPILOT_ADAPTER_ADMIN_ADDR")
                .cloned()
                .unwrap_or_else(|| panic!("{name}: the adapter's admin address is not set"));
            assert!(
                admin_addr.starts_with("0.0.0.0:"),
                "{name}: adapter admin on {admin_addr}"
            );
            assert_eq!(
                admin_addr.rsplit(':').next(),
                values["admin"]["adapterPort"]
                    .as_u64()
                    .map(|p| p.to_string())
                    .as_deref(),
                "{name}: admin.adapterPort"
            );
            let has_no_istio = c.args.iter().flatten().any(|a| a == "--no-istio");
            assert_eq!(has_no_istio, !istio, "{name}: --no-istio iff istio is off");
            let aenv = env_of(c);
            assert_eq!(
                aenv.get("DELTAPILOT_LOG"),
                env.get("DELTAPILOT_LOG"),
                "{name}: one log"
            );
        }

        // Services: xDS and admin, selecting the server pods, on their ports.
        let pod_labels = server_labels.and_then(|m| m.labels).expect("pod labels");
        let selects =
            |sel: &BTreeMap<String, String>| sel.iter().all(|(k, v)| pod_labels.get(k) == Some(v));
        for (svc, port) in [("dp-deltapilot", "xds"), ("dp-deltapilot-admin", "admin")] {
            let s = r
                .services
                .iter()
                .find(|s| s.metadata.name.as_deref() == Some(svc))
                .unwrap_or_else(|| panic!("{name}: no Service {svc}"));
            let spec = s.spec.as_ref().expect("spec");
            assert!(
                selects(spec.selector.as_ref().expect("selector")),
                "{name}: {svc}"
            );
            let p = &spec.ports.as_ref().expect("ports")[0];
            use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
            assert_eq!(
                p.target_port,
                Some(IntOrString::String(port.into())),
                "{name}: {svc}"
            );
        }
        assert!(
            !selects(&BTreeMap::from([(
                "app.kubernetes.io/component".to_owned(),
                "adapter".to_owned()
            )])),
            "{name}: the adapter is not behind the xDS Service"
        );

        // The PodDisruptionBudget covers the server pods.
        assert_eq!(
            r.pdbs.len(),
            usize::from(pdb),
            "{name}: PodDisruptionBudget"
        );
        for p in &r.pdbs {
            let sel = p
                .spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .and_then(|s| s.match_labels.as_ref())
                .expect("matchLabels");
            assert!(selects(sel), "{name}: the PDB selects the server pods");
        }

        // RBAC: exactly list and watch of what the adapter watches.
        assert_eq!(r.service_accounts.len(), 1, "{name}");
        if k8s {
            // `deltapilot run` always watches the Istio kinds.
            let want = want_rbac(istio || !kafka);
            assert_eq!(
                rbac(&r),
                want,
                "{name}: RBAC must equal the adapter's watch list"
            );
            assert_eq!(r.bindings.len(), 1, "{name}");
            let subject = &r.bindings[0].subjects.as_ref().expect("subjects")[0];
            assert_eq!(
                Some(&subject.name),
                server_spec.service_account_name.as_ref(),
                "{name}: the binding names the pods' ServiceAccount"
            );
        } else {
            assert!(
                r.cluster_roles.is_empty() && r.bindings.is_empty(),
                "{name}: no RBAC"
            );
        }

        // The in-process adapter's kubeconfig: a real kubeconfig reading the
        // service-account token, mounted where DELTAPILOT_KUBECONFIG points.
        if let Some(path) = env.get("DELTAPILOT_KUBECONFIG") {
            let cm = r.config_maps.first().expect("kubeconfig ConfigMap");
            let text = &cm.data.as_ref().expect("data")["config"];
            let kc = kube::config::Kubeconfig::from_yaml(text)
                .unwrap_or_else(|e| panic!("{name}: kubeconfig does not parse: {e}"));
            let user = kc.auth_infos[0].auth_info.as_ref().expect("user");
            assert_eq!(user.token_file.as_deref(), Some(SA_TOKEN), "{name}");
            let mount = server
                .volume_mounts
                .iter()
                .flatten()
                .find(|m| m.name == "kubeconfig")
                .expect("kubeconfig mount");
            assert_eq!(path, &format!("{}/config", mount.mount_path), "{name}");
        }
    }
    assert!(
        seen_modes.len() >= 4,
        "the variants must cover embedded, embedded without Kubernetes, Kafka and Kafka without Istio: {seen_modes:?}"
    );
}

#[test]
fn the_chart_defaults_are_the_binarys_and_unhonourable_settings_fail_the_render() {
    let values = variant_values(None);
    // The embedded mode's in-process adapter runs with KubernetesOptions'
    // defaults; the chart's must be the same, or the chart would describe a
    // cluster id the adapter does not use.
    assert_eq!(
        values["kubernetes"]["clusterId"].as_str(),
        Some(KubernetesOptions::DEFAULT_CLUSTER_ID)
    );
    assert_eq!(
        values["kubernetes"]["clusterDomain"].as_str(),
        Some(KubernetesOptions::DEFAULT_CLUSTER_DOMAIN)
    );
    for set in [
        "kubernetes.namespaces={a}",
        "kubernetes.labelSelector=app=x",
        "kubernetes.istio=false",
        "kubernetes.clusterId=east",
    ] {
        let err = render_text(None, &[set]).expect_err(set);
        assert!(
            err.contains("apply only to the separate adapter of log.mode=kafka"),
            "{set}: {err}"
        );
    }
    let err = render_text(None, &["log.mode=kafka"]).expect_err("no brokers");
    assert!(err.contains("log.kafka.brokers"), "{err}");
    let err = render_text(None, &["extraEnv.NOT_OURS=1"]).expect_err("schema");
    assert!(err.contains("extraEnv"), "{err}");
    let err = render_text(None, &["tls.enabled=true"]).expect_err("schema");
    assert!(err.contains("tls"), "TLS lives under xds.tls: {err}");
    let err = render_text(None, &["xds.tls.allow={a}"]).expect_err("no secret");
    assert!(err.contains("need xds.tls.secretName"), "{err}");
    let err = render_text(None, &["xds.tls.secretName=s", "xds.tls.allow={a}"])
        .expect_err("allow without mutual");
    assert!(err.contains("xds.tls.allow needs xds.tls.mutual"), "{err}");
    let kafka = ["log.mode=kafka", "log.kafka.brokers={k:9092}"];
    let err = render_text(
        None,
        &[kafka[0], kafka[1], "log.kafka.options.sasl\\.password=x"],
    )
    .expect_err("a password in the URI");
    assert!(
        err.contains("a secret in the kafka:// URI is refused")
            && err.contains("sasl.password.file"),
        "{err}"
    );
    let err = render_text(None, &["xds.maxConnectionAgeGraceSecs=5"]).expect_err("no age");
    assert!(
        err.contains("xds.maxConnectionAgeGraceSecs needs xds.maxConnectionAgeSecs"),
        "{err}"
    );
    let err = render_text(None, &["log.kafka.secretName=s"]).expect_err("embedded");
    assert!(err.contains("applies only to log.mode=kafka"), "{err}");
}

/// On Kafka, every file the `kafka://` URI names under the Kafka Secret's
/// directory (a CA, a password file) is in that Secret's volume, mounted as a
/// directory.
fn check_kafka_files(what: &str, values: &serde_yaml::Value, pod: &PodSpec) {
    let c = &pod.containers[0];
    let Some(uri) = env_of(c).get("DELTAPILOT_LOG").cloned() else {
        return;
    };
    let secret = values["log"]["kafka"]["secretName"].as_str().unwrap_or("");
    let query = uri.split_once('?').map_or("", |(_, q)| q);
    for value in query
        .split('&')
        .filter_map(|kv| kv.split_once('=').map(|(_, v)| v))
    {
        let Some(file) = value.strip_prefix("/etc/deltapilot/kafka/") else {
            continue;
        };
        assert!(
            !secret.is_empty(),
            "{what}: {value} needs log.kafka.secretName"
        );
        let mount = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.mount_path == "/etc/deltapilot/kafka")
            .unwrap_or_else(|| panic!("{what}: {value} is in no mounted directory"));
        assert_eq!(
            mount.sub_path, None,
            "{what}: {file} through a subPath mount"
        );
        let volume = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == mount.name)
            .unwrap_or_else(|| panic!("{what}: no volume {}", mount.name));
        assert_eq!(
            volume
                .secret
                .as_ref()
                .and_then(|s| s.secret_name.as_deref()),
            Some(secret),
            "{what}: {value}"
        );
    }
}

/// The TLS and admin-token values: each file the server reads is in a Secret
/// volume of the values' Secret, mounted as a directory (a `subPath` mount
/// would never see a rotation).
fn check_secrets(what: &str, values: &serde_yaml::Value, pod: &PodSpec) {
    let c = &pod.containers[0];
    let env = env_of(c);
    let tls_secret = values["xds"]["tls"]["secretName"].as_str().unwrap_or("");
    let mutual = values["xds"]["tls"]["mutual"].as_bool() == Some(true);
    let token_secret = values["admin"]["tokenSecret"].as_str().unwrap_or("");
    let mut want = Vec::new();
    if !tls_secret.is_empty() {
        want.push(("DELTAPILOT_XDS_TLS_CERT", tls_secret, "tls.crt"));
        want.push(("DELTAPILOT_XDS_TLS_KEY", tls_secret, "tls.key"));
        if mutual {
            want.push(("DELTAPILOT_XDS_TLS_CLIENT_CA", tls_secret, "ca.crt"));
        }
    }
    if !token_secret.is_empty() {
        want.push(("DELTAPILOT_ADMIN_TOKEN_FILE", token_secret, "token"));
    }
    for var in [
        "DELTAPILOT_XDS_TLS_CERT",
        "DELTAPILOT_XDS_TLS_KEY",
        "DELTAPILOT_XDS_TLS_CLIENT_CA",
        "DELTAPILOT_ADMIN_TOKEN_FILE",
    ] {
        assert_eq!(
            env.contains_key(var),
            want.iter().any(|(v, _, _)| *v == var),
            "{what}: {var}"
        );
    }
    for (var, secret, file) in want {
        let path = std::path::Path::new(&env[var]);
        assert_eq!(
            path.file_name().and_then(|f| f.to_str()),
            Some(file),
            "{what}: {var}"
        );
        let mount = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| path.parent() == Some(std::path::Path::new(&m.mount_path)))
            .unwrap_or_else(|| {
                panic!(
                    "{what}: {var}={} is in no mounted directory",
                    path.display()
                )
            });
        assert_eq!(
            mount.sub_path, None,
            "{what}: {var} through a subPath mount"
        );
        let volume = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == mount.name)
            .unwrap_or_else(|| panic!("{what}: no volume {}", mount.name));
        let s = volume
            .secret
            .as_ref()
            .unwrap_or_else(|| panic!("{what}: {} is not a Secret", mount.name));
        assert_eq!(s.secret_name.as_deref(), Some(secret), "{what}: {var}");
        if var == "DELTAPILOT_ADMIN_TOKEN_FILE" {
            let key = values["admin"]["tokenKey"].as_str().expect("tokenKey");
            let items = s.items.clone().unwrap_or_default();
            assert!(
                items.iter().any(|i| i.key == key && i.path == "token"),
                "{what}: the token key {key} is not mounted as `token`: {items:?}"
            );
        }
    }
    let allow = values["xds"]["tls"]["allow"]
        .as_sequence()
        .map(|s| {
            s.iter()
                .filter_map(|v| v.as_str())
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    assert_eq!(
        env.get("DELTAPILOT_XDS_TLS_ALLOW")
            .cloned()
            .unwrap_or_default(),
        allow,
        "{what}: --xds-tls-allow"
    );
}

/// The server container's environment, as rendered, starts the real binary
/// (addresses moved to free loopback ports, data in a temp dir, no cluster), and
/// the probe paths answer 200.
#[test]
fn the_rendered_server_environment_starts_the_binary_and_its_probes_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = rendered_server(
        None,
        &[
            "kubernetes.enabled=false",
            "extraEnv.DELTAPILOT_MAX_STREAMS=500",
            "xds.maxConnectionAgeSecs=1800",
            "xds.maxConnectionAgeGraceSecs=20",
        ],
    );
    let env = env_of(&server);
    assert_eq!(
        env.get("DELTAPILOT_XDS_MAX_CONNECTION_AGE_SECS")
            .map(String::as_str),
        Some("1800")
    );
    let (_child, admin, _) = start_rendered(dir.path(), &server);
    // Moved to loopback, and with no token, /debug/* is served as is.
    assert_eq!(get_status(admin, "/debug/snapshot"), Some(200));
}

/// With the TLS variant's values, the Secrets' files (made here, at the paths
/// the chart mounts them, moved under a temp dir) start the binary: xDS
/// handshakes mutual TLS, and `/debug/*` answers behind the token.
#[test]
fn the_rendered_tls_and_token_settings_start_the_binary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mounted = dir.path().join("etc/deltapilot");
    let ca = deltapilot_testkit::tls::make_ca(&dir.path().join("ca"), "ca");
    let tls = mounted.join("xds-tls");
    deltapilot_testkit::tls::make_signed(&ca, &tls, "deltapilot", &["DNS:localhost"], 7);
    std::fs::copy(&ca.cert, tls.join("ca.crt")).expect("ca.crt");
    let client = dir.path().join("client");
    deltapilot_testkit::tls::make_signed(
        &ca,
        &client,
        "web",
        &["URI:spiffe://cluster.local/ns/shop/sa/web"],
        8,
    );
    std::fs::create_dir_all(mounted.join("admin-token")).expect("token dir");
    std::fs::write(mounted.join("admin-token/token"), "chart-token\n").expect("token");
    let values = deploy_support::repo().join("deploy/helm/ci/tls.yaml");
    let server = rendered_server(Some(&values), &["kubernetes.enabled=false"]);
    let (_child, admin, xds) = start_rendered(dir.path(), &server);
    assert_eq!(get_status(admin, "/debug/snapshot"), Some(401));
    let out = Command::new("timeout")
        .args(["10", "openssl", "s_client", "-connect"])
        .arg(format!("127.0.0.1:{xds}"))
        .args([
            "-servername",
            "localhost",
            "-alpn",
            "h2",
            "-verify_return_error",
        ])
        .arg("-CAfile")
        .arg(&ca.cert)
        .arg("-cert")
        .arg(client.join("tls.crt"))
        .arg("-key")
        .arg(client.join("tls.key"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl s_client");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("ALPN protocol: h2"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The server container of the chart rendered with `values` and `set`.
fn rendered_server(values: Option<&std::path::Path>, set: &[&str]) -> Container {
    let r = render_typed(values, set);
    let pod = r.statefulsets[0]
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.clone())
        .expect("pod spec");
    pod.containers[0].clone()
}
