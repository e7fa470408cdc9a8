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

/// Compile kernels/*.cu with nvcc into OUT_DIR/kernels.fatbin ([`KERNEL_TARGETS`]) and set
/// `cfg(gpumpi_kernels)`, `BUILD_KERNEL_ARCHS` and `BUILD_NVCC` (read by gpumpi-info). Without
/// nvcc the library builds without kernels (a warning; device reductions are then staged to the
/// host) and [`watch_for_nvcc`] makes the next build look again once one appears.
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
    let Some(nvcc) = candidates.iter().find(|p| p.is_file()).cloned() else {
        watch_for_nvcc(manifest, &candidates);
        println!(
            "cargo:warning=nvcc not found (NVCC, CUDA_HOME, build/cuda from scripts/install-nvcc.sh, \
             /usr/local/cuda, PATH): building without CUDA kernels"
        );
        return;
    };
    // A new nvcc at this path (reinstalled, upgraded) compiles the kernels again.
    println!("cargo:rerun-if-changed={}", nvcc.display());
    let fatbin = out.join("kernels.fatbin");
    let mut cmd = std::process::Command::new(&nvcc);
    cmd.args(["-fatbin", "-O3", "-std=c++17"])
        .args(
            KERNEL_TARGETS.iter().flat_map(|(arch, code)| {
                ["-gencode".to_string(), format!("arch={arch},code={code}")]
            }),
        )
        .arg("-o")
        .arg(&fatbin)
        .args(&sources);
    match cmd.output() {
        Ok(o) if o.status.success() => {
            println!("cargo:rustc-cfg=gpumpi_kernels");
            // What gpumpi-info reports: the compiled targets and the compiler.
            let codes: Vec<&str> = KERNEL_TARGETS.iter().map(|(_, c)| *c).collect();
            println!("cargo:rustc-env=BUILD_KERNEL_ARCHS={}", codes.join(","));
            let version = std::process::Command::new(&nvcc)
                .arg("--version")
                .output()
                .ok()
                .and_then(|o| {
                    let text = String::from_utf8_lossy(&o.stdout).into_owned();
                    text.lines()
                        .find(|l| l.contains("release"))
                        .map(|l| l.trim().to_string())
                })
                .unwrap_or_default();
            println!("cargo:rustc-env=BUILD_NVCC={} ({version})", nvcc.display());
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

/// The (virtual architecture, code) pairs the kernels are compiled for: SASS for sm_80 (runs on
/// every 8.x device) and sm_90 (9.x), and compute_90 PTX that newer devices compile at load.
const KERNEL_TARGETS: &[(&str, &str)] = &[
    ("compute_80", "sm_80"),
    ("compute_90", "sm_90"),
    ("compute_90", "compute_90"),
];

/// No nvcc was found: ask cargo to run this script again when one appears, so that a build made
/// before `scripts/install-nvcc.sh` (or a CUDA toolkit install) gets its kernels at the next
/// `cargo build` without a `cargo clean`. A path that does not exist cannot be watched (cargo
/// would rerun the script, and so rebuild the library, on every build), so each watched path is
/// an existing directory that changes when nvcc is put under it:
/// - `build/cuda`, where install-nvcc.sh installs, created here (empty, dated in the past so that
///   creating it does not itself count as a change);
/// - the existing `bin` directories among the other candidates (`$NVCC`'s, `$CUDA_HOME/bin`,
///   `/usr/local/cuda/bin`, the `PATH` entries): adding a file there changes their date. Only
///   directories named `bin` are watched, since cargo scans a watched directory recursively.
///
/// `NVCC`, `CUDA_HOME` and `CUDA_PATH` are watched as variables (`build_kernels`).
fn watch_for_nvcc(manifest: &std::path::Path, candidates: &[PathBuf]) {
    let local = manifest.join("build/cuda");
    if !local.exists() && std::fs::create_dir_all(&local).is_ok() {
        let past = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(86400);
        let _ = std::fs::File::open(&local).and_then(|d| d.set_modified(past));
    }
    if local.is_dir() {
        println!("cargo:rerun-if-changed={}", local.display());
    }
    let mut seen = std::collections::BTreeSet::new();
    for dir in candidates.iter().filter_map(|c| c.parent()) {
        if dir.is_absolute()
            && dir.file_name().is_some_and(|n| n == "bin")
            && dir.is_dir()
            && !dir.starts_with(&local)
            && seen.insert(dir.to_path_buf())
        {
            println!("cargo:rerun-if-changed={}", dir.display());
        }
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
