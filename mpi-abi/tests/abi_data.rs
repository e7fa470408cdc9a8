//! The data is complete and consistent, and the generated headers are current and valid C/C++.

use mpi_abi::{Group, HandleValueKind};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn function_counts() {
    let abi = mpi_abi::load();
    let count = |g| abi.functions.iter().filter(|f| f.group == g).count();
    // MPI-5.0 standard ABI reference header: 613 MPI_ functions (161 of them `_c` large-count
    // variants), 51 MPI_T_ functions. gpumpi adds 24 Fortran conversions and 21 MPIX functions (4 of its own and MPICH's, 17 of
    // MPICH's MPIX streams).
    assert_eq!(count(Group::Mpi), 613);
    assert_eq!(count(Group::Tool), 51);
    assert_eq!(count(Group::Ext), 24);
    assert_eq!(count(Group::Mpix), 21);
    let large = abi
        .functions
        .iter()
        .filter(|f| f.name().ends_with("_c"))
        .count();
    assert_eq!(large, 161);
    // Every `_c` function has its int-count twin.
    for f in abi.functions.iter().filter(|f| f.name().ends_with("_c")) {
        let base = f.name().trim_end_matches("_c");
        assert!(abi.function(base).is_some(), "{} has no {base}", f.name());
    }
    assert_eq!(abi.exported_symbols().len(), 2 * (613 + 51 + 24) + 21);
    for name in [
        "MPI_Abi_get_version",
        "MPI_Abi_get_info",
        "MPI_Comm_toint",
        "MPI_Comm_fromint",
        "MPI_Wtime",
        "MPI_Wtick",
        "MPI_Aint_add",
        "MPI_Aint_diff",
        "MPI_Pcontrol",
        "MPI_T_init_thread",
        "MPI_Send_c",
    ] {
        assert!(abi.function(name).is_some(), "{name} missing");
    }
}

#[test]
fn constant_counts_and_values() {
    let abi = mpi_abi::load();
    // 255 constants of the standard header (incl. MPI_VERSION..MPI_ABI_SUBVERSION and MPI_ERR_ABI)
    // + MPIX_CUDA_AWARE_SUPPORT and the three MPIX half-precision datatype names. Values agree with MPICH 5.0.2's mpi_abi.h (checked by dumping
    // every common constant with both headers).
    assert_eq!(abi.constants().count(), 259);
    // 17 handle types of the standard ABI and MPICH's MPIX_Stream (mpi-ext.h).
    assert_eq!(abi.handles.len(), 18);
    assert_eq!(
        abi.handles.iter().map(|h| h.values.len()).sum::<usize>(),
        111
    );
    assert_eq!(abi.error_classes().count(), 1 + 62 + 18);
    let c = |n: &str| {
        abi.constants()
            .find(|c| c.name == n)
            .unwrap_or_else(|| panic!("{n}"))
            .value
    };
    assert_eq!(c("MPI_ERR_TRUNCATE"), 15);
    assert_eq!(c("MPI_ERR_ABI"), 62);
    assert_eq!(c("MPI_SEEK_SET"), 403);
    assert_eq!(c("MPI_APPNUM"), 505);
    assert_eq!(c("MPI_UNIVERSE_SIZE"), 507);
    assert_eq!(c("MPI_THREAD_MULTIPLE"), 4096);
    assert_eq!(c("MPI_UNDEFINED"), -32766);
    assert_eq!(c("MPI_ERR_LASTCODE"), 0x3fff);
    assert_eq!(c("MPI_ORDER_FORTRAN"), 15);
    let h = |n: &str| {
        abi.handles
            .iter()
            .flat_map(|h| &h.values)
            .find(|v| v.name == n)
            .unwrap_or_else(|| panic!("{n}"))
            .value
            .clone()
    };
    assert_eq!(h("MPI_COMM_WORLD"), HandleValueKind::Value(0x101));
    assert_eq!(h("MPI_INT"), HandleValueKind::Value(0x209));
    assert_eq!(h("MPI_SUM"), HandleValueKind::Value(0x21));
    assert_eq!(h("MPI_COMPLEX32"), HandleValueKind::Value(0x2eb));
    assert_eq!(
        h("MPI_LONG_LONG_INT"),
        HandleValueKind::Alias("MPI_LONG_LONG".into())
    );
}

#[test]
fn every_handle_type_has_conversions() {
    let abi = mpi_abi::load();
    // Extension handles (MPIX_Stream) have no integer form.
    for h in abi.handles.iter().filter(|h| !h.tool && !h.mpix) {
        let stem = h
            .conv_stem
            .as_ref()
            .unwrap_or_else(|| panic!("{} has no c2f stem", h.name));
        for suffix in ["c2f", "f2c", "toint", "fromint"] {
            let f = format!("MPI_{stem}_{suffix}");
            let f = abi.function(&f).unwrap_or_else(|| panic!("{f} missing"));
            assert!(!f.returns_error_code(), "{} returns a value", f.name());
        }
    }
}

#[test]
fn committed_headers_are_current() {
    let abi = mpi_abi::load();
    for (name, text) in [
        ("mpi.h", mpi_abi::c_header(&abi)),
        ("mpi-ext.h", mpi_abi::c_ext_header(&abi)),
    ] {
        let committed = std::fs::read_to_string(root().join("include").join(name)).unwrap();
        assert!(
            committed == text,
            "include/{name} is stale: run `cargo run -p mpi-abi --bin gen-headers`"
        );
    }
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mpi-abi-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn headers_compile_as_c_and_cxx_and_reference_everything() {
    assert!(
        have("gcc") && have("g++"),
        "gcc and g++ are needed for this test"
    );
    let abi = mpi_abi::load();
    let dir = tmpdir("ref");
    let src = dir.join("ref.c");
    std::fs::write(&src, mpi_abi::c_reference_test(&abi)).unwrap();
    let inc = root().join("include");
    for (cc, extra) in [
        ("gcc", vec!["-std=c11"]),
        ("g++", vec!["-x", "c++", "-std=c++11"]),
    ] {
        let out = Command::new(cc)
            .args(&extra)
            .args([
                "-Wall",
                "-Wextra",
                "-pedantic",
                "-Werror",
                "-fsyntax-only",
                "-I",
            ])
            .arg(&inc)
            .arg(&src)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{cc} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = std::fs::read_to_string(&src).unwrap();
    // One pointer per exported symbol.
    assert_eq!(text.matches("(*p_").count(), abi.exported_symbols().len());
}

#[test]
fn c_program_sees_standard_values() {
    assert!(have("gcc"), "gcc is needed for this test");
    let dir = tmpdir("values");
    let src = dir.join("values.c");
    std::fs::write(
        &src,
        r#"#include <mpi.h>
#include <mpi-ext.h>
#include <stdio.h>
#define CHECK(c) do { if (!(c)) { printf("FAIL %s\n", #c); return 1; } } while (0)
int main(void) {
    CHECK(sizeof(MPI_Status) == 32);
    CHECK((uintptr_t)MPI_COMM_WORLD == 0x101);
    CHECK((uintptr_t)MPI_INT == 0x209);
    CHECK((uintptr_t)MPI_SUM == 0x21);
    CHECK((uintptr_t)MPI_LONG_LONG_INT == 0x20b);
    CHECK(MPI_ERR_TRUNCATE == 15);
    CHECK(MPI_THREAD_MULTIPLE == 4096);
    CHECK(MPI_ANY_SOURCE == -1 && MPI_PROC_NULL == -3 && MPI_UNDEFINED == -32766);
    CHECK(MPI_VERSION == 5 && MPI_SUBVERSION == 0 && MPI_ABI_VERSION == 1 && MPI_ABI_SUBVERSION == 0);
    CHECK(MPIX_CUDA_AWARE_SUPPORT == 1);
    CHECK(sizeof(MPI_Aint) == sizeof(void *) && sizeof(MPI_Offset) == 8 && sizeof(MPI_Count) == 8);
    CHECK(sizeof(MPI_Fint) == sizeof(int));
    printf("OK\n");
    return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.join("values");
    let out = Command::new("gcc")
        .args(["-Wall", "-Werror", "-I"])
        .arg(root().join("include"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gcc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&run.stdout), "OK\n");
}
