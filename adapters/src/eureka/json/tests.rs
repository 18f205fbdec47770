use super::*;

/// An instance in the shape Eureka's Jackson codec writes.
const ORDERS_1: &str = r#"{
    "instanceId": "orders-1:8080", "hostName": "orders-1.internal", "app": "ORDERS",
    "ipAddr": "10.0.0.11", "status": "UP", "overriddenStatus": "UNKNOWN",
    "port": {"$": 8080, "@enabled": "true"}, "securePort": {"$": 8443, "@enabled": "true"},
    "countryId": 1,
    "dataCenterInfo": {"@class": "com.netflix.appinfo.AmazonInfo", "name": "Amazon",
        "metadata": {"availability-zone": "eu-west-1b", "instance-id": "i-0abc"}},
    "leaseInfo": {"renewalIntervalInSecs": 30, "durationInSecs": 90},
    "metadata": {"version": "v2", "weight": 3, "canary": true, "@class": "java.util.HashMap"},
    "vipAddress": "Orders.Example", "secureVipAddress": "orders.example",
    "isCoordinatingDiscoveryServer": "false",
    "lastUpdatedTimestamp": "1700000000000", "lastDirtyTimestamp": "1700000000000",
    "actionType": "ADDED"
}"#;

fn body(applications: &str) -> Vec<u8> {
    format!(
        r#"{{"applications":{{"versions__delta":"1","apps__hashcode":"UP_1_",{applications}}}}}"#
    )
    .into_bytes()
}

fn only(doc: &Applications) -> &Instance {
    assert_eq!(doc.entries.len(), 1, "{doc:#?}");
    doc.entries[0].instance.as_ref().expect("valid instance")
}

#[test]
fn a_full_instance_maps_every_field() {
    let doc = parse(&body(&format!(
        r#""application":[{{"name":"ORDERS","instance":[{ORDERS_1}]}}]"#
    )))
    .expect("parse");
    assert_eq!(doc.hashcode.as_deref(), Some("UP_1_"));
    let e = &doc.entries[0];
    assert_eq!((e.status, e.action.as_deref()), ("UP", Some("ADDED")));
    let i = only(&doc);
    assert_eq!(
        (i.app.as_str(), i.id.as_str(), i.address.as_str()),
        ("ORDERS", "orders-1:8080", "10.0.0.11")
    );
    assert_eq!(i.vips, ["orders.example"]);
    assert_eq!((i.http_port, i.https_port), (Some(8080), Some(8443)));
    assert_eq!(i.health, pb::Health::Healthy);
    let labels: Vec<(&str, &str)> = i
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        labels,
        [("canary", "true"), ("version", "v2"), ("weight", "3")]
    );
    let loc = i.locality.as_ref().expect("locality");
    assert_eq!(
        (loc.region.as_str(), loc.zone.as_str()),
        ("eu-west-1", "eu-west-1b")
    );
}

#[test]
fn lists_of_one_are_bare_objects_and_numbers_may_be_strings() {
    let inst = r#"{"hostName": "10.1.2.3", "app": "PAY", "ipAddr": "10.1.2.3", "status": "starting",
        "port": {"@enabled": "true", "$": "9000"}, "securePort": {"@enabled": "false", "$": "443"},
        "metadata": {"@class": "java.util.Collections$EmptyMap"},
        "dataCenterInfo": {"@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", "name": "MyOwn"}}"#;
    let doc = parse(&body(&format!(
        r#""application":{{"name":"PAY","instance":{inst}}}"#
    )))
    .expect("parse");
    let i = only(&doc);
    assert_eq!(i.id, "10.1.2.3", "no instanceId: the hostName is the id");
    assert_eq!(i.vips, ["pay"], "no vipAddress: the app name, lower-cased");
    assert_eq!((i.http_port, i.https_port), (Some(9000), None));
    assert_eq!(i.health, pb::Health::NotReady);
    assert!(i.labels.is_empty(), "{:?}", i.labels);
    assert_eq!(i.locality, None);
    assert_eq!(doc.entries[0].status, "STARTING");
}

#[test]
fn empty_registries_in_every_spelling() {
    for apps in [r#""application":[]"#, r#""application":null"#, r#""x":1"#] {
        let doc = parse(&body(apps)).expect(apps);
        assert!(
            doc.entries.is_empty() && doc.app_problems.is_empty(),
            "{apps}"
        );
    }
    let doc = parse(&body(r#""application":[{"name":"EMPTY"}]"#)).expect("app without instances");
    assert!(doc.entries.is_empty());
}

#[test]
fn statuses_map_to_health_and_to_eurekas_hashcode_names() {
    for (status, health, counted) in [
        ("UP", pb::Health::Healthy, "UP"),
        ("DOWN", pb::Health::Unhealthy, "DOWN"),
        ("STARTING", pb::Health::NotReady, "STARTING"),
        ("OUT_OF_SERVICE", pb::Health::Draining, "OUT_OF_SERVICE"),
        ("UNKNOWN", pb::Health::NotReady, "UNKNOWN"),
        ("SLEEPY", pb::Health::NotReady, "UNKNOWN"),
    ] {
        let inst =
            format!(r#"{{"instanceId":"a","app":"A","ipAddr":"10.0.0.1","status":"{status}"}}"#);
        let doc = parse(&body(&format!(
            r#""application":{{"name":"A","instance":{inst}}}"#
        )))
        .expect("parse");
        assert_eq!(only(&doc).health, health, "{status}");
        assert_eq!(doc.entries[0].status, counted, "{status}");
    }
}

#[test]
fn malformed_instances_are_reported_one_by_one() {
    let cases = [
        (
            r#"{"instanceId":"a","app":"A","ipAddr":"ten.0.0.1"}"#,
            "ipAddr",
        ),
        (
            r#"{"instanceId":"a","app":"A","ipAddr":"10.0.0.1","port":{"$":70000,"@enabled":"true"}}"#,
            "port",
        ),
        (
            r#"{"instanceId":"a","app":"A","ipAddr":"10.0.0.1","port":{"$":"x","@enabled":"true"}}"#,
            "port",
        ),
        (
            r#"{"instanceId":"a","app":"A","ipAddr":"10.0.0.1","securePort":{"$":1,"@enabled":"maybe"}}"#,
            "@enabled",
        ),
        (
            r#"{"instanceId":"a","app":"A","ipAddr":"10.0.0.1","vipAddress":"orders:8080"}"#,
            "vipAddress",
        ),
        (r#"{"app":"A","ipAddr":"10.0.0.1"}"#, "instanceId"),
        (r#""just a string""#, "not an object"),
    ];
    for (inst, why) in cases {
        let good = r#"{"instanceId":"ok","app":"A","ipAddr":"10.0.0.9"}"#;
        let doc = parse(&body(&format!(
            r#""application":{{"name":"A","instance":[{inst},{good}]}}"#
        )))
        .unwrap_or_else(|e| panic!("{inst}: {e:?}"));
        assert_eq!(doc.entries.len(), 2);
        let err = doc.entries[0].instance.as_ref().expect_err(inst);
        assert!(err.contains(why), "{inst}: {err}");
        assert!(
            doc.entries[1].instance.is_ok(),
            "the next instance is unaffected"
        );
    }
    let disabled =
        r#"{"instanceId":"a","app":"A","ipAddr":"10.0.0.1","port":{"$":0,"@enabled":"false"}}"#;
    let doc = parse(&body(&format!(
        r#""application":{{"name":"A","instance":{disabled}}}"#
    )))
    .expect("parse");
    assert_eq!(
        only(&doc).http_port,
        None,
        "a disabled port is not validated"
    );
}

#[test]
fn bad_documents_are_errors_with_a_kind() {
    let (kind, msg) = parse(b"<applications/>").expect_err("xml");
    assert_eq!(kind, FetchErrorKind::InvalidJson);
    assert!(msg.contains("line 1"), "{msg}");
    let (kind, msg) = parse(br#"{"apps": []}"#).expect_err("shape");
    assert_eq!(kind, FetchErrorKind::InvalidShape);
    assert!(msg.contains("\"applications\""), "{msg}");
    let (kind, _) = parse(&body(r#""application":"ORDERS""#)).expect_err("scalar list");
    assert_eq!(kind, FetchErrorKind::InvalidShape);
    let doc =
        parse(&body(r#""application":[7,{"name":"B","instance":"x"}]"#)).expect("per-app problems");
    assert_eq!(doc.app_problems.len(), 2, "{:?}", doc.app_problems);
}
