//! Rust emitter: `wrappers.rs`, every exported `MPI_X` and its `PMPI_X` twin.
//!
//! A function is *implemented* when some `src/abi/imp/*.rs` has a line containing
//! `pub unsafe fn MPI_X(` or `pub unsafe fn MPI_X<W: Width>(` (see [`scan_implemented`]); its
//! wrapper calls `crate::abi::imp::MPI_X(args)` under `crate::abi::guard` (error-code results) or
//! `crate::abi::guard_value` (value results). Every other function reports
//! `crate::abi::unsupported("MPI_X")`.
//!
//! Large-count forms ([`Target::Width`]): where the data has both `MPI_X` and its large-count
//! twin `MPI_X_c`, and src/abi/imp implements `MPI_X` but not `MPI_X_c`, the implementation is one
//! function generic over the count width, `pub unsafe fn MPI_X<W: Width>(..)`, whose count,
//! displacement and address parameters are `W::Count`, `W::Disp`, `W::Aint` (and
//! `W::UserFn` for a user function). `MPI_X` calls it as `MPI_X::<IntCounts>`, `MPI_X_c` as
//! `MPI_X::<LargeCounts>`, and so does a deprecated `MPI_X_x` whose parameters are those of
//! `MPI_X_c`. Each wrapper still names itself in `guard`, so errors name the function called.

use crate::ctype::rust_ident;
use crate::emit_ffi::ret_rust;
use crate::*;
use std::collections::BTreeSet;
use std::fmt::Write;
use std::path::Path;

/// Names of the functions implemented in `imp_dir` (lines containing `pub unsafe fn MPI...(`).
pub fn scan_implemented(imp_dir: &Path) -> std::io::Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let mut entries: Vec<_> = std::fs::read_dir(imp_dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let p = e.path();
        if p.extension().and_then(|x| x.to_str()) != Some("rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p)?;
        out.extend(scan_source(&text));
        out.extend(scan_macro_args(&text));
    }
    Ok(out)
}

/// `MPI...` identifiers given as arguments to macros (e.g. `three_modes!(MPI_Barrier, MPI_Ibarrier, ..`
/// or the rows of a `conversions!` table): candidates that the caller keeps only when they are
/// functions of the ABI data, since such rows also name types.
pub fn scan_macro_args(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_macro = false;
    for line in src.lines() {
        let t = line.trim_start();
        if t.starts_with("//") {
            continue;
        }
        // `name!(`, `name! {` or `name![` (a brace-invoked table was once missed, leaving
        // every function it defines exported as the unsupported stub).
        let starts_macro = t
            .split(['(', '{', '['])
            .next()
            .map(str::trim_end)
            .is_some_and(|h| h.ends_with('!') && !h.contains(' '));
        if starts_macro {
            in_macro = true;
        }
        if in_macro {
            for tok in t.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if tok.starts_with("MPI") && tok.len() > 4 {
                    out.push(tok.to_string());
                }
            }
        }
        if in_macro && (t.ends_with(");") || t.ends_with('}') && t.starts_with('}')) {
            in_macro = false;
        }
    }
    out
}

/// The generic parameter list of an implementation that serves both count widths.
pub const WIDTH_GENERIC: &str = "<W: Width>(";

/// Module of the count-width markers, as the generated code names it.
const WIDTH_MOD: &str = "crate::abi::width";

/// How an exported function reaches its implementation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Not implemented: the wrapper reports `unsupported`.
    Unsupported,
    /// `crate::abi::imp::MPI_X(args)`.
    Direct,
    /// `crate::abi::imp::<core>::<marker>(args)`: the width-generic implementation of a pair.
    Width { core: String, large: bool },
}

impl Target {
    pub fn implemented(&self) -> bool {
        *self != Target::Unsupported
    }
}

/// The name of `f`'s int-count twin when `f` is a large-count form: `MPI_X` for `MPI_X_c`,
/// and for a deprecated `MPI_X_x` whose parameters are those of `MPI_X_c`.
fn int_twin<'a>(abi: &'a Abi, f: &Function) -> Option<&'a Function> {
    let name = f.name();
    if let Some(base) = name.strip_suffix("_c") {
        return abi.function(base);
    }
    let base = name.strip_suffix("_x")?;
    let c = abi.function(&format!("{base}_c"))?;
    let same = c.proto.params.len() == f.proto.params.len()
        && c.proto
            .params
            .iter()
            .zip(&f.proto.params)
            .all(|(a, b)| a.ty == b.ty);
    if same {
        abi.function(base)
    } else {
        None
    }
}

/// Where the wrapper of `f` goes, given the names implemented in src/abi/imp.
pub fn target(abi: &Abi, implemented: &BTreeSet<String>, f: &Function) -> Target {
    let name = f.name();
    if let Some(base) = int_twin(abi, f) {
        // A large-count form: hand-written, else the width-generic core of its int twin.
        if implemented.contains(name) {
            return Target::Direct;
        }
        if is_width_core(abi, implemented, base) {
            return Target::Width {
                core: base.name().to_string(),
                large: true,
            };
        }
        return Target::Unsupported;
    }
    if !implemented.contains(name) {
        return Target::Unsupported;
    }
    if is_width_core(abi, implemented, f) {
        return Target::Width {
            core: name.to_string(),
            large: false,
        };
    }
    Target::Direct
}

/// `f` (an int-count form) is implemented generically: it is implemented, has a large-count twin
/// in the data, and that twin is not implemented by hand.
fn is_width_core(abi: &Abi, implemented: &BTreeSet<String>, f: &Function) -> bool {
    let twin = format!("{}_c", f.name());
    implemented.contains(f.name()) && abi.function(&twin).is_some() && !implemented.contains(&twin)
}

/// The `pub unsafe fn MPI...(` names in one source text.
pub fn scan_source(src: &str) -> Vec<String> {
    const KEY: &str = "pub unsafe fn ";
    let mut out = Vec::new();
    for line in src.lines() {
        if line.trim_start().starts_with("//") {
            continue; // doc comments may show the pattern
        }
        let Some(i) = line.find(KEY) else { continue };
        let rest = &line[i + KEY.len()..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let (name, after) = rest.split_at(end);
        if name.starts_with("MPI") && (after.starts_with('(') || after.starts_with(WIDTH_GENERIC)) {
            out.push(name.to_string());
        }
    }
    out
}

/// The value returned on a panic (guard_value) or by an unimplemented non-int function.
fn default_value(abi: &Abi, ret: &str) -> String {
    if let Some(h) = abi.handle(ret) {
        if let Some(v) = h.values.iter().find(|v| v.name.ends_with("_NULL")) {
            return format!("crate::abi::consts::{}", v.name);
        }
        return "::std::ptr::null_mut()".into();
    }
    match ret {
        "double" => "0.0".into(),
        _ => "0".into(),
    }
}

fn err_obj(f: &Function) -> String {
    for p in &f.proto.params {
        if !p.ty.by_value() {
            continue;
        }
        let kind = match p.ty.base.as_str() {
            "MPI_Comm" => "Comm",
            "MPI_Win" => "Win",
            "MPI_File" => "File",
            "MPI_Session" => "Session",
            _ => continue,
        };
        return format!("crate::abi::ErrObj::{kind}({})", rust_ident(&p.name));
    }
    "crate::abi::ErrObj::None".into()
}

fn body(abi: &Abi, f: &Function, target: &Target) -> String {
    let name = f.name();
    let args: Vec<String> = f.proto.params.iter().map(|p| rust_ident(&p.name)).collect();
    let callee = match target {
        Target::Width { core, large } => {
            let marker = if *large { "LargeCounts" } else { "IntCounts" };
            format!("{core}::<{WIDTH_MOD}::{marker}>")
        }
        _ => name.to_string(),
    };
    let call = format!("crate::abi::imp::{callee}({})", args.join(", "));
    match (target.implemented(), f.returns_error_code()) {
        (true, true) => format!("crate::abi::guard(\"{name}\", {}, || {call})", err_obj(f)),
        (true, false) => {
            format!(
                "crate::abi::guard_value(\"{name}\", {}, || {call})",
                default_value(abi, &f.proto.ret)
            )
        }
        (false, true) => format!("crate::abi::unsupported(\"{name}\")"),
        (false, false) => {
            format!(
                "crate::abi::unsupported(\"{name}\");\n    {}",
                default_value(abi, &f.proto.ret)
            )
        }
    }
}

pub fn rust_wrappers(abi: &Abi, implemented: &BTreeSet<String>) -> String {
    let mut o = String::new();
    o.push_str("// Generated by build.rs from mpi-abi/data and src/abi/imp. Do not edit.\n");
    o.push_str(
        "// SAFETY contract of every function below: it is called from C, whose caller guarantees\n\
         // what the MPI standard requires of the arguments (valid buffers of the given count and\n\
         // datatype, valid out-pointers); handles are checked by the imp functions.\n",
    );
    o.push_str("/// The exported C ABI: every `MPI_X` of mpi-abi/data and its `PMPI_X` twin.\n");
    o.push_str("pub mod exports {\n#![allow(non_snake_case, unused_variables, clippy::too_many_arguments)]\n");
    o.push_str("#[allow(unused_imports)]\nuse crate::abi::ffi::*;\n");
    o.push_str("#[allow(unused_imports)]\nuse std::os::raw::{c_char, c_int, c_void};\n\n");
    o.push_str("/// Every exported function of the data and whether gpumpi implements it.\n");
    o.push_str("pub const FUNCTIONS: &[(&str, bool)] = &[\n");
    for f in &abi.functions {
        writeln!(
            o,
            "    (\"{}\", {}),",
            f.name(),
            target(abi, implemented, f).implemented()
        )
        .unwrap();
    }
    o.push_str("];\n\n");

    for f in &abi.functions {
        let imp = target(abi, implemented, f);
        let params: Vec<String> = f
            .proto
            .params
            .iter()
            .map(|p| format!("{}: {}", rust_ident(&p.name), p.ty.rust(abi)))
            .collect();
        let ret = ret_rust(&f.proto.ret);
        let body = body(abi, f, &imp);
        let mut names = vec![f.name().to_string()];
        if f.has_pmpi() {
            names.push(format!("P{}", f.name()));
        }
        for n in names {
            if f.proto.variadic {
                o.push_str(
                    "// C declares this function variadic (`int level, ...`). It is exported with the\n\
                     // fixed parameters only: under the x86-64 SysV and AArch64 AAPCS64 calling\n\
                     // conventions a variadic caller passes the fixed arguments exactly as for a\n\
                     // non-variadic callee, and the extra arguments are ignored.\n",
                );
            }
            writeln!(
                o,
                "#[no_mangle]\npub unsafe extern \"C\" fn {n}({}){ret} {{\n    {body}\n}}\n",
                params.join(", ")
            )
            .unwrap();
        }
    }
    o.push_str("}\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_only_mpi_fns() {
        let src = "pub unsafe fn MPI_Send(buf: *const c_void) -> MpiResult<()> {\n\
                   fn helper() {}\n    pub unsafe fn MPIX_Query_cuda_support() -> c_int {\n\
                   pub unsafe fn not_mpi(\npub unsafe fn MPI_Recv<T>(\n//! `pub unsafe fn MPI_Xxx(`\n\
                   pub unsafe fn MPI_Bsend<W: Width>(buf: *const c_void, count: W::Count";
        assert_eq!(
            scan_source(src),
            vec![
                "MPI_Send".to_string(),
                "MPIX_Query_cuda_support".to_string(),
                "MPI_Bsend".to_string()
            ]
        );
    }
}

#[cfg(test)]
mod scan_tests {
    use super::scan_macro_args;

    #[test]
    fn macro_rows_in_parens_and_braces() {
        let src = "conversions!(\n    MPI_Comm, Comm, MPI_Comm_c2f, MPI_Comm_f2c;\n);\n\
                   conversions! {\n    MPI_Win, Win, MPI_Win_toint, MPI_Win_fromint;\n}\n\
                   fn other() { MPI_Not_in_a_macro(); }\n";
        let got = scan_macro_args(src);
        for want in [
            "MPI_Comm_c2f",
            "MPI_Comm_f2c",
            "MPI_Win_toint",
            "MPI_Win_fromint",
        ] {
            assert!(got.iter().any(|g| g == want), "{want} not found in {got:?}");
        }
        assert!(!got.iter().any(|g| g == "MPI_Not_in_a_macro"));
    }
}
