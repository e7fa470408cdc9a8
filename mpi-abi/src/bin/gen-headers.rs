//! Writes `include/mpi.h` and `include/mpi-ext.h` from mpi-abi/data.
//! `gen-headers --check` exits non-zero if the committed headers are stale.

use std::path::PathBuf;

fn main() {
    let check = std::env::args().any(|a| a == "--check");
    let abi = mpi_abi::load();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../include");
    let mut stale = false;
    for (name, text) in [
        ("mpi.h", mpi_abi::c_header(&abi)),
        ("mpi-ext.h", mpi_abi::c_ext_header(&abi)),
    ] {
        let path = dir.join(name);
        if check {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                eprintln!("{} is stale", path.display());
                stale = true;
            }
        } else {
            std::fs::create_dir_all(&dir).expect("create include/");
            std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
            println!("wrote {}", path.display());
        }
    }
    if stale {
        std::process::exit(1);
    }
}
