//! Generates the Rust surface of the MPI ABI from mpi-abi/data into OUT_DIR:
//! `consts.rs` (constants, predefined handles, error_class_name), `ffi.rs` (C types) and
//! `wrappers.rs` (every exported MPI_X / PMPI_X; implemented ones are the `pub unsafe fn MPI_X(`
//! found in src/abi/imp/*.rs).
use std::path::PathBuf;

fn main() {
    // The installed library is libmpi_abi.so.1 (soname), with a libmpi_abi.so link.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpi_abi.so.1");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=mpi-abi/data");
    println!("cargo:rerun-if-changed=src/abi/imp");

    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let imp_dir = manifest.join("src/abi/imp");
    if let Ok(rd) = std::fs::read_dir(&imp_dir) {
        for e in rd.flatten() {
            println!("cargo:rerun-if-changed={}", e.path().display());
        }
    }

    let abi = mpi_abi::load();
    let mut implemented = mpi_abi::scan_implemented(&imp_dir).expect("scan src/abi/imp");
    // Macro arguments are candidates only: keep those that are ABI functions.
    implemented.retain(|n| abi.function(n).is_some() || scanned_fn(&imp_dir, n));
    for name in &implemented {
        if abi.function(name).is_none() {
            println!(
                "cargo:warning=src/abi/imp defines {name}, which is not a function of mpi-abi/data"
            );
        }
    }
    let write = |name: &str, text: String| {
        std::fs::write(out.join(name), text).unwrap_or_else(|e| panic!("write {name}: {e}"));
    };
    write("consts.rs", mpi_abi::rust_consts(&abi));
    write("ffi.rs", mpi_abi::rust_ffi(&abi));
    write("wrappers.rs", mpi_abi::rust_wrappers(&abi, &implemented));
}

/// Whether `name` is defined literally as `pub unsafe fn name(` in src/abi/imp.
fn scanned_fn(imp_dir: &std::path::Path, name: &str) -> bool {
    std::fs::read_dir(imp_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .any(|t| mpi_abi::scan_source(&t).iter().any(|n| n == name))
}
