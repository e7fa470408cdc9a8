//! Writes docs/ENV.md from the registry in src/config.rs (`cargo run --example gen-env-doc`).

fn main() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/ENV.md");
    std::fs::write(path, mpi_abi::config::env_markdown()).expect("write docs/ENV.md");
    println!("wrote {path}");
}
