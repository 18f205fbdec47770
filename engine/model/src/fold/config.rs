//! Validated conversion of a config-object payload to [`Config`], next to the
//! model's own converters for services and endpoints.
//!
//! What it does NOT do: interpret the Istio spec. It only checks that the object is
//! addressable (kind, namespace, name) and that the spec is a JSON object; the xDS
//! generator parses the kinds it implements.

use std::sync::Arc;

use deltapilot_proto as pb;

use crate::model::{Config, ConvertError};

/// Converts and validates a config object.
pub(crate) fn config_from_proto(c: &pb::ConfigObject) -> Result<Config, ConvertError> {
    let kind = c.kind();
    if kind == pb::ConfigKind::Unspecified {
        return Err(ConvertError(format!(
            "config {}/{}: kind is unspecified (or newer than this build)",
            c.namespace, c.name
        )));
    }
    if c.namespace.is_empty() || c.name.is_empty() {
        return Err(ConvertError(format!(
            "config of kind {}: namespace {:?} and name {:?} must both be set",
            pb::kind_slug(kind),
            c.namespace,
            c.name
        )));
    }
    let key = pb::config_key(kind, &c.namespace, &c.name);
    match serde_json::from_str::<serde_json::Value>(&c.spec_json) {
        Ok(v) if v.is_object() => {}
        Ok(_) => {
            return Err(ConvertError(format!(
                "config {key}: spec_json is not a JSON object"
            )));
        }
        Err(e) => {
            return Err(ConvertError(format!(
                "config {key}: spec_json is not JSON: {e}"
            )));
        }
    }
    let arc_map = |m: &std::collections::BTreeMap<String, String>| {
        m.iter()
            .map(|(k, v)| (Arc::from(k.as_str()), Arc::from(v.as_str())))
            .collect()
    };
    Ok(Config {
        key: Arc::from(key.as_str()),
        kind,
        namespace: Arc::from(c.namespace.as_str()),
        name: Arc::from(c.name.as_str()),
        labels: arc_map(&c.labels),
        annotations: arc_map(&c.annotations),
        spec_json: Arc::from(c.spec_json.as_str()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(spec: &str) -> pb::ConfigObject {
        pb::ConfigObject {
            kind: pb::ConfigKind::VirtualService as i32,
            namespace: "shop".into(),
            name: "reviews".into(),
            spec_json: spec.into(),
            ..Default::default()
        }
    }

    #[test]
    fn valid_object_gets_its_canonical_key() {
        let c = config_from_proto(&obj(r#"{"hosts":["reviews"]}"#)).expect("valid");
        assert_eq!(&*c.key, "cfg/virtual_service/shop/reviews");
    }

    #[test]
    fn unaddressable_or_non_object_spec_is_rejected() {
        assert!(config_from_proto(&obj("[1]")).is_err());
        assert!(config_from_proto(&obj("")).is_err());
        let mut no_kind = obj("{}");
        no_kind.kind = 0;
        assert!(
            config_from_proto(&no_kind)
                .expect_err("kind")
                .0
                .contains("unspecified")
        );
        let mut no_name = obj("{}");
        no_name.name.clear();
        assert!(config_from_proto(&no_name).is_err());
    }
}
