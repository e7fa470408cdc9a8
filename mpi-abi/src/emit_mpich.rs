//! MPICH-ABI emitter: the exported functions of gpumpi's `libmpi.so.12` (crate `mpich/`), each a
//! forwarder to the standard-ABI function of `libmpi_abi.so.1` that translates handles, constants,
//! statuses and buffer sentinels on the way in and out.
//!
//! Inputs: the standard ABI ([`Abi`]), the MPICH values and translation rules of
//! `data/mpich.txt` ([`Mpich`]), the functions gpumpi implements (a function it does not implement
//! is forwarded with zeroed arguments, so that the core raises its `MPI_ERR_UNSUPPORTED_OPERATION`
//! with the function's name through the error handler), and the functions `mpich/src` writes by
//! hand (callbacks, contents queries, Fortran statuses, `MPI_Abi_get_version`).
//!
//! The generated code uses the runtime of `mpich/src/rt.rs`: `core()` (the standard-ABI entry
//! points, resolved from libmpi_abi.so.1), `Kind` (a handle type's translation), `h_in`/`h_out`,
//! `StdStatus`/`MpichStatus` and their conversions, `err_from_std`, `buf_in`, `comm_size`,
//! `buf_out`, `keep_err`, `UNSET`, `copy_str`, `guard_rc`/`guard_val`.
//!
//! A parameter of an implemented function that no rule covers (a callback) stops the generator,
//! naming the function: it must be written by hand.

use crate::ctype::{rust_base, rust_ident};
use crate::*;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// `data/mpich.txt`.
pub const MPICH_TXT: &str = include_str!("../data/mpich.txt");

/// A predefined handle: its name and its MPICH value (None where MPICH has no such handle).
pub type Constant = (String, Option<i64>);

/// The MPICH ABI's values and the translation rules, as data.
#[derive(Debug, Clone, Default)]
pub struct Mpich {
    /// Handle type -> (predefined name, MPICH value; None where MPICH has no such handle).
    pub handles: Vec<(String, Vec<Constant>)>,
    /// Class id -> (constant name, MPICH value).
    pub classes: Vec<(String, Vec<(String, i64)>)>,
    /// (string size name, MPICH value, `Function:param` outputs filled up to it).
    pub strings: Vec<(String, i64, Vec<String>)>,
    /// Parameter rule (`name` or `Function:name`) -> class (`none`: unchanged).
    pub params: BTreeMap<String, String>,
    /// `void *` parameters that carry MPI_IN_PLACE / MPI_BUFFER_AUTOMATIC.
    pub buffers: BTreeSet<String>,
    /// `void *` parameters through which a buffer address (maybe MPI_BUFFER_AUTOMATIC) returns.
    pub bufouts: BTreeSet<String>,
    /// Array parameter -> candidate length parameters (or `comm_size`).
    pub lengths: BTreeMap<String, Vec<String>>,
    /// `Function:param` handle pointers that are read as well as written.
    pub inout: BTreeSet<String>,
}

fn parse_int(s: &str) -> Result<i64, String> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s),
    };
    let v = match body.strip_prefix("0x") {
        Some(h) => i64::from_str_radix(h, 16),
        None => body.parse::<i64>(),
    }
    .map_err(|_| format!("bad integer `{s}`"))?;
    Ok(if neg { -v } else { v })
}

/// Parse `data/mpich.txt`.
pub fn parse_mpich(text: &str) -> Result<Mpich, String> {
    let mut m = Mpich::default();
    enum Cur {
        None,
        Handle,
        Class,
    }
    let mut cur = Cur::None;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.split('#').next().unwrap().trim();
        if line.is_empty() {
            continue;
        }
        let t: Vec<&str> = line.split_whitespace().collect();
        let need = |k: usize| {
            if t.len() < k {
                Err(format!("mpich.txt:{n}: too few fields"))
            } else {
                Ok(())
            }
        };
        match t[0] {
            "@handle" => {
                need(2)?;
                m.handles.push((t[1].into(), vec![]));
                cur = Cur::Handle;
            }
            "@class" => {
                need(2)?;
                m.classes.push((t[1].into(), vec![]));
                cur = Cur::Class;
            }
            "@string" => {
                need(3)?;
                let v = parse_int(t[2]).map_err(|e| format!("mpich.txt:{n}: {e}"))?;
                m.strings.push((
                    t[1].into(),
                    v,
                    t[3..].iter().map(|s| s.to_string()).collect(),
                ));
                cur = Cur::None;
            }
            "@param" => {
                need(3)?;
                for p in &t[2..] {
                    m.params.insert(p.to_string(), t[1].into());
                }
                cur = Cur::None;
            }
            "@buffer" => {
                m.buffers.extend(t[1..].iter().map(|s| s.to_string()));
                cur = Cur::None;
            }
            "@bufout" => {
                m.bufouts.extend(t[1..].iter().map(|s| s.to_string()));
                cur = Cur::None;
            }
            "@length" => {
                need(3)?;
                m.lengths
                    .insert(t[1].into(), t[2..].iter().map(|s| s.to_string()).collect());
                cur = Cur::None;
            }
            "@inout" => {
                m.inout.extend(t[1..].iter().map(|s| s.to_string()));
                cur = Cur::None;
            }
            _ => {
                need(2)?;
                match cur {
                    Cur::Handle => {
                        let v = if t[1] == "-" {
                            None
                        } else {
                            Some(parse_int(t[1]).map_err(|e| format!("mpich.txt:{n}: {e}"))?)
                        };
                        m.handles.last_mut().unwrap().1.push((t[0].into(), v));
                    }
                    Cur::Class => {
                        let v = parse_int(t[1]).map_err(|e| format!("mpich.txt:{n}: {e}"))?;
                        m.classes.last_mut().unwrap().1.push((t[0].into(), v));
                    }
                    Cur::None => return Err(format!("mpich.txt:{n}: value outside a section")),
                }
            }
        }
    }
    Ok(m)
}

/// The embedded `data/mpich.txt`.
pub fn load_mpich() -> Mpich {
    parse_mpich(MPICH_TXT).unwrap_or_else(|e| panic!("{e}"))
}

impl Mpich {
    /// The class of parameter `param` of function `func` (`Function:param` first, then `param`).
    pub fn class_of(&self, func: &str, param: &str) -> Option<&str> {
        let c = self
            .params
            .get(&format!("{func}:{param}"))
            .or_else(|| self.params.get(param))?;
        (c != "none").then_some(c.as_str())
    }
}

/// The standard-ABI value of a predefined handle (aliases resolved) or of an extension handle
/// constant (`MPIX_C_FLOAT16` in mpi-ext.h).
fn std_handle_value(abi: &Abi, ty: &str, name: &str) -> Option<u64> {
    let h = abi.handle(ty)?;
    let mut name = name.to_string();
    for _ in 0..4 {
        match h.values.iter().find(|v| v.name == name).map(|v| &v.value) {
            Some(HandleValueKind::Value(v)) => return Some(*v),
            Some(HandleValueKind::Alias(a)) => name = a.clone(),
            None => break,
        }
    }
    abi.constants()
        .find(|c| c.name == name && c.ctype == ty)
        .map(|c| c.value as u64)
}

/// The Rust type of a parameter: as the MPICH ABI spells it (`mpich`: int handles, MPICH's
/// status), or as the forwarders call the standard ABI (handles as `usize`).
fn rust_ty(abi: &Abi, ty: &CType, mpich: bool) -> String {
    ty.rust_with(abi, |base| {
        if abi.callback(base).is_some() {
            return "*const c_void".into();
        }
        if let Some(h) = abi.handle(base) {
            return if mpich && !h.tool && h.name != "MPI_File" {
                "c_int".into()
            } else {
                "usize".into()
            };
        }
        match base {
            "MPI_Status" if mpich => "MpichStatus".into(),
            "MPI_Status" => "StdStatus".into(),
            "MPI_Aint" => "isize".into(),
            "MPI_Offset" | "MPI_Count" => "i64".into(),
            "MPI_Fint" | "MPI_T_cb_safety" | "MPI_T_source_order" => "c_int".into(),
            other => rust_base(other),
        }
    })
}

fn ret_ty(abi: &Abi, ret: &str, mpich: bool) -> String {
    if ret == "void" {
        return String::new();
    }
    let ty = CType {
        is_const: false,
        base: ret.to_string(),
        ptrs: 0,
        arrays: vec![],
    };
    format!(" -> {}", rust_ty(abi, &ty, mpich))
}

fn kind_name(ty: &str) -> String {
    format!("K_{ty}")
}

/// A handle type translated through a `Kind` (ints on the MPICH side).
fn translated_handle<'a>(abi: &'a Abi, base: &str) -> Option<&'a HandleType> {
    abi.handle(base)
        .filter(|h| !h.tool && h.name != "MPI_File" && h.conv_stem.is_some())
}

/// Names of the identity conversions (`MPI_Comm_c2f`, `_f2c`, `_toint`, `_fromint`): in the MPICH
/// ABI a handle is its Fortran and integer value.
fn identity_conversions(abi: &Abi) -> BTreeSet<String> {
    let mut s = BTreeSet::new();
    for h in &abi.handles {
        if translated_handle(abi, &h.name).is_none() {
            continue;
        }
        let stem = h.conv_stem.as_ref().unwrap();
        for suf in ["c2f", "f2c", "toint", "fromint"] {
            s.insert(format!("MPI_{stem}_{suf}"));
        }
    }
    s
}

fn emit_kinds(o: &mut String, abi: &Abi, m: &Mpich) -> Result<(), String> {
    o.push_str("/// Predefined-handle tables, one `Kind` per handle type.\n");
    for (ty, vals) in &m.handles {
        let Some(h) = translated_handle(abi, ty) else {
            continue;
        };
        let stem = h.conv_stem.as_ref().unwrap();
        // Every predefined standard value must appear in mpich.txt (possibly as `-`).
        for v in &h.values {
            if !vals.iter().any(|(n, _)| n == &v.name) {
                return Err(format!("mpich.txt: @handle {ty} lacks {}", v.name));
            }
        }
        let mut to_std = BTreeMap::new();
        let mut from_std = BTreeMap::new();
        let mut null_std = None;
        let mut null_mpich = None;
        for (name, mv) in vals {
            let Some(mv) = mv else { continue };
            let sv = std_handle_value(abi, ty, name)
                .ok_or_else(|| format!("mpich.txt: {name} is no {ty} of the standard ABI"))?;
            to_std.entry(*mv).or_insert(sv);
            from_std.entry(sv).or_insert(*mv);
            if name.ends_with("_NULL") && null_std.is_none() {
                null_std = Some(sv);
                null_mpich = Some(*mv);
            }
        }
        let (Some(ns), Some(nm)) = (null_std, null_mpich) else {
            return Err(format!("mpich.txt: @handle {ty} has no _NULL handle"));
        };
        let k = kind_name(ty);
        writeln!(o, "#[allow(non_camel_case_types)]\npub struct {k};").unwrap();
        writeln!(o, "impl Kind for {k} {{").unwrap();
        writeln!(o, "    const NAME: &'static str = \"{ty}\";").unwrap();
        writeln!(o, "    const STD_NULL: usize = {ns:#x};").unwrap();
        writeln!(o, "    const MPICH_NULL: c_int = {nm:#x};").unwrap();
        o.push_str("    fn to_std(v: c_int) -> Option<usize> {\n        match v as u32 {\n");
        for (mv, sv) in &to_std {
            writeln!(o, "            {mv:#x} => Some({sv:#x}),").unwrap();
        }
        o.push_str("            _ => None,\n        }\n    }\n");
        o.push_str("    fn from_std(h: usize) -> Option<c_int> {\n        match h {\n");
        for (sv, mv) in &from_std {
            writeln!(o, "            {sv:#x} => Some({mv:#x}_u32 as c_int),").unwrap();
        }
        o.push_str("            _ => None,\n        }\n    }\n");
        writeln!(
            o,
            "    unsafe fn toint(c: &Core, h: usize) -> c_int {{ (c.MPI_{stem}_toint)(h) }}"
        )
        .unwrap();
        writeln!(
            o,
            "    unsafe fn fromint(c: &Core, i: c_int) -> usize {{ (c.MPI_{stem}_fromint)(i) }}"
        )
        .unwrap();
        o.push_str("}\n\n");
    }
    Ok(())
}

fn emit_classes(o: &mut String, abi: &Abi, m: &Mpich) -> Result<(), String> {
    o.push_str("/// Int constants by class: `<class>_to_std` and `<class>_from_std`.\n");
    for (id, vals) in &m.classes {
        let mut pairs = Vec::new();
        for (name, mv) in vals {
            let sv = abi
                .constants()
                .find(|c| &c.name == name)
                .ok_or_else(|| format!("mpich.txt: {name} is no constant of the standard ABI"))?
                .value;
            pairs.push((*mv, sv));
        }
        for (dir, swap) in [("to_std", false), ("from_std", true)] {
            writeln!(o, "pub fn {id}_{dir}(v: c_int) -> c_int {{\n    match v {{").unwrap();
            let mut seen = BTreeSet::new();
            for (mv, sv) in &pairs {
                let (a, b) = if swap { (sv, mv) } else { (mv, sv) };
                if a != b && seen.insert(*a) {
                    writeln!(o, "        {a} => {b},").unwrap();
                }
            }
            o.push_str("        _ => v,\n    }\n}\n");
        }
    }
    for (name, mv, _) in &m.strings {
        let sv = abi
            .constants()
            .find(|c| &c.name == name)
            .ok_or_else(|| format!("mpich.txt: {name} is no constant of the standard ABI"))?
            .value;
        writeln!(
            o,
            "pub const MPICH_{name}: usize = {mv};\npub const STD_{name}: usize = {sv};"
        )
        .unwrap();
    }
    o.push('\n');
    Ok(())
}

fn emit_core(o: &mut String, abi: &Abi) {
    o.push_str(
        "/// The standard-ABI entry points of libmpi_abi.so.1 (the `PMPI_` names; `MPIX_` have none).\n\
         #[allow(non_snake_case)]\npub struct Core {\n",
    );
    for f in &abi.functions {
        let params: Vec<String> = f
            .proto
            .params
            .iter()
            .map(|p| rust_ty(abi, &p.ty, false))
            .collect();
        writeln!(
            o,
            "    pub {}: unsafe extern \"C\" fn({}){},",
            f.name(),
            params.join(", "),
            ret_ty(abi, &f.proto.ret, false)
        )
        .unwrap();
    }
    o.push_str("}\n\nimpl Core {\n");
    o.push_str(
        "    /// Resolve every entry point with `sym` (a symbol of libmpi_abi.so.1, never of this library).\n\
         \x20   /// # Safety\n\
         \x20   /// `sym` must return the address of the standard-ABI function of that name.\n\
         \x20   pub unsafe fn load(sym: &mut dyn FnMut(&str) -> Result<*mut c_void, String>) -> Result<Core, String> {\n\
         \x20       Ok(Core {\n",
    );
    for f in &abi.functions {
        let sym = if f.has_pmpi() {
            format!("P{}", f.name())
        } else {
            f.name().to_string()
        };
        writeln!(
            o,
            "            {}: std::mem::transmute::<*mut c_void, _>(sym(\"{sym}\")?),",
            f.name()
        )
        .unwrap();
    }
    o.push_str("        })\n    }\n}\n\n");
}

/// One forwarder's pieces.
#[derive(Default)]
struct Fwd {
    pre: Vec<String>,
    args: Vec<String>,
    post: Vec<String>,
}

/// The length expression of array parameter `p` of `f`.
fn length(m: &Mpich, f: &Function, p: &CParam, fwd: &mut Fwd) -> Result<String, String> {
    let cands = m
        .lengths
        .get(&p.name)
        .ok_or_else(|| format!("{}: no @length rule for array `{}`", f.name(), p.name))?;
    for c in cands {
        if c == "comm_size" {
            let v = format!("{}_len", p.name);
            fwd.pre.push(format!("let {v} = comm_size(core, comm_s);"));
            return Ok(v);
        }
        if f.proto.params.iter().any(|q| &q.name == c) {
            return Ok(format!("nlen({} as i64)", rust_ident(c)));
        }
    }
    Err(format!(
        "{}: none of {cands:?} is a parameter (length of `{}`)",
        f.name(),
        p.name
    ))
}

/// How the elements of an array parameter translate: the temporary's element type, the
/// expression of element `i` in the standard ABI, and the statement that writes back `v`, the
/// standard value of element `i` (`{s}_0` holds the values before the call).
struct Conv {
    elem: &'static str,
    to_std: String,
    from_std: String,
}

/// An array parameter `n` of `len` elements: translated into the temporary `s` before the call
/// and, unless `is_const`, written back after it.
fn array_param(fwd: &mut Fwd, n: &str, s: &str, is_const: bool, len: &str, c: &Conv) {
    let (elem, to_std, from_std) = (c.elem, &c.to_std, &c.from_std);
    let m = if is_const { "" } else { "mut" };
    fwd.pre.push(format!(
        "let {m} {s}: Vec<{elem}> = if {n}.is_null() {{ Vec::new() }} else {{ (0..{len}).map(|i| {to_std}).collect() }};"
    ));
    if is_const {
        fwd.args.push(format!(
            "if {n}.is_null() {{ std::ptr::null() }} else {{ {s}.as_ptr() }}"
        ));
    } else {
        fwd.pre.push(format!("let {s}_0 = {s}.clone();"));
        fwd.args.push(format!(
            "if {n}.is_null() {{ std::ptr::null_mut() }} else {{ {s}.as_mut_ptr() }}"
        ));
        fwd.post.push(format!(
            "for (i, v) in {s}.iter().enumerate() {{ {from_std} }}"
        ));
    }
}

fn param(abi: &Abi, m: &Mpich, f: &Function, p: &CParam, fwd: &mut Fwd) -> Result<(), String> {
    let n = rust_ident(&p.name);
    let s = format!("{n}_s");
    let ty = &p.ty;
    let fname = f.name();
    let array = !ty.arrays.is_empty();
    if abi.callback(&ty.base).is_some() {
        return Err(format!("{fname}: callback parameter `{}`", p.name));
    }
    if let Some(h) = translated_handle(abi, &ty.base) {
        let k = kind_name(&h.name);
        if ty.by_value() {
            fwd.pre.push(format!("let {s} = h_in::<{k}>(core, {n});"));
            fwd.args.push(s);
        } else if ty.ptrs == 1 && !array {
            // An output is written back when the core stored a handle: an input handle the
            // call leaves as it was (an error) stays untouched, an output starts as UNSET.
            let inout = m.inout.contains(&format!("{fname}:{}", p.name));
            fwd.pre.push(format!(
                "let {s}_0: usize = if {inout} && !{n}.is_null() {{ h_in::<{k}>(core, *{n}) }} else {{ UNSET }};"
            ));
            fwd.pre.push(format!("let mut {s} = {s}_0;"));
            fwd.args.push(format!(
                "if {n}.is_null() {{ std::ptr::null_mut() }} else {{ &mut {s} }}"
            ));
            fwd.post.push(format!(
                "if !{n}.is_null() && {s} != {s}_0 {{ match h_out::<{k}>(core, {s}) {{ Ok(v) => *{n} = v, Err(e) => keep_err(&mut rc, e) }} }}"
            ));
        } else if ty.ptrs == 0 && ty.arrays.len() == 1 {
            let len = length(m, f, p, fwd)?;
            let conv = Conv {
                elem: "usize",
                to_std: format!("h_in::<{k}>(core, *{n}.add(i))"),
                // Only entries the core changed are written back (as for one handle).
                from_std: format!(
                    "if *v != {s}_0[i] {{ match h_out::<{k}>(core, *v) {{ Ok(v) => *{n}.add(i) = v, Err(e) => keep_err(&mut rc, e) }} }}"
                ),
            };
            array_param(fwd, &n, &s, ty.is_const, &len, &conv);
        } else {
            return Err(format!(
                "{fname}: handle parameter `{}` of an unknown shape",
                p.name
            ));
        }
        return Ok(());
    }
    if ty.base == "MPI_Status" {
        if ty.ptrs == 1 && !array && ty.is_const {
            fwd.pre.push(format!("let {s} = status_in({n});"));
            fwd.args.push(format!(
                "match &{s} {{ Some(st) => st as *const StdStatus, None => std::ptr::null() }}"
            ));
        } else if ty.ptrs == 1 && !array {
            // One status, or an array (`array_of_statuses` is declared `MPI_Status *` in the data).
            let len = if p.name == "array_of_statuses" {
                length(m, f, p, fwd)?
            } else {
                "1usize".into()
            };
            fwd.pre.push(format!(
                "let mut {s}: Vec<StdStatus> = if status_ignored({n}) {{ Vec::new() }} else {{ (0..{len}).map(|i| status_in({n}.add(i)).unwrap_or_default()).collect() }};"
            ));
            fwd.args.push(format!(
                "if status_ignored({n}) {{ std::ptr::null_mut() }} else {{ {s}.as_mut_ptr() }}"
            ));
            // The `some` forms fill only `*outcount` entries.
            let written = if f.proto.params.iter().any(|q| q.name == "outcount")
                && p.name == "array_of_statuses"
            {
                format!(
                    "if outcount.is_null() || *outcount < 0 {{ 0 }} else {{ (*outcount as usize).min({s}.len()) }}"
                )
            } else {
                format!("{s}.len()")
            };
            fwd.post.push(format!(
                "for (i, st) in {s}.iter().take({written}).enumerate() {{ *{n}.add(i) = status_out(st); }}"
            ));
        } else {
            return Err(format!(
                "{fname}: status parameter `{}` of an unknown shape",
                p.name
            ));
        }
        return Ok(());
    }
    if ty.base == "int" {
        if let Some(class) = m.class_of(fname, &p.name) {
            if ty.by_value() {
                fwd.pre.push(format!("let {s} = {class}_to_std({n});"));
                fwd.args.push(s);
            } else if ty.ptrs == 1 && !array {
                fwd.pre.push(format!(
                    "let mut {s}: c_int = if {n}.is_null() {{ 0 }} else {{ {class}_to_std(*{n}) }};"
                ));
                fwd.args.push(format!(
                    "if {n}.is_null() {{ std::ptr::null_mut() }} else {{ &mut {s} }}"
                ));
                fwd.post.push(format!(
                    "if !{n}.is_null() {{ *{n} = {class}_from_std({s}); }}"
                ));
            } else if ty.ptrs == 0 && ty.arrays.len() == 1 {
                let len = length(m, f, p, fwd)?;
                let conv = Conv {
                    elem: "c_int",
                    to_std: format!("{class}_to_std(*{n}.add(i))"),
                    from_std: format!("*{n}.add(i) = {class}_from_std(*v);"),
                };
                array_param(fwd, &n, &s, ty.is_const, &len, &conv);
            } else {
                return Err(format!(
                    "{fname}: classed int `{}` of an unknown shape",
                    p.name
                ));
            }
            return Ok(());
        }
    }
    if ty.base == "void" && ty.ptrs == 1 && !array && m.buffers.contains(&p.name) {
        let cast = if ty.is_const {
            "*const c_void"
        } else {
            "*mut c_void"
        };
        fwd.args
            .push(format!("buf_in({n} as *const c_void) as {cast}"));
        return Ok(());
    }
    if ty.base == "void" && ty.ptrs == 1 && !array && m.bufouts.contains(&p.name) {
        fwd.args.push(n.clone());
        fwd.post.push(format!(
            "if !{n}.is_null() {{ buf_out({n} as *mut *mut c_void); }}"
        ));
        return Ok(());
    }
    if ty.base == "char" && ty.ptrs == 1 && !array && !ty.is_const {
        if let Some((name, _, _)) = m
            .strings
            .iter()
            .find(|(_, _, outs)| outs.iter().any(|o| o == &format!("{fname}:{}", p.name)))
        {
            fwd.pre.push(format!(
                "let mut {s}: Vec<c_char> = vec![0; STD_{name} + 1];"
            ));
            fwd.args.push(format!(
                "if {n}.is_null() {{ std::ptr::null_mut() }} else {{ {s}.as_mut_ptr() }}"
            ));
            let lenp = f
                .proto
                .params
                .iter()
                .find(|q| q.name == "resultlen")
                .map(|_| "resultlen")
                .unwrap_or("std::ptr::null_mut()");
            fwd.post.push(format!(
                "if !{n}.is_null() {{ copy_str(&{s}, {n}, MPICH_{name}, {lenp}); }}"
            ));
            return Ok(());
        }
    }
    fwd.args.push(n);
    Ok(())
}

fn forwarder(abi: &Abi, m: &Mpich, f: &Function, implemented: bool) -> Result<String, String> {
    let name = f.name();
    let params: Vec<String> = f
        .proto
        .params
        .iter()
        .map(|p| format!("{}: {}", rust_ident(&p.name), rust_ty(abi, &p.ty, true)))
        .collect();
    let ret = ret_ty(abi, &f.proto.ret, true);
    let err_code = f.returns_error_code();
    let mut body = String::new();
    let mpix_handle = f
        .proto
        .params
        .iter()
        .any(|p| abi.handle(&p.ty.base).is_some_and(|h| h.mpix));
    if mpix_handle {
        // gpumpi's extension handles (MPIX_Stream) have no MPICH int form: the call is refused
        // through MPI_COMM_WORLD's error handler with a message naming it.
        body = format!("unavailable(\"{name}\")");
    } else if !implemented {
        // The core answers MPI_ERR_UNSUPPORTED_OPERATION through the error handler, naming the
        // function; its arguments are not read.
        let zeros: Vec<&str> = f
            .proto
            .params
            .iter()
            .map(|_| "std::mem::zeroed()")
            .collect();
        let call = format!("(core().{name})({})", zeros.join(", "));
        body = if err_code {
            format!("err_from_std({call})")
        } else {
            call
        };
    } else {
        let mut fwd = Fwd::default();
        // The communicator is translated first: `comm_size` lengths use it.
        let comm_first: Vec<&CParam> = f
            .proto
            .params
            .iter()
            .filter(|p| p.name == "comm" && p.ty.by_value())
            .chain(
                f.proto
                    .params
                    .iter()
                    .filter(|p| !(p.name == "comm" && p.ty.by_value())),
            )
            .collect();
        let mut args: BTreeMap<String, String> = BTreeMap::new();
        for p in comm_first {
            let before = fwd.args.len();
            param(abi, m, f, p, &mut fwd)?;
            let a = fwd.args.remove(before);
            args.insert(p.name.clone(), a);
        }
        let ordered: Vec<String> = f
            .proto
            .params
            .iter()
            .map(|p| args[&p.name].clone())
            .collect();
        writeln!(body, "let core = core();").unwrap();
        for l in &fwd.pre {
            writeln!(body, "        {l}").unwrap();
        }
        let call = format!("(core.{name})({})", ordered.join(", "));
        if err_code {
            writeln!(
                body,
                "        #[allow(unused_mut)]\n        let mut rc = err_from_std({call});"
            )
            .unwrap();
            for l in &fwd.post {
                writeln!(body, "        {l}").unwrap();
            }
            write!(body, "        rc").unwrap();
        } else if fwd.post.is_empty() {
            write!(body, "        {call}").unwrap();
        } else {
            return Err(format!(
                "{name}: outputs of a function that returns no error code"
            ));
        }
    }
    let guard = if err_code {
        "guard_rc(|| ".to_string()
    } else if f.proto.ret == "void" {
        "guard_val((), || ".to_string()
    } else {
        "guard_val(Default::default(), || ".to_string()
    };
    let pname = if f.has_pmpi() {
        format!("P{name}")
    } else {
        name.to_string()
    };
    let mut o = String::new();
    writeln!(
        o,
        "#[no_mangle]\npub unsafe extern \"C\" fn {pname}({}){ret} {{\n    {guard}{{\n        {body}\n    }})\n}}",
        params.join(", ")
    )
    .unwrap();
    if f.has_pmpi() {
        let args: Vec<String> = f.proto.params.iter().map(|p| rust_ident(&p.name)).collect();
        writeln!(
            o,
            "#[no_mangle]\npub unsafe extern \"C\" fn {name}({}){ret} {{\n    {pname}({})\n}}",
            params.join(", "),
            args.join(", ")
        )
        .unwrap();
    }
    Ok(o)
}

fn identity(abi: &Abi, f: &Function) -> String {
    let p = &f.proto.params[0];
    let ty = rust_ty(abi, &p.ty, true);
    let ret = ret_ty(abi, &f.proto.ret, true);
    let n = rust_ident(&p.name);
    let mut o = String::new();
    for name in [format!("P{}", f.name()), f.name().to_string()] {
        writeln!(
            o,
            "#[no_mangle]\npub unsafe extern \"C\" fn {name}({n}: {ty}){ret} {{\n    {n}\n}}"
        )
        .unwrap();
    }
    o
}

/// The MPI functions a source text exports itself (`pub unsafe extern "C" fn PMPI_X(` or
/// `MPIX_X(`), as standard-ABI names: mpich/src/hand.rs, which the generator leaves out.
pub fn scan_hand_written(abi: &Abi, src: &str) -> BTreeSet<String> {
    src.lines()
        .filter_map(|l| l.trim_start().strip_prefix("pub unsafe extern \"C\" fn "))
        .filter_map(|rest| rest.split('(').next())
        .map(|n| n.strip_prefix('P').unwrap_or(n).to_string())
        .filter(|n| abi.function(n).is_some())
        .collect()
}

/// The generated Rust source of libmpi.so.12's translation tables and forwarders.
/// `implemented`: the functions gpumpi implements; `hand`: those `mpich/src` writes itself.
pub fn rust_mpich(
    abi: &Abi,
    m: &Mpich,
    implemented: &BTreeSet<String>,
    hand: &BTreeSet<String>,
) -> Result<String, String> {
    let mut o = String::new();
    o.push_str("// Generated by mpich/build.rs from mpi-abi/data (mpich.txt and the standard ABI). Do not edit.\n");

    o.push_str("use std::os::raw::{c_char, c_int, c_void};\nuse crate::rt::*;\n\n");
    emit_kinds(&mut o, abi, m)?;
    emit_classes(&mut o, abi, m)?;
    emit_core(&mut o, abi);
    let ident = identity_conversions(abi);
    let mut errors = Vec::new();
    o.push_str("/// Every exported function: (name, implemented by gpumpi).\npub const FUNCTIONS: &[(&str, bool)] = &[\n");
    for f in &abi.functions {
        let imp = implemented.contains(f.name()) || ident.contains(f.name());
        writeln!(o, "    (\"{}\", {imp}),", f.name()).unwrap();
    }
    o.push_str("];\n\n");
    for f in &abi.functions {
        if hand.contains(f.name()) {
            continue;
        }
        if ident.contains(f.name()) {
            o.push_str(&identity(abi, f));
            continue;
        }
        match forwarder(abi, m, f, implemented.contains(f.name())) {
            Ok(s) => o.push_str(&s),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(o)
    } else {
        Err(format!(
            "functions the MPICH-ABI generator cannot forward (write them in mpich/src):\n  {}",
            errors.join("\n  ")
        ))
    }
}
