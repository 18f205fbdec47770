//! `server/src/admin/envoy.fds`, the descriptor set the config-dump renderer reads,
//! regenerated from the `.proto` files that ship inside the `envoy-types` crate
//! this build uses (found with `cargo metadata --offline`: nothing is downloaded)
//! and compared with the committed file. Roots, include paths and stripping are
//! the ones `admin::render`'s module doc lists.
//!
//! On a difference it fails and says how to rewrite the file:
//! `DELTAPILOT_REGENERATE_FDS=1 cargo test -p deltapilot-server --test debug_render_fds`.
//!
//! Files are compared by name and content, not by their order in the set (the
//! renderer indexes them by name).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use prost::Message;
use prost_types::{DescriptorProto, EnumDescriptorProto, FileDescriptorSet, MessageOptions};

const FDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/admin/envoy.fds");
const REGENERATE: &str = "DELTAPILOT_REGENERATE_FDS";

/// Root files (under data-plane-api): the four resource types and each typed
/// config the generator packs into an `Any`. Their imports come along.
const ROOTS: &[&str] = &[
    "envoy/config/cluster/v3/cluster.proto",
    "envoy/config/endpoint/v3/endpoint.proto",
    "envoy/config/listener/v3/listener.proto",
    "envoy/config/route/v3/route.proto",
    "envoy/extensions/upstreams/http/v3/http_protocol_options.proto",
    "envoy/extensions/filters/http/router/v3/router.proto",
    "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.proto",
    "envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy.proto",
    "envoy/extensions/filters/http/fault/v3/fault.proto",
    "envoy/extensions/filters/http/cors/v3/cors.proto",
    "envoy/extensions/retry/host/previous_hosts/v3/previous_hosts.proto",
    "envoy/extensions/transport_sockets/tls/v3/tls.proto",
    "envoy/extensions/filters/listener/tls_inspector/v3/tls_inspector.proto",
];

/// Include paths under envoy-types' `proto/`.
const INCLUDES: &[&str] = &[
    "data-plane-api",
    "xds",
    "googleapis",
    "protoc-gen-validate",
    "opentelemetry-proto",
    "cel-spec/proto",
    "client_model",
];

/// This machine's target triple, from `rustc -vV`.
fn host_triple() -> String {
    let out = Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("run rustc -vV");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .unwrap_or_else(|| panic!("no host line in rustc -vV:\n{text}"))
        .to_string()
}

/// envoy-types' `proto/` directory, from the resolved dependency graph.
///
/// Filtered to this machine's platform: offline, unfiltered metadata wants
/// every package of the lockfile, and a fresh machine's build never
/// downloaded the Windows-only ones (`anstyle-wincon`), so it failed there.
fn envoy_types_protos() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--filter-platform",
        ])
        .arg(host_triple())
        .arg("--manifest-path")
        .arg(manifest)
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata --offline failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let pkgs = meta["packages"].as_array().expect("packages");
    let envoy = pkgs
        .iter()
        .filter(|p| p["name"] == "envoy-types")
        .collect::<Vec<_>>();
    assert_eq!(envoy.len(), 1, "exactly one envoy-types in the build");
    let manifest = Path::new(envoy[0]["manifest_path"].as_str().expect("manifest_path"));
    manifest.parent().expect("crate dir").join("proto")
}

fn strip_enum(e: &mut EnumDescriptorProto) {
    e.options = None;
    for v in &mut e.value {
        v.options = None;
    }
}

fn strip_message(m: &mut DescriptorProto) {
    let map_entry = m.options.as_ref().and_then(|o| o.map_entry);
    m.options = map_entry.map(|e| MessageOptions {
        map_entry: Some(e),
        ..Default::default()
    });
    for f in m.field.iter_mut().chain(m.extension.iter_mut()) {
        f.options = None;
    }
    for o in &mut m.oneof_decl {
        o.options = None;
    }
    for r in &mut m.extension_range {
        r.options = None;
    }
    m.nested_type.iter_mut().for_each(strip_message);
    m.enum_type.iter_mut().for_each(strip_enum);
}

fn regenerate() -> FileDescriptorSet {
    let proto = envoy_types_protos();
    let api = proto.join("data-plane-api");
    let roots: Vec<PathBuf> = ROOTS.iter().map(|f| api.join(f)).collect();
    let includes: Vec<PathBuf> = INCLUDES.iter().map(|i| proto.join(i)).collect();
    let mut set = protox::Compiler::new(includes)
        .expect("include paths")
        .include_source_info(false)
        .include_imports(true)
        .open_files(roots)
        .expect("the envoy protos compile")
        .file_descriptor_set();
    for f in &mut set.file {
        f.source_code_info = None;
        f.options = None;
        f.service.clear();
        f.message_type.iter_mut().for_each(strip_message);
        f.enum_type.iter_mut().for_each(strip_enum);
        for x in &mut f.extension {
            x.options = None;
        }
    }
    set
}

/// name → encoded file descriptor.
fn by_name(set: &FileDescriptorSet) -> BTreeMap<String, Vec<u8>> {
    set.file
        .iter()
        .map(|f| (f.name().to_owned(), f.encode_to_vec()))
        .collect()
}

#[test]
fn committed_descriptor_set_matches_the_envoy_types_protos() {
    let fresh = regenerate();
    if std::env::var_os(REGENERATE).is_some() {
        std::fs::write(FDS, fresh.encode_to_vec()).expect("write envoy.fds");
        return;
    }
    let committed = FileDescriptorSet::decode(&std::fs::read(FDS).expect("read envoy.fds")[..])
        .expect("envoy.fds decodes");
    let (want, have) = (by_name(&fresh), by_name(&committed));
    let missing: Vec<&String> = want.keys().filter(|k| !have.contains_key(*k)).collect();
    let extra: Vec<&String> = have.keys().filter(|k| !want.contains_key(*k)).collect();
    let changed: Vec<&String> = want
        .iter()
        .filter(|(k, v)| have.get(*k).is_some_and(|h| h != *v))
        .map(|(k, _)| k)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty() && changed.is_empty(),
        "server/src/admin/envoy.fds is out of date with envoy-types' protos \
         (missing {missing:?}, extra {extra:?}, changed {changed:?}); regenerate it with \
         `{REGENERATE}=1 cargo test -p deltapilot-server --test debug_render_fds` and commit it"
    );
}
