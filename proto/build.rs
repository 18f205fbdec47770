//! Compiles `proto/deltapilot/events/v1/*.proto` with protox (a pure-Rust protobuf
//! compiler), so building needs no system `protoc`. prost generates the message
//! types and pbjson generates their canonical proto3-JSON serde impls, which is the
//! human JSON-lines format of the `deltapilot log` commands.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/deltapilot/events/v1/events.proto"];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptor_path = out.join("deltapilot_descriptor.bin");
    std::fs::write(&descriptor_path, prost::Message::encode_to_vec(&fds))?;

    let mut config = prost_build::Config::new();
    config.file_descriptor_set_path(&descriptor_path);
    // BTreeMap keeps map fields (labels, ports) in key order, so equal events encode
    // to identical bytes and the engine's content hashes are deterministic.
    config.btree_map(["."]);
    config.compile_fds(fds)?;

    let descriptors = std::fs::read(&descriptor_path)?;
    pbjson_build::Builder::new()
        .register_descriptors(&descriptors)?
        .btree_map(["."])
        .build(&[".deltapilot"])?;
    Ok(())
}
