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

    build_kernels(&manifest, &out);
}

/// Compile kernels/*.cu with nvcc into OUT_DIR/kernels.fatbin (sm_80, sm_90 and compute_90 PTX)
/// and set `cfg(gpumpi_kernels)`. Without nvcc the library builds without kernels (a warning;
/// device reductions are then staged to the host).
fn build_kernels(manifest: &std::path::Path, out: &std::path::Path) {
    println!("cargo::rustc-check-cfg=cfg(gpumpi_kernels)");
    println!("cargo:rerun-if-changed=kernels");
    for v in ["NVCC", "CUDA_HOME", "CUDA_PATH", "GPUMPI_NO_KERNELS"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    if std::env::var_os("GPUMPI_NO_KERNELS").is_some() {
        println!("cargo:warning=GPUMPI_NO_KERNELS set: building without CUDA kernels");
        return;
    }
    let mut sources: Vec<PathBuf> = std::fs::read_dir(manifest.join("kernels"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "cu"))
        .collect();
    sources.sort();
    if sources.is_empty() {
        return;
    }
    let env_path = |v: &str| std::env::var_os(v).map(PathBuf::from);
    let mut candidates: Vec<PathBuf> = Vec::new();
    candidates.extend(env_path("NVCC"));
    for home in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(h) = env_path(home) {
            candidates.push(h.join("bin/nvcc"));
        }
    }
    candidates.push(manifest.join("build/cuda/nvidia/cu13/bin/nvcc"));
    candidates.push(PathBuf::from("/usr/local/cuda/bin/nvcc"));
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("nvcc")));
    }
    let Some(nvcc) = candidates.into_iter().find(|p| p.is_file()) else {
        println!(
            "cargo:warning=nvcc not found (NVCC, CUDA_HOME, build/cuda from scripts/install-nvcc.sh, \
             /usr/local/cuda, PATH): building without CUDA kernels"
        );
        return;
    };
    let fatbin = out.join("kernels.fatbin");
    let mut cmd = std::process::Command::new(&nvcc);
    cmd.args(["-fatbin", "-O3", "-std=c++17"])
        .args(["-gencode", "arch=compute_80,code=sm_80"])
        .args(["-gencode", "arch=compute_90,code=sm_90"])
        .args(["-gencode", "arch=compute_90,code=compute_90"])
        .arg("-o")
        .arg(&fatbin)
        .args(&sources);
    match cmd.output() {
        Ok(o) if o.status.success() => {
            println!("cargo:rustc-cfg=gpumpi_kernels");
        }
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            for line in err.lines().take(20) {
                println!("cargo:warning=nvcc: {line}");
            }
            panic!("nvcc ({}) failed to compile kernels/", nvcc.display());
        }
        Err(e) => println!(
            "cargo:warning=cannot run {}: {e}; building without CUDA kernels",
            nvcc.display()
        ),
    }
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
