//! The built libmpi_abi.so exports every function of mpi-abi/data (MPI_X and PMPI_X), and the
//! generated Rust surface has the standard's values and types.

use mpi_abi::abi::consts::*;
use mpi_abi::abi::exports::FUNCTIONS;
use mpi_abi::abi::ffi::*;
use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Command;

/// target/<profile>/ (the test runs from target/<profile>/deps/).
fn target_profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

#[test]
fn shared_library_exports_every_function() {
    let so = target_profile_dir().join("libmpi_abi.so");
    assert!(so.exists(), "{} not built: run `cargo build --release` (or without --release) before the tests; scripts/test.sh does", so.display());
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output()
        .expect("run nm");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let exported: HashSet<&str> = text
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (_, kind, name) = (it.next()?, it.next()?, it.next()?);
            (kind == "T").then_some(name)
        })
        .collect();
    // 613 MPI + 51 MPI_T functions of the standard ABI, 24 Fortran conversions, 21 MPIX functions.
    assert_eq!(FUNCTIONS.len(), 709);
    let mut missing = Vec::new();
    for (name, _) in FUNCTIONS {
        let mut names = vec![name.to_string()];
        if !name.starts_with("MPIX_") {
            names.push(format!("P{name}"));
        }
        for n in names {
            if !exported.contains(n.as_str()) {
                missing.push(n);
            }
        }
    }
    assert!(missing.is_empty(), "not exported: {missing:?}");
    let mpi_symbols = exported
        .iter()
        .filter(|n| n.starts_with("MPI") || n.starts_with("PMPI"))
        .count();
    assert_eq!(
        mpi_symbols,
        2 * 688 + 21,
        "exactly the data's functions are exported"
    );
}

#[test]
fn shared_library_has_the_abi_soname() {
    let so = target_profile_dir().join("libmpi_abi.so");
    let out = Command::new("readelf")
        .arg("-d")
        .arg(&so)
        .output()
        .expect("run readelf");
    assert!(String::from_utf8_lossy(&out.stdout).contains("[libmpi_abi.so.1]"));
}

#[test]
fn rust_constants_have_standard_values_and_types() {
    let world: MPI_Comm = MPI_COMM_WORLD;
    assert_eq!(world as usize, 0x101);
    let int: MPI_Datatype = MPI_INT;
    assert_eq!(int as usize, 0x209);
    assert_eq!(MPI_SUM as usize, 0x21);
    assert_eq!(MPI_LONG_LONG_INT, MPI_LONG_LONG);
    assert_eq!(MPI_IN_PLACE as usize, 1);
    assert_eq!(MPI_DISPLACEMENT_CURRENT, -1 as MPI_Offset);
    assert_eq!(MPI_COMM_DUP_FN, 1);
    assert_eq!(MPI_ERR_TRUNCATE, 15);
    assert_eq!(MPI_THREAD_MULTIPLE, 4096);
    assert_eq!(std::mem::size_of::<MPI_Status>(), 32);
    assert_eq!(
        std::mem::size_of::<MPI_Aint>(),
        std::mem::size_of::<usize>()
    );
    assert_eq!(error_class_name(MPI_ERR_TRUNCATE), Some("MPI_ERR_TRUNCATE"));
    assert_eq!(
        error_class_name(MPI_T_ERR_PVAR_NO_ATOMIC),
        Some("MPI_T_ERR_PVAR_NO_ATOMIC")
    );
    assert_eq!(error_class_name(MPI_ERR_LASTCODE), None);
    assert_eq!(error_class_name(62), Some("MPI_ERR_ABI"));
    assert_eq!(error_class_name(63), None);
}
