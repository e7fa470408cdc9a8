//! The check of every kernel-shared struct and `#define` against kernels/*.cuh: it gathers the
//! mirrors of every module that shares a struct with the kernels, so it sits above them all.

use super::Layout;

fn layouts() -> Vec<Layout> {
    use crate::gpu::kernels::{HostAr, Seg};
    use crate::gpu::layout::{PackDesc, Run};
    let mut v: Vec<Layout> = vec![
        layout!(
            "Seg",
            Seg,
            "dst" => dst, "src" => src, "len" => len,
        ),
        layout!(
            "HostAr",
            HostAr,
            "in" => input, "out" => out, "elems" => elems, "qe" => qe, "base" => base,
            "rounds" => rounds, "slot" => slot, "reg" => reg, "n" => n, "me" => me,
            "depth" => depth,
        ),
        layout!(
            "PackRun",
            Run,
            "disp" => disp, "len" => len, "poff" => poff,
        ),
        layout!(
            "PackDesc",
            PackDesc,
            "mem" => mem, "packed" => packed, "ext" => ext, "esize" => esize,
            "items" => items, "nruns" => nruns, "cpb" => cpb, "chunk" => chunk,
            "len" => len, "first" => first, "stride" => stride, "blen" => blen,
            "runs" => runs, "wshift" => wshift, "group" => group, "unpack" => unpack,
            "pad" => pad,
        ),
    ];
    v.extend(crate::gpu::kernels::layouts());
    v.extend(crate::gpu::resident::kernel::layouts());
    v.extend(crate::gpu::enqueue_kernel::layouts());
    v
}

/// `#define`s of the headers with their Rust values.
fn constants() -> Vec<(&'static str, u64)> {
    let mut v = vec![("GPUMPI_MAXP", crate::gpu::kernels::MAXP as u64)];
    v.extend(crate::gpu::resident::kernel::constants());
    v.extend(crate::gpu::hostmem::constants());
    v.extend(crate::gpu::enqueue_kernel::constants());
    v
}

/// Every `struct Name { ... };` at the start of a line (the kernel headers' plain structs).
fn structs(src: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = src;
    while let Some(i) = rest.find("\nstruct ") {
        rest = &rest[i + 1..];
        let Some(open) = rest.find('{') else { break };
        let head = &rest["struct ".len()..open];
        let name = head.trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            continue;
        }
        let Some(close) = rest.find("\n};") else {
            break;
        };
        out.push((name.to_string(), rest[..close + 3].to_string()));
        rest = &rest[close + 3..];
    }
    out
}

fn headers() -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cuh"))
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn kernel_structs_match_their_rust_mirrors() {
    let src = headers();
    let defs = structs(&src);
    let layouts = layouts();
    let mut c = String::from("#include <stdint.h>\n#include <stddef.h>\n#include <stdio.h>\n");
    for (name, _, _) in &layouts {
        assert!(
            defs.iter().any(|(n, _)| n == name),
            "struct {name} not found in kernels/*.cuh"
        );
    }
    let mut prog = String::from("int main(void) {\n");
    for (name, _) in constants() {
        prog += &format!("printf(\"%llu\\n\", (unsigned long long)({name}));\n");
    }
    for (name, _) in &defs {
        c += &format!("typedef struct {name} {name};\n");
    }
    for line in src.lines() {
        if let Some(d) = line.strip_prefix("#define ") {
            let mut it = d.split_whitespace();
            if let (Some(k), Some(_)) = (it.next(), it.next()) {
                if !k.contains('(') {
                    c += line;
                    c += "\n";
                }
            }
        }
    }
    for (_, body) in &defs {
        c += body;
        c += "\n";
    }
    for (name, _, fields) in &layouts {
        prog += &format!("printf(\"%zu\\n\", sizeof({name}));\n");
        for (f, _) in fields {
            prog += &format!("printf(\"%zu\\n\", offsetof({name}, {f}));\n");
        }
    }
    prog += "return 0;\n}\n";
    c += &prog;
    let dir = std::env::temp_dir().join(format!("gpumpi-kabi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cfile, exe) = (dir.join("kabi.c"), dir.join("kabi"));
    std::fs::write(&cfile, &c).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = std::process::Command::new(&cc)
        .arg("-o")
        .arg(&exe)
        .arg(&cfile)
        .output()
        .unwrap_or_else(|e| panic!("the host C compiler ({cc}) is needed: {e}"));
    assert!(
        out.status.success(),
        "{cc} failed on the kernel headers' structs:\n{}\n{c}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = std::process::Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8(run.stdout).unwrap();
    let mut got = text.lines().map(|l| l.parse::<u64>().unwrap());
    for (name, value) in constants() {
        assert_eq!(got.next(), Some(value), "#define {name}: C against Rust");
    }
    for (name, size, fields) in &layouts {
        assert_eq!(
            got.next(),
            Some(*size as u64),
            "sizeof({name}): C against Rust"
        );
        for (f, off) in fields {
            assert_eq!(
                got.next(),
                Some(*off as u64),
                "offsetof({name}, {f}): C against Rust"
            );
        }
    }
}
