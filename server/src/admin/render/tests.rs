//! The renderer against resources the real generator builds: every field known,
//! the proto3 JSON forms Envoy prints, and damage reported instead of dropped.

use deltapilot_model::state::ModelState;
use deltapilot_proto::{self as pb, Event, SCHEMA_VERSION, event::Payload};
use deltapilot_xds::generate::{GenOptions, build_all};

use super::*;

fn event(payload: Payload) -> Event {
    Event {
        schema_version: SCHEMA_VERSION,
        source: "t".into(),
        payload: Some(payload),
        ..Default::default()
    }
}

fn model() -> ModelState {
    let svc = |host: &str, ports: Vec<(u32, pb::Protocol)>, resolution: pb::Resolution| {
        event(Payload::ServiceUpsert(pb::ServiceUpsert {
            service: Some(pb::Service {
                hostname: host.into(),
                namespace: "ns".into(),
                ports: ports
                    .into_iter()
                    .map(|(n, p)| pb::Port {
                        name: format!("p{n}"),
                        number: n,
                        protocol: p as i32,
                    })
                    .collect(),
                labels: Default::default(),
                resolution: resolution as i32,
            }),
        }))
    };
    let ep = event(Payload::EndpointUpsert(pb::EndpointUpsert {
        key: "ep/1".into(),
        endpoint: Some(pb::Endpoint {
            address: "10.1.2.3".into(),
            weight: 3,
            locality: Some(pb::Locality {
                region: "r".into(),
                zone: "z".into(),
                subzone: String::new(),
            }),
            services: vec![pb::ServiceRef {
                namespace: "ns".into(),
                hostname: "web.ns.svc".into(),
            }],
            ..Default::default()
        }),
    }));
    ModelState::from_events(&[
        svc(
            "web.ns.svc",
            vec![(80, pb::Protocol::Http), (9090, pb::Protocol::Grpc)],
            pb::Resolution::StaticEndpoints,
        ),
        svc(
            "db.ns.svc",
            vec![(5432, pb::Protocol::Tcp)],
            pb::Resolution::StaticEndpoints,
        ),
        svc(
            "ext.example.com",
            vec![(443, pb::Protocol::Tls)],
            pb::Resolution::Dns,
        ),
        ep,
    ])
}

fn has_unknown(j: &Json) -> Option<String> {
    match j {
        Json::Obj(fields) => fields.iter().find_map(|(k, v)| {
            if k.starts_with('[') || k == "unrenderable" {
                Some(k.clone())
            } else {
                has_unknown(v)
            }
        }),
        Json::Arr(items) => items.iter().find_map(has_unknown),
        _ => None,
    }
}

/// The renderer falls back to an empty pool rather than failing; this says
/// when the embedded set itself is the problem.
#[test]
fn the_descriptor_set_decodes_and_has_every_resource_type() {
    let pool = DescriptorPool::decode(DESCRIPTORS).expect("envoy.fds decodes");
    for t in [
        ResourceType::Cluster,
        ResourceType::Endpoint,
        ResourceType::Listener,
        ResourceType::Route,
    ] {
        assert!(pool.get_message_by_name(message_name(t)).is_some(), "{t:?}");
    }
}

#[test]
fn every_generated_resource_renders_with_known_fields_only() {
    let (set, errors) = build_all(&model(), &GenOptions::default());
    assert!(errors.is_empty(), "{errors:?}");
    let r = renderer();
    let mut n = 0;
    for (t, map) in [
        (ResourceType::Cluster, &set.clusters),
        (ResourceType::Endpoint, &set.endpoints),
        (ResourceType::Listener, &set.sidecar_listeners),
        (ResourceType::Listener, &set.grpc_listeners),
        (ResourceType::Route, &set.routes),
    ] {
        for (name, res) in map.iter() {
            let j = r.resource(t, &res.bytes);
            let key = if t == ResourceType::Endpoint {
                "cluster_name"
            } else {
                "name"
            };
            assert_eq!(
                j.get(key),
                Some(&Json::Str(name.to_string())),
                "{}",
                j.to_pretty()
            );
            assert_eq!(has_unknown(&j), None, "{name}: {}", j.to_pretty());
            n += 1;
        }
    }
    assert!(n >= 10, "rendered {n} resources");
}

#[test]
fn proto3_json_forms_match_envoys() {
    let (set, _) = build_all(&model(), &GenOptions::default());
    let r = renderer();
    let c = set
        .clusters
        .get("outbound|80||web.ns.svc")
        .expect("cluster");
    let j = r.resource(ResourceType::Cluster, &c.bytes);
    let text = serde_json::to_string(&j).expect("json");
    assert!(
        text.starts_with(
            r#"{"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"#
        ),
        "{text}"
    );
    assert_eq!(
        j.get("type"),
        Some(&Json::from("EDS")),
        "enum by name: {text}"
    );
    assert_eq!(
        j.get("connect_timeout"),
        Some(&Json::from("5s")),
        "duration: {text}"
    );
    let e = set.endpoints.get("outbound|80||web.ns.svc").expect("cla");
    let text = serde_json::to_string(&r.resource(ResourceType::Endpoint, &e.bytes)).expect("json");
    assert!(text.contains(r#""address":"10.1.2.3""#), "{text}");
    assert!(
        text.contains(r#""load_balancing_weight":3"#),
        "wrapper as bare value: {text}"
    );
    let l = set.sidecar_listeners.values().next().expect("listener");
    let text = serde_json::to_string(&r.resource(ResourceType::Listener, &l.bytes)).expect("json");
    assert!(
        text.contains(r#""@type":"type.googleapis.com/envoy.extensions.filters.network."#),
        "Any expanded: {text}"
    );
}

#[test]
fn garbage_and_unknown_fields_are_shown_not_dropped() {
    let r = renderer();
    let j = r.resource(ResourceType::Cluster, &[0x0a, 0x09, b'x']);
    assert!(
        j.get("unrenderable").is_some() && j.get("bytes").is_some(),
        "{}",
        j.to_pretty()
    );
    // Field 1 (name) plus an unknown field 9999 (varint 7).
    let mut bytes = vec![0x0a, 0x01, b'c'];
    bytes.extend_from_slice(&[0xf8, 0xf0, 0x04, 0x07]);
    let j = r.resource(ResourceType::Cluster, &bytes);
    assert_eq!(j.get("name"), Some(&Json::from("c")));
    assert_eq!(j.get("[9999]"), Some(&Json::from("7")), "{}", j.to_pretty());
}

/// The config dump lists a section's resources by name, whatever order the
/// resource maps iterate in (they iterate in name-hash order).
#[test]
fn config_dump_lists_resources_by_name() {
    use deltapilot_model::ProxyType;
    use deltapilot_xds::{Resource, ResourceSet};
    use std::sync::Arc;

    let mut set = ResourceSet::default();
    let names: Vec<String> = (0..40).map(|i| format!("0.0.0.0_{}", 1000 + i)).collect();
    for n in &names {
        // An empty `Listener` message: the dump names listeners itself.
        let r = Resource::new(Arc::from(n.as_str()), bytes::Bytes::new());
        set.sidecar_listeners.insert(Arc::new(r));
    }
    let in_map: Vec<&str> = set.sidecar_listeners.keys().map(|k| &**k).collect();
    assert_ne!(in_map, names, "the map is not in name order to begin with");
    let dump = crate::admin::dump::config_dump(
        |t| deltapilot_xds::view::resources_for(&set, ProxyType::Sidecar, t),
        &[ResourceType::Listener],
        &|_, _| true,
    );
    let v = serde_json::to_value(&dump).expect("json");
    let listed: Vec<&str> = v["configs"][0]["dynamic_listeners"]
        .as_array()
        .expect("listeners")
        .iter()
        .map(|l| l["name"].as_str().expect("name"))
        .collect();
    assert_eq!(listed, names);
}

mod envoy_forms {
    //! Hand-built messages for the forms the generated resources do not all
    //! exercise: field order, maps, well-known types inside `Any`, an `Any` of a
    //! type the descriptors do not know.

    use envoy_types::pb::envoy::config::cluster::v3::{Cluster, cluster::TransportSocketMatch};
    use envoy_types::pb::envoy::config::core::v3::Metadata;
    use envoy_types::pb::google::protobuf::{Any, Duration, Struct, Timestamp, Value, value};
    use prost::Message;

    use super::*;

    fn text(c: &Cluster) -> String {
        serde_json::to_string(&renderer().resource(ResourceType::Cluster, &c.encode_to_vec()))
            .expect("json")
    }

    fn string(s: &str) -> Value {
        Value {
            kind: Some(value::Kind::StringValue(s.into())),
        }
    }

    /// protobuf's C++ JSON printer (Envoy's `/config_dump`) sorts the fields it
    /// writes by number; `Cluster` declares `transport_socket_matches` (43)
    /// before `name` (1).
    #[test]
    fn fields_come_in_field_number_order() {
        let c = Cluster {
            transport_socket_matches: vec![TransportSocketMatch {
                name: "m".into(),
                ..Default::default()
            }],
            name: "c".into(),
            connect_timeout: Some(Duration {
                seconds: 0,
                nanos: 250_000_000,
            }),
            ..Default::default()
        };
        let t = text(&c);
        let at = |k: &str| t.find(k).unwrap_or_else(|| panic!("{k} in {t}"));
        assert!(at(r#""name":"c""#) < at(r#""connect_timeout""#), "{t}");
        assert!(
            at(r#""connect_timeout""#) < at("transport_socket_matches"),
            "{t}"
        );
        assert!(t.contains(r#""connect_timeout":"0.250s""#), "{t}");
    }

    /// Maps and `Struct`s come out in key order, the same text on every run
    /// (prost-reflect holds them in hash maps).
    #[test]
    fn maps_and_structs_are_in_key_order() {
        let fields = || {
            ["zeta", "alpha", "mid"]
                .into_iter()
                .map(|k| (k.to_string(), string(k)))
                .collect()
        };
        let meta = ["z.filter", "a.filter", "m.filter"]
            .into_iter()
            .map(|k| (k.to_string(), Struct { fields: fields() }))
            .collect();
        let c = Cluster {
            name: "c".into(),
            metadata: Some(Metadata {
                filter_metadata: meta,
                ..Default::default()
            }),
            ..Default::default()
        };
        let t = text(&c);
        let at = |k: &str| t.find(k).unwrap_or_else(|| panic!("{k} in {t}"));
        assert!(
            at("a.filter") < at("m.filter") && at("m.filter") < at("z.filter"),
            "{t}"
        );
        assert!(at("alpha") < at("mid") && at("mid") < at("zeta"), "{t}");
        for _ in 0..3 {
            assert_eq!(text(&c), t, "the same text every time");
        }
    }

    /// A well-known type packed in an `Any` is under `value`, in its JSON
    /// form; an `Any` of a type the descriptors lack shows its bytes.
    #[test]
    fn any_of_a_well_known_or_an_unknown_type() {
        let ts = Timestamp {
            seconds: 1_700_000_000,
            nanos: 5_000_000,
        };
        let c = Cluster {
            name: "c".into(),
            typed_extension_protocol_options: [
                (
                    "a.time".to_string(),
                    Any {
                        type_url: "type.googleapis.com/google.protobuf.Timestamp".into(),
                        value: ts.encode_to_vec(),
                    },
                ),
                (
                    "b.unknown".to_string(),
                    Any {
                        type_url: "type.googleapis.com/example.NotInTheSet".into(),
                        value: b"foo".to_vec(),
                    },
                ),
            ]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        let t = text(&c);
        assert!(
            t.contains(
                r#""a.time":{"@type":"type.googleapis.com/google.protobuf.Timestamp","value":"2023-11-14T22:13:20.005Z"}"#
            ),
            "{t}"
        );
        assert!(
            t.contains(
                r#""b.unknown":{"@type":"type.googleapis.com/example.NotInTheSet","value":"Zm9v"}"#
            ),
            "{t}"
        );
    }
}

#[test]
fn gateway_listeners_and_routes_render_with_known_fields_only() {
    use deltapilot_model::state::mk::{rule, svc};
    use deltapilot_proto::ConfigKind;
    let m = ModelState::from_events(&[
        svc("k", 0, "web", "a.web.svc.cluster.local", &[80]),
        rule(
            "k",
            0,
            ConfigKind::Gateway,
            "edge",
            "gw",
            r#"{"servers":[
              {"port":{"number":80,"protocol":"HTTP"},"hosts":["*"],"tls":{"httpsRedirect":true}},
              {"port":{"number":443,"name":"https","protocol":"HTTPS"},"hosts":["a.example.com"],
               "tls":{"mode":"MUTUAL","credentialName":"c"}},
              {"port":{"number":443,"protocol":"TLS"},"hosts":["p.example.com"],"tls":{"mode":"PASSTHROUGH"}}
            ]}"#,
        ),
        rule(
            "k",
            0,
            ConfigKind::VirtualService,
            "web",
            "vs",
            r#"{"hosts":["*.example.com"],"gateways":["edge/gw"],
                "http":[{"route":[{"destination":{"host":"a"}}]}],
                "tls":[{"match":[{"sniHosts":["p.example.com"]}],"route":[{"destination":{"host":"a"}}]}]}"#,
        ),
    ]);
    let gw = deltapilot_xds::generate::gateway_resources(
        &m,
        &[std::sync::Arc::from("edge/gw")],
        &GenOptions::default(),
    );
    assert!(gw.problems.is_empty(), "{:?}", gw.problems);
    let r = renderer();
    let mut n = 0;
    for (t, map) in [
        (ResourceType::Listener, &gw.listeners),
        (ResourceType::Route, &gw.routes),
    ] {
        for (name, res) in map.iter() {
            let j = r.resource(t, &res.bytes);
            assert_eq!(has_unknown(&j), None, "{name}: {}", j.to_pretty());
            n += 1;
        }
    }
    assert_eq!(n, 4, "two listeners, http.80 and the HTTPS route");
}
