//! Generates libmpi.so.12's translation tables and forwarders (mpi-abi's `rust_mpich`) into
//! OUT_DIR/mpich.rs, from mpi-abi/data, the functions gpumpi implements (src/abi/imp, scanned
//! as gpumpi's own build.rs does) and the functions written by hand in src/hand.rs.
use std::collections::BTreeSet;
use std::path::PathBuf;

fn main() {
    // The MPICH ABI's library name: programs and mpi4py's wheel link or dlopen libmpi.so.12.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpi.so.12");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../mpi-abi/data");
    println!("cargo:rerun-if-changed=../src/abi/imp");
    println!("cargo:rerun-if-changed=src/hand.rs");
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let imp_dir = manifest.join("../src/abi/imp");
    if let Ok(rd) = std::fs::read_dir(&imp_dir) {
        for e in rd.flatten() {
            println!("cargo:rerun-if-changed={}", e.path().display());
        }
    }
    let abi = mpi_abi::load();
    let mpich = mpi_abi::load_mpich();
    let scanned = mpi_abi::scan_implemented(&imp_dir).expect("scan src/abi/imp");
    let implemented: BTreeSet<String> = abi
        .functions
        .iter()
        .filter(|f| mpi_abi::target(&abi, &scanned, f).implemented())
        .map(|f| f.name().to_string())
        .collect();
    let hand_src = std::fs::read_to_string(manifest.join("src/hand.rs")).expect("src/hand.rs");
    let hand = mpi_abi::scan_hand_written(&abi, &hand_src);
    let code =
        mpi_abi::rust_mpich(&abi, &mpich, &implemented, &hand).unwrap_or_else(|e| panic!("{e}"));
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    std::fs::write(out.join("mpich.rs"), code).expect("write mpich.rs");
}
