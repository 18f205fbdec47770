//! The config dumps against a real Envoy (`DELTAPILOT_ENVOY`, from
//! `scripts/install-test-deps.sh`) fed by `deltapilot run` over delta ADS: the
//! clusters, listeners and route configurations of Envoy's own `/config_dump`
//! equal, field for field and version for version, what `deltapilot
//! proxy-config` and `deltapilot replay --dump` print; its assignments name the
//! same endpoints (Envoy's EDS section is its processed view: it adds defaults
//! such as `policy.overprovisioning_factor` and resolved DNS clusters). And
//! `proxy-status` shows the real Envoy SYNCED on every type.

mod replay_support;
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

fn section<'a>(dump: &'a Value, t: &str) -> &'a Value {
    dump["configs"]
        .as_array()
        .and_then(|c| {
            c.iter()
                .find(|s| s["@type"] == format!("type.googleapis.com/envoy.admin.v3.{t}"))
        })
        .unwrap_or(&Value::Null)
}

/// name → (version, resource) of one section.
fn by_name(
    dump: &Value,
    t: &str,
    list: &str,
    wrap: &[&str],
    name: &str,
) -> BTreeMap<String, (Value, Value)> {
    let mut out = BTreeMap::new();
    for item in section(dump, t)[list].as_array().into_iter().flatten() {
        let mut node = item;
        for w in &wrap[..wrap.len() - 1] {
            node = &node[*w];
        }
        let res = &node[wrap[wrap.len() - 1]];
        out.insert(
            res[name].as_str().unwrap_or_default().to_owned(),
            (node["version_info"].clone(), res.clone()),
        );
    }
    out
}

#[test]
fn our_dumps_equal_a_real_envoys_config_dump() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    replay_support::example_log(d);
    let server = replay_support::Server::start(d, &[]);
    let envoy = support::Envoy::start(d, "envoy-delta.yaml", server.xds);
    let admin = format!("127.0.0.1:{}", server.admin);

    let status = replay_support::wait_for(
        "Envoy SYNCED on every type",
        Duration::from_secs(30),
        || {
            let o = replay_support::dp(d, &["proxy-status", "--admin-addr", &admin]);
            let row = o
                .stdout
                .lines()
                .find(|l| l.starts_with("demo-envoy-delta"))
                .map(str::to_owned);
            match row {
                Some(r) if r.split_whitespace().skip(4).take(4).all(|s| s == "SYNCED") => Ok(r),
                other => Err(format!("{other:?}\n{}", o.stdout)),
            }
        },
    );
    assert!(
        status.contains("sidecar") && status.contains("delta"),
        "{status}"
    );

    let (code, body) =
        replay_support::get(envoy.admin_port, "/config_dump?include_eds").expect("envoy admin");
    assert_eq!(code, 200, "{body}");
    let theirs: Value = serde_json::from_str(&body).expect("envoy json");
    let live = replay_support::dp(
        d,
        &["proxy-config", "demo-envoy-delta", "--admin-addr", &admin],
    );
    assert!(live.ok(), "{live:?}");
    let live: Value = serde_json::from_str(&live.stdout).expect("json");
    let bootstrap = d.join("envoy-delta.yaml");
    let replayed = replay_support::dp(
        d,
        &[
            "replay",
            "--log",
            "file://data/log",
            "--dump",
            "--proxy",
            bootstrap.to_str().expect("utf8"),
        ],
    );
    assert!(replayed.ok(), "{replayed:?}");
    let replayed: Value = serde_json::from_str(&replayed.stdout).expect("json");

    for (t, list, wrap) in [
        (
            "ClustersConfigDump",
            "dynamic_active_clusters",
            &["cluster"][..],
        ),
        (
            "ListenersConfigDump",
            "dynamic_listeners",
            &["active_state", "listener"][..],
        ),
        (
            "RoutesConfigDump",
            "dynamic_route_configs",
            &["route_config"][..],
        ),
    ] {
        let envoys = by_name(&theirs, t, list, wrap, "name");
        assert!(!envoys.is_empty(), "Envoy has {t}");
        let ours = by_name(&live, t, list, wrap, "name");
        assert_eq!(ours, envoys, "{t}: proxy-config equals Envoy's config_dump");
        let from_log = by_name(&replayed, t, list, wrap, "name");
        for (name, v) in &envoys {
            assert_eq!(
                from_log.get(name),
                Some(v),
                "{t} {name}: replay --dump equals Envoy's"
            );
        }
    }
    // Assignments: the same endpoints per cluster.
    let addresses = |v: &Value| -> Vec<String> {
        let mut a: Vec<String> = v["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|l| l["lb_endpoints"].as_array().into_iter().flatten())
            .map(|e| e["endpoint"]["address"]["socket_address"].to_string())
            .collect();
        a.sort();
        a
    };
    let envoys = by_name(
        &theirs,
        "EndpointsConfigDump",
        "dynamic_endpoint_configs",
        &["endpoint_config"],
        "cluster_name",
    );
    let ours = by_name(
        &live,
        "EndpointsConfigDump",
        "dynamic_endpoint_configs",
        &["endpoint_config"],
        "cluster_name",
    );
    assert!(!ours.is_empty());
    for (name, (_, cla)) in &ours {
        let theirs = &envoys
            .get(name)
            .unwrap_or_else(|| panic!("Envoy has no assignment {name}"))
            .1;
        assert_eq!(addresses(cla), addresses(theirs), "{name}");
    }
    assert!(
        envoy.rejected_updates().is_empty(),
        "{:?}",
        envoy.rejected_updates()
    );
}
