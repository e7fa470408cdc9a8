//! `gpumpi-info`: what this build of gpumpi is and what it finds on this machine, like Open MPI's
//! `ompi_info`. The binary (`src/bin/gpumpi-info.rs`) only calls [`main`].
//!
//! One report, two renderings of the same tree ([`Value`]): plain text (default) and JSON
//! (`--json`). Sections:
//! - `gpumpi`: version, MPI version, standard ABI version, the install prefix and library;
//! - `kernels`: whether build.rs compiled the CUDA kernels, for which targets, with which nvcc;
//! - `cuda`: the driver as the library itself loads it (`crate::gpu`; "no libcuda", "no GPU" or
//!   disabled, with the reason), each device (name, compute capability, SMs, memory, PCI bus id,
//!   UUID, which kernel target runs on it) and each pair's link (peer access, the driver's
//!   performance rank, native atomics) with the path device data takes between them;
//! - `bootstrap`: the methods in the order `MPI_Init` tries them, whether each is detected in this
//!   environment and usable (our mpirun next to this tool, libpmix loadable, ...), and the one
//!   `MPI_Init` would choose here;
//! - `transports`: shared memory, CMA, CUDA IPC, pinned host-memory pipes: usable or why not;
//! - `rails`: the network devices the backend selects here (one rail each), the rail of each GPU
//!   from the PCI topology, and the rail this process would take as a rank (`crate::topo::rail`:
//!   `GPUMPI_RAIL`, `GPUMPI_TOPO_FILE`, PCI, local rank `GPUMPI_LOCAL_RANK`) with its source;
//! - `environment`: every `GPUMPI_*` variable of the registry (`crate::config`) with its default
//!   and its value in this environment.
//!
//! Reading the report initializes the CUDA driver (when there is one) but creates no context.

use crate::bootstrap::{self, Method};
use crate::config;
use crate::gpu;
use crate::sys::cuda;
use std::path::{Path, PathBuf};

/// A report node: what JSON can hold, objects keeping their order.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Str(String),
    List(Vec<Value>),
    Obj(Vec<(String, Value)>),
}

fn s(v: impl Into<String>) -> Value {
    Value::Str(v.into())
}

fn obj(fields: Vec<(&str, Value)>) -> Value {
    Value::Obj(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

/// `text` as a JSON string literal.
pub fn json_string(text: &str) -> String {
    let mut o = String::with_capacity(text.len() + 2);
    o.push('"');
    for c in text.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

impl Value {
    /// JSON, indented by two spaces.
    pub fn to_json(&self) -> String {
        let mut o = String::new();
        self.json_into(&mut o, 0);
        o.push('\n');
        o
    }

    fn json_into(&self, o: &mut String, depth: usize) {
        let pad = |o: &mut String, d: usize| o.push_str(&"  ".repeat(d));
        match self {
            Value::Null => o.push_str("null"),
            Value::Bool(b) => o.push_str(if *b { "true" } else { "false" }),
            Value::Int(i) => o.push_str(&i.to_string()),
            Value::Str(t) => o.push_str(&json_string(t)),
            Value::List(items) if items.is_empty() => o.push_str("[]"),
            Value::Obj(fields) if fields.is_empty() => o.push_str("{}"),
            Value::List(items) => {
                o.push_str("[\n");
                for (i, v) in items.iter().enumerate() {
                    pad(o, depth + 1);
                    v.json_into(o, depth + 1);
                    o.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
                }
                pad(o, depth);
                o.push(']');
            }
            Value::Obj(fields) => {
                o.push_str("{\n");
                for (i, (k, v)) in fields.iter().enumerate() {
                    pad(o, depth + 1);
                    o.push_str(&json_string(k));
                    o.push_str(": ");
                    v.json_into(o, depth + 1);
                    o.push_str(if i + 1 < fields.len() { ",\n" } else { "\n" });
                }
                pad(o, depth);
                o.push('}');
            }
        }
    }

    fn scalar_text(&self) -> Option<String> {
        match self {
            Value::Null => Some("-".into()),
            Value::Bool(b) => Some(if *b { "yes" } else { "no" }.into()),
            Value::Int(i) => Some(i.to_string()),
            Value::Str(t) => Some(t.clone()),
            Value::List(items) => {
                let parts: Option<Vec<String>> = items.iter().map(|v| v.scalar_text()).collect();
                parts.map(|p| {
                    if p.is_empty() {
                        "none".into()
                    } else {
                        p.join(", ")
                    }
                })
            }
            Value::Obj(_) => None,
        }
    }

    /// Plain text: one `key: value` line per scalar, nested objects indented; below the top
    /// level, an object of scalars only (a device, a variable) on one line as `k1 v1, k2 v2`.
    pub fn to_text(&self) -> String {
        let mut o = String::new();
        self.text_into(&mut o, 0);
        o
    }

    fn text_into(&self, o: &mut String, depth: usize) {
        let pad = "  ".repeat(depth);
        match self {
            Value::Obj(fields) => {
                for (k, v) in fields {
                    if let Some(t) = v.scalar_text() {
                        o.push_str(&format!("{pad}{k}: {t}\n"));
                    } else if let Some(line) = v.flat_line().filter(|_| depth > 0) {
                        o.push_str(&format!("{pad}{k}: {line}\n"));
                    } else {
                        o.push_str(&format!("{pad}{k}:\n"));
                        v.text_into(o, depth + 1);
                    }
                }
            }
            Value::List(items) => {
                for v in items {
                    match v.scalar_text().or_else(|| v.flat_line()) {
                        Some(t) => o.push_str(&format!("{pad}- {t}\n")),
                        None => {
                            o.push_str(&format!("{pad}-\n"));
                            v.text_into(o, depth + 1);
                        }
                    }
                }
            }
            v => o.push_str(&format!("{pad}{}\n", v.scalar_text().unwrap_or_default())),
        }
    }

    fn flat_line(&self) -> Option<String> {
        let Value::Obj(fields) = self else {
            return None;
        };
        let parts: Option<Vec<String>> = fields
            .iter()
            .map(|(k, v)| v.scalar_text().map(|t| format!("{k} {t}")))
            .collect();
        parts.map(|p| p.join(", "))
    }
}

/// The kernel code of `codes` (`sm_XY` machine code, `compute_XY` PTX) a device of compute
/// capability `cc` runs: machine code of the same major version and a minor version not above
/// the device's, else PTX of a version not above the device's (compiled by the driver at load).
pub fn kernel_code_for(codes: &[&str], cc: (i32, i32)) -> Option<String> {
    let parse = |c: &str, prefix: &str| -> Option<(i32, i32)> {
        let v: i32 = c.strip_prefix(prefix)?.parse().ok()?;
        Some((v / 10, v % 10))
    };
    let sass = codes
        .iter()
        .filter_map(|c| parse(c, "sm_").map(|v| (v, c)))
        .filter(|((maj, min), _)| *maj == cc.0 && *min <= cc.1)
        .max_by_key(|(v, _)| *v);
    if let Some((_, c)) = sass {
        return Some(c.to_string());
    }
    codes
        .iter()
        .filter_map(|c| parse(c, "compute_").map(|v| (v, c)))
        .filter(|(v, _)| *v <= cc)
        .max_by_key(|(v, _)| *v)
        .map(|(_, c)| format!("{c} (PTX, compiled by the driver at load)"))
}

/// The kernel targets build.rs compiled (empty without kernels).
pub fn kernel_codes() -> Vec<&'static str> {
    match option_env!("BUILD_KERNEL_ARCHS") {
        Some(a) if gpu::kernels::embedded() => a.split(',').filter(|c| !c.is_empty()).collect(),
        _ => Vec::new(),
    }
}

/// The prefix this tool runs from: the directory above its `bin/`.
fn prefix() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?.canonicalize().ok()?;
    Some(exe.parent()?.parent()?.to_path_buf())
}

fn gpumpi_section(prefix: Option<&Path>) -> Value {
    let (abi_major, abi_minor) = crate::abi::imp::init::ABI_VERSION;
    let lib = prefix.map(|p| p.join("lib/libmpi_abi.so.1"));
    obj(vec![
        ("version", s(env!("CARGO_PKG_VERSION"))),
        ("library_version", s(crate::abi::imp::init::LIBRARY_VERSION)),
        ("mpi_version", s("5.0")),
        ("abi_version", s(format!("{abi_major}.{abi_minor}"))),
        (
            "prefix",
            prefix.map_or(Value::Null, |p| s(p.display().to_string())),
        ),
        (
            "library",
            match lib {
                Some(l) if l.exists() => s(l.display().to_string()),
                Some(l) => s(format!("{} (missing)", l.display())),
                None => Value::Null,
            },
        ),
    ])
}

fn kernels_section() -> Value {
    let codes = kernel_codes();
    obj(vec![
        ("compiled", Value::Bool(gpu::kernels::embedded())),
        (
            "targets",
            Value::List(codes.iter().map(|c| s(*c)).collect()),
        ),
        (
            "nvcc",
            match option_env!("BUILD_NVCC") {
                Some(n) if gpu::kernels::embedded() => s(n),
                _ => s("none found at build time (scripts/install-nvcc.sh, then cargo build)"),
            },
        ),
    ])
}

fn device(ordinal: i32, codes: &[&str]) -> Value {
    let text = |r: cuda::CuResult<String>| r.map_or_else(|e| s(format!("error: {e}")), s);
    let cc = cuda::compute_capability(ordinal);
    let kernels = match (&cc, codes.is_empty()) {
        (_, true) => s("none (built without kernels)"),
        (Ok(cc), false) => match kernel_code_for(codes, *cc) {
            Some(c) => s(c),
            None => s(format!(
                "none: compute capability {}.{} is older than every target",
                cc.0, cc.1
            )),
        },
        (Err(e), false) => s(format!("unknown: {e}")),
    };
    let uuid = cuda::device_uuid(ordinal).map(|u| {
        let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "GPU-{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    });
    obj(vec![
        ("index", Value::Int(ordinal as i64)),
        ("name", text(cuda::device_name(ordinal))),
        (
            "compute_capability",
            text(cc.map(|(a, b)| format!("{a}.{b}"))),
        ),
        (
            "sms",
            cuda::multiprocessor_count(ordinal).map_or(Value::Null, |n| Value::Int(n as i64)),
        ),
        (
            "memory_mib",
            cuda::total_mem(ordinal).map_or(Value::Null, |b| Value::Int((b >> 20) as i64)),
        ),
        ("pci_bus_id", text(cuda::pci_bus_id(ordinal))),
        ("uuid", text(uuid)),
        ("kernels", kernels),
    ])
}

fn link(a: i32, b: i32, ipc: bool) -> Value {
    match cuda::p2p_attributes(a, b) {
        Ok((access, rank, atomics)) => obj(vec![
            ("from", Value::Int(a as i64)),
            ("to", Value::Int(b as i64)),
            ("peer_access", Value::Bool(access)),
            ("performance_rank", Value::Int(rank as i64)),
            ("native_atomics", Value::Bool(atomics)),
            (
                "device_data_path",
                s(if access && ipc {
                    "CUDA IPC (peer copies and kernels over the link)"
                } else if access {
                    "pinned shared host memory (GPUMPI_CUDA_IPC=0)"
                } else {
                    "pinned shared host memory (no peer access)"
                }),
            ),
        ]),
        Err(e) => obj(vec![
            ("from", Value::Int(a as i64)),
            ("to", Value::Int(b as i64)),
            ("error", s(e.to_string())),
        ]),
    }
}

/// The CUDA section, and whether a GPU was found.
fn cuda_section() -> (Value, bool) {
    let Some(g) = gpu::gpu() else {
        let why = gpu::unavailable_reason().unwrap_or_default();
        let status = if why.contains("GPUMPI_CUDA=0") {
            "disabled"
        } else if why.contains("dlopen") {
            "no libcuda"
        } else {
            "no GPU"
        };
        return (
            obj(vec![
                ("status", s(status)),
                ("reason", s(why)),
                ("devices", Value::List(Vec::new())),
                ("links", Value::List(Vec::new())),
            ]),
            false,
        );
    };
    let codes = kernel_codes();
    let n = g.device_count;
    let ipc = config::snapshot().cuda.ipc;
    let devices = (0..n).map(|d| device(d, &codes)).collect();
    let links = (0..n)
        .flat_map(|a| (0..n).filter(move |&b| b != a).map(move |b| (a, b)))
        .map(|(a, b)| link(a, b, ipc))
        .collect();
    let v = g.driver_version;
    (
        obj(vec![
            (
                "status",
                s(format!("{n} GPU{}", if n == 1 { "" } else { "s" })),
            ),
            (
                "driver_version",
                s(format!("{}.{}", v / 1000, (v % 1000) / 10)),
            ),
            ("devices", Value::List(devices)),
            ("links", Value::List(links)),
        ]),
        true,
    )
}

fn env_present(vars: &[&str]) -> Value {
    let set: Vec<Value> = vars
        .iter()
        .filter(|v| config::get(v).is_some())
        .map(|v| s(*v))
        .collect();
    Value::List(set)
}

fn method_section(m: Method, prefix: Option<&Path>) -> Value {
    let (usable, how) = match m {
        Method::Mpirun => match prefix.map(|p| p.join("bin/mpirun")) {
            Some(p) if p.exists() => (true, format!("{} (programs started by it)", p.display())),
            _ => (
                true,
                "programs started by gpumpi's mpirun (none next to this tool)".into(),
            ),
        },
        Method::Pmix => {
            let cands = bootstrap::pmix::library_candidates();
            match crate::sys::pmix::Pmix::load(&cands) {
                Ok(l) => (true, format!("libpmix {} ({})", l.version(), l.path())),
                Err(e) => (
                    false,
                    format!(
                        "cannot load libpmix (tried {}; GPUMPI_PMIX_LIB sets its path): {e}",
                        cands.join(", ")
                    ),
                ),
            }
        }
        Method::Pmi1 => (
            true,
            "no library needed (MPICH hydra mpiexec, srun --mpi=pmi2)".into(),
        ),
        Method::Singleton => (true, "a program started without a launcher".into()),
    };
    obj(vec![
        ("method", s(m.name())),
        ("usable", Value::Bool(usable)),
        ("how", s(how)),
        (
            "detected_by",
            Value::List(m.env().iter().map(|v| s(*v)).collect()),
        ),
        ("set_now", env_present(m.env())),
    ])
}

fn bootstrap_section(prefix: Option<&Path>) -> Value {
    let forced = config::get("GPUMPI_BOOTSTRAP");
    let chosen = match bootstrap::choose(forced.as_deref(), Method::detect) {
        Ok((m, why)) => s(format!("{} ({why})", m.name())),
        Err(e) => s(format!("error: {}", e.msg)),
    };
    obj(vec![
        ("would_choose", chosen),
        (
            "methods",
            Value::List(
                bootstrap::METHODS
                    .iter()
                    .map(|m| method_section(*m, prefix))
                    .collect(),
            ),
        ),
    ])
}

fn transport(name: &str, usable: bool, why: String) -> Value {
    obj(vec![
        ("transport", s(name)),
        ("usable", Value::Bool(usable)),
        ("why", s(why)),
    ])
}

fn transports_section(has_gpu: bool) -> Value {
    let probe = PathBuf::from(format!("/dev/shm/gpumpi-info-{}", std::process::id()));
    let shm = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            transport(
                "shm",
                true,
                "/dev/shm is writable: ranks of a node exchange through shared memory".into(),
            )
        }
        Err(e) => transport(
            "shm",
            false,
            format!("cannot create a file in /dev/shm: {e}"),
        ),
    };
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .map(|t| t.trim().to_string())
        .unwrap_or_else(|_| "absent".into());
    let cma = if !config::snapshot().shm.cma {
        transport("cma", false, "GPUMPI_SHM_CMA=0".into())
    } else if scope == "2" || scope == "3" {
        transport(
            "cma",
            false,
            format!("Yama ptrace_scope={scope} forbids process_vm_readv between ranks"),
        )
    } else {
        transport(
            "cma",
            true,
            format!(
                "single-copy rendezvous with process_vm_readv (Yama ptrace_scope {scope}; \
                 checked again per peer at MPI_Init)"
            ),
        )
    };
    let no_gpu = || "no GPU (see cuda)".to_string();
    let ipc = if !has_gpu {
        transport("cuda_ipc", false, no_gpu())
    } else if !config::snapshot().cuda.ipc {
        transport("cuda_ipc", false, "GPUMPI_CUDA_IPC=0".into())
    } else {
        transport(
            "cuda_ipc",
            true,
            "device buffers mapped by peers (legacy IPC handles, VMM descriptors)".into(),
        )
    };
    let pipes = if has_gpu {
        transport(
            "cuda_host_pipes",
            true,
            "pinned shared host memory driven by the GPUs (where peer access is missing)".into(),
        )
    } else {
        transport("cuda_host_pipes", false, no_gpu())
    };
    Value::List(vec![shm, cma, ipc, pipes])
}

fn environment_section() -> Value {
    Value::Obj(
        config::PARAMS
            .iter()
            .filter(|p| p.name.starts_with("GPUMPI_"))
            .map(|p| {
                let current = config::given(p.name);
                (
                    p.name.to_string(),
                    obj(vec![
                        ("value", current.map_or(Value::Null, s)),
                        (
                            "default",
                            if p.default.is_empty() {
                                Value::Null
                            } else {
                                s(p.default)
                            },
                        ),
                    ]),
                )
            })
            .collect(),
    )
}

fn rails_section(gpus: i32) -> Value {
    use crate::topo::rail;
    let net = match crate::transport::net::open(&[0u8; 32]) {
        Ok(n) => n,
        Err(e) => {
            return obj(vec![
                ("status", s("no network devices")),
                ("reason", s(e.to_string())),
            ])
        }
    };
    let nics: Vec<String> = net.devices().iter().map(|d| d.name.clone()).collect();
    let bus: Vec<Option<String>> = (0..gpus).map(|d| cuda::pci_bus_id(d).ok()).collect();
    let per_gpu = bus
        .iter()
        .enumerate()
        .map(|(d, b)| {
            let r = b
                .as_deref()
                .and_then(|b| rail::pci_rail(Path::new("/sys"), b, &nics));
            obj(vec![
                ("gpu", Value::Int(d as i64)),
                ("pci_bus_id", b.clone().map_or(Value::Null, s)),
                ("rail", r.map_or(Value::Null, |r| Value::Int(r as i64))),
            ])
        })
        .collect();
    let local = config::get("GPUMPI_LOCAL_RANK")
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let gpu = match gpus {
        0 => None,
        n => bus[local % n as usize].as_deref(),
    };
    let node = bootstrap::node::node_name();
    let this = match rail::from_config(&node, local, &nics, gpu) {
        Ok((r, how)) => obj(vec![
            ("rail", Value::Int(r as i64)),
            ("source", s(how.name())),
            (
                "device",
                s(nics.get(r % nics.len().max(1)).cloned().unwrap_or_default()),
            ),
        ]),
        Err(e) => obj(vec![("error", s(e))]),
    };
    obj(vec![
        (
            "status",
            s(format!(
                "{} network devices, one rail each ({})",
                nics.len(),
                net.name()
            )),
        ),
        (
            "devices",
            Value::List(nics.iter().map(|n| s(n.clone())).collect()),
        ),
        ("gpus", Value::List(per_gpu)),
        ("node", s(node)),
        ("local_rank", Value::Int(local as i64)),
        ("this_rank", this),
    ])
}

/// The whole report.
pub fn report() -> Value {
    let prefix = prefix();
    let (cuda, has_gpu) = cuda_section();
    obj(vec![
        ("gpumpi", gpumpi_section(prefix.as_deref())),
        ("kernels", kernels_section()),
        ("cuda", cuda),
        ("bootstrap", bootstrap_section(prefix.as_deref())),
        ("transports", transports_section(has_gpu)),
        (
            "rails",
            rails_section(gpu::gpu().map_or(0, |g| g.device_count)),
        ),
        ("environment", environment_section()),
    ])
}

pub const USAGE: &str = "\
usage: gpumpi-info [--json]

Prints what this gpumpi build is (version, MPI and ABI versions, CUDA kernels and their
targets) and what it finds here (GPUs and links, usable bootstraps and transports), and every
GPUMPI_* environment variable with its default and current value.
  --json      the same report as JSON
  -h, --help  this help
";

/// Entry point of the binary: returns the exit code.
pub fn main(args: Vec<String>) -> i32 {
    let mut json = false;
    for a in &args {
        match a.as_str() {
            "--json" => json = true,
            "-h" | "--help" => {
                print!("{USAGE}");
                return 0;
            }
            _ => {
                eprintln!("gpumpi-info: unknown argument {a:?}\n{USAGE}");
                return 2;
            }
        }
    }
    let r = report();
    print!("{}", if json { r.to_json() } else { r.to_text() });
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_code_by_compute_capability() {
        let codes = ["sm_80", "sm_90", "compute_90"];
        assert_eq!(kernel_code_for(&codes, (8, 0)).as_deref(), Some("sm_80"));
        assert_eq!(kernel_code_for(&codes, (8, 6)).as_deref(), Some("sm_80"));
        assert_eq!(kernel_code_for(&codes, (9, 0)).as_deref(), Some("sm_90"));
        assert!(kernel_code_for(&codes, (10, 0))
            .unwrap()
            .starts_with("compute_90 (PTX"));
        assert_eq!(kernel_code_for(&codes, (7, 5)), None);
        assert_eq!(kernel_code_for(&[], (9, 0)), None);
    }

    #[test]
    fn json_and_text_renderings() {
        let v = obj(vec![
            ("a", s("q\"uo\\te\n\u{1}")),
            ("n", Value::Int(-3)),
            ("list", Value::List(vec![Value::Bool(true), Value::Null])),
            ("empty", Value::List(vec![])),
            ("flat", obj(vec![("x", Value::Int(1)), ("y", s("z"))])),
            (
                "nested",
                Value::List(vec![obj(vec![("deep", obj(vec![("k", Value::Int(2))]))])]),
            ),
        ]);
        let j = v.to_json();
        assert!(j.contains(r#""a": "q\"uo\\te\n\u0001""#), "{j}");
        assert!(
            j.contains(
                r#""list": [
    true,
    null
  ]"#
            ),
            "{j}"
        );
        assert!(j.contains(r#""empty": []"#), "{j}");
        let t = v.to_text();
        assert!(t.contains("n: -3\n"), "{t}");
        assert!(t.contains("list: yes, -\n"), "{t}");
        assert!(t.contains("empty: none\n"), "{t}");
        assert!(t.contains("flat:\n  x: 1\n  y: z\n"), "{t}");
        assert!(t.contains("nested:\n  -\n    deep: k 2\n"), "{t}");
    }

    #[test]
    fn every_gpumpi_variable_is_reported() {
        let Value::Obj(env) = environment_section() else {
            panic!("environment is an object")
        };
        let n = config::PARAMS
            .iter()
            .filter(|p| p.name.starts_with("GPUMPI_"))
            .count();
        assert_eq!(env.len(), n);
        assert!(env.iter().any(|(k, _)| k == "GPUMPI_EAGER_LIMIT"));
    }
}
