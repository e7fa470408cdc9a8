//! The module layering of `src/`, checked from the source text.
//!
//! Every `crate::...` path (in `use` trees and inline) and every `super::...` path of a file is
//! an edge from the file's module to the module it names. Two rules:
//! - **Layers** (`tests/layering/layers.txt`): a top-level module (`abi`, `dispatch`, `engine`,
//!   ...) may use the modules its line lists and, through them, whatever those may use; any
//!   other edge between top-level modules points the wrong way.
//! - **No cycles**: no edge inside a cycle of file modules (`runtime::request`, `gpu::stage`, ...).
//!
//! `tests/layering/allow.txt` lists the edges of today's code that break a rule. A new one
//! fails the test, naming the edge and the file; a listed edge that is gone fails it too (delete
//! its line), so the list only shrinks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = String;

/// An edge between file modules, with where it was first seen.
#[derive(Clone)]
struct Seen {
    file: String,
    line: usize,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The module path of a source file under `src/` ("" for lib.rs), or None for binaries.
fn module_of(rel: &Path) -> Option<Module> {
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.first().map(String::as_str) == Some("bin") {
        return None;
    }
    let mut segs: Vec<String> = parts.clone();
    let last = segs.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if stem != "mod" && !(segs.is_empty() && stem == "lib") {
        segs.push(stem.to_string());
    }
    Some(segs.join("::"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The source with comments, string and character literals blanked (newlines kept), so that
/// paths and braces are only those of code.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |c: u8| if c == b'\n' { b'\n' } else { b' ' };
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    out.extend([b' ', b' ']);
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    out.extend([b' ', b' ']);
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == b'r'
            && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            // Raw string r"..." / r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == b'"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&b'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &x in &b[i..j.min(b.len())] {
                out.push(blank(x));
            }
            i = j;
        } else if c == b'"' {
            out.push(b' ');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    out.push(b' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push(b' ');
            i += 1;
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\''), else a lifetime.
            let lit = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&x| x == b'\'')
                    .map(|p| i + 3 + p)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 3)
            } else {
                None
            };
            match lit {
                Some(end) => {
                    out.extend(std::iter::repeat_n(b' ', end - i));
                    i = end;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// Expand a `use` tree (`a::{b, c::{d, e}}`) into its paths.
fn expand(tree: &str) -> Vec<String> {
    // Drop renames (`x as y`), then whitespace.
    let words: Vec<&str> = tree.split_whitespace().collect();
    let mut kept = Vec::new();
    let mut i = 0;
    while i < words.len() {
        if words[i] == "as" && i + 1 < words.len() {
            // `y,` or `y}` keep their punctuation.
            kept.push(words[i + 1].trim_start_matches(|c: char| c.is_alphanumeric() || c == '_'));
            i += 2;
        } else {
            kept.push(words[i]);
            i += 1;
        }
    }
    let t: String = kept.concat();
    fn go(prefix: &str, t: &str, out: &mut Vec<String>) {
        // Split t at top-level commas.
        let mut depth = 0;
        let mut start = 0;
        let bytes = t.as_bytes();
        let mut items = Vec::new();
        for (i, &c) in bytes.iter().enumerate() {
            match c {
                b'{' => depth += 1,
                b'}' => depth -= 1,
                b',' if depth == 0 => {
                    items.push(&t[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        items.push(&t[start..]);
        for item in items {
            if item.is_empty() {
                continue;
            }
            let join = |p: &str| {
                if prefix.is_empty() {
                    p.to_string()
                } else {
                    format!("{prefix}::{p}")
                }
            };
            if let Some(open) = item.find('{') {
                let head = item[..open].trim_end_matches("::");
                let inner = &item[open + 1..item.len() - 1];
                go(&join(head), inner, out);
            } else {
                out.push(join(item));
            }
        }
    }
    let mut out = Vec::new();
    go("", &t, &mut out);
    out
}

/// The paths a file names, each with its line and the inline-module depth it appears at.
fn paths(code: &str) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let line_at = |pos: usize| code[..pos].bytes().filter(|&c| c == b'\n').count() + 1;
    // Inline module depth at each position: `mod name {` opens one.
    let mut depth_at = vec![0usize; bytes.len() + 1];
    {
        let mut brace = 0i64;
        let mut mods: Vec<i64> = Vec::new();
        let mut pending_mod = false;
        let mut i = 0;
        while i < bytes.len() {
            let c = bytes[i];
            if c == b'm'
                && code[i..].starts_with("mod ")
                && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'))
            {
                // `mod name {` (inline) or `mod name;` (a file).
                let rest = &code[i + 4..];
                let end = rest.find(['{', ';']).unwrap_or(0);
                pending_mod = rest[..end]
                    .trim()
                    .chars()
                    .all(|ch| ch.is_alphanumeric() || ch == '_')
                    && rest[end..].starts_with('{');
            }
            if c == b'{' {
                brace += 1;
                if pending_mod {
                    mods.push(brace);
                    pending_mod = false;
                }
            } else if c == b'}' {
                if mods.last() == Some(&brace) {
                    mods.pop();
                }
                brace -= 1;
            }
            depth_at[i] = mods.len();
            i += 1;
        }
    }
    // `use` items (their trees), then inline paths outside them.
    let mut covered = vec![false; bytes.len()];
    let mut i = 0;
    while let Some(p) = code[i..].find("use ") {
        let at = i + p;
        i = at + 4;
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        let Some(end) = code[at..].find(';') else {
            break;
        };
        let tree = &code[at + 4..at + end];
        if tree.contains('(') || tree.contains('=') {
            continue;
        }
        for path in expand(tree) {
            out.push((path, line_at(at), depth_at[at]));
        }
        covered[at..at + end].iter_mut().for_each(|c| *c = true);
        i = at + end;
    }
    for key in ["crate::", "super::"] {
        let mut i = 0;
        while let Some(p) = code[i..].find(key) {
            let at = i + p;
            i = at + key.len();
            if covered[at]
                || (at > 0
                    && (bytes[at - 1].is_ascii_alphanumeric()
                        || bytes[at - 1] == b'_'
                        || bytes[at - 1] == b'$'
                        || bytes[at - 1] == b':'))
            {
                continue;
            }
            let end = code[at..]
                .find(|ch: char| !(ch.is_alphanumeric() || ch == '_' || ch == ':'))
                .map_or(code.len(), |e| at + e);
            out.push((
                code[at..end].trim_end_matches(':').to_string(),
                line_at(at),
                depth_at[at],
            ));
        }
    }
    out
}

/// The file module a path names: its longest prefix that is one, from `from` (at `depth`
/// inline modules inside it). None: the crate root, itself, or not a path into the crate.
fn resolve(
    path: &str,
    from: &str,
    depth: usize,
    modules: &BTreeSet<Module>,
    macros: &BTreeMap<String, Module>,
) -> Option<Module> {
    let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<&str> = if from.is_empty() {
        Vec::new()
    } else {
        from.split("::").collect()
    };
    let mut k = 0;
    match segs.first() {
        Some(&"crate") => {
            base.clear();
            k = 1;
        }
        Some(&"super") => {
            let mut ups = 0usize;
            while segs.get(k) == Some(&"super") {
                ups += 1;
                k += 1;
            }
            // Inside an inline module, the first `super` leaves it, not the file.
            let ups = ups.saturating_sub(depth);
            for _ in 0..ups {
                base.pop()?;
            }
        }
        _ => return None,
    }
    let rest = &segs[k..];
    if base.is_empty() {
        if let Some(m) = rest.first().and_then(|n| macros.get(*n)) {
            return Some(m.clone());
        }
    }
    let mut best = None;
    let mut cur = base.clone();
    if modules.contains(&cur.join("::")) && !cur.is_empty() {
        best = Some(cur.join("::"));
    }
    for s in rest {
        cur.push(s);
        let m = cur.join("::");
        if modules.contains(&m) {
            best = Some(m);
        }
    }
    best.filter(|m| m != from)
}

fn top(m: &str) -> &str {
    m.split("::").next().unwrap()
}

/// Strongly connected components (Tarjan), as a map module -> component number, only for
/// components of more than one module.
fn cycles(edges: &BTreeMap<(Module, Module), Seen>) -> BTreeMap<Module, usize> {
    let mut adj: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        adj.entry(a).or_default().push(b);
        adj.entry(b).or_default();
    }
    struct St<'a> {
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        on: BTreeSet<&'a str>,
        stack: Vec<&'a str>,
        next: usize,
        comps: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(v: &'a str, adj: &BTreeMap<&'a str, Vec<&'a str>>, s: &mut St<'a>) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        for &w in &adj[v] {
            if !s.index.contains_key(w) {
                visit(w, adj, s);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(w);
                comp.push(w);
                if w == v {
                    break;
                }
            }
            s.comps.push(comp);
        }
    }
    let mut s = St {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        on: BTreeSet::new(),
        stack: Vec::new(),
        next: 0,
        comps: Vec::new(),
    };
    let nodes: Vec<&str> = adj.keys().copied().collect();
    for v in nodes {
        if !s.index.contains_key(v) {
            visit(v, &adj, &mut s);
        }
    }
    let mut out = BTreeMap::new();
    for (i, c) in s.comps.iter().enumerate() {
        if c.len() > 1 {
            for m in c {
                out.insert(m.to_string(), i);
            }
        }
    }
    out
}

/// The layer table: top-level module -> the modules it may use directly (closure taken later).
fn layers() -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(root().join("tests/layering/layers.txt")).unwrap();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap().trim();
        if line.is_empty() {
            continue;
        }
        let (m, uses) = line.split_once(':').expect("layers.txt: `module: uses...`");
        out.entry(m.trim().to_string())
            .or_default()
            .extend(uses.split_whitespace().map(str::to_string));
    }
    out
}

/// Everything `m` may use: its own line, `*`'s line, and transitively what those may use.
fn reach(m: &str, table: &BTreeMap<String, BTreeSet<String>>, star: bool) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![m.to_string()];
    while let Some(x) = todo.pop() {
        for key in [x.as_str(), if star { "*" } else { x.as_str() }] {
            for y in table.get(key).into_iter().flatten() {
                if seen.insert(y.clone()) {
                    todo.push(y.clone());
                }
            }
        }
    }
    seen
}

/// Every edge between file modules of src/ (lib.rs and src/bin excluded).
fn graph() -> BTreeMap<(Module, Module), Seen> {
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut sources = Vec::new();
    let mut modules = BTreeSet::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        if let Some(m) = module_of(rel) {
            modules.insert(m.clone());
            sources.push((m, rel.to_path_buf(), std::fs::read_to_string(f).unwrap()));
        }
    }
    // `#[macro_export]` macros live at the crate root; attribute them to their file.
    let mut macros = BTreeMap::new();
    for (m, _, text) in &sources {
        let code = code_only(text);
        let mut exported = false;
        for line in code.lines() {
            if line.contains("#[macro_export]") {
                exported = true;
            } else if let Some(rest) = line.trim().strip_prefix("macro_rules!") {
                if exported {
                    let name = rest.trim().trim_end_matches('{').trim();
                    macros.insert(name.to_string(), m.clone());
                }
                exported = false;
            }
        }
    }
    let mut edges: BTreeMap<(Module, Module), Seen> = BTreeMap::new();
    for (m, rel, text) in &sources {
        if m.is_empty() {
            continue;
        }
        let code = code_only(text);
        for (path, line, depth) in paths(&code) {
            if let Some(to) = resolve(&path, m, depth, &modules, &macros) {
                if to.is_empty() {
                    continue;
                }
                edges.entry((m.clone(), to)).or_insert(Seen {
                    file: format!("src/{}", rel.display()),
                    line,
                });
            }
        }
    }
    edges
}

#[test]
fn the_parser_reads_use_trees_and_inline_paths() {
    assert_eq!(
        expand("crate::{abi::x, gpu::{a, b as c}}"),
        vec!["crate::abi::x", "crate::gpu::a", "crate::gpu::b"]
    );
    let code = code_only(
        "use crate::a::b; // crate::c::d\nfn f() { let s = \"crate::e\"; crate::f::g(); }\nmod tests {\n use super::*;\n}\n",
    );
    let p = paths(&code);
    assert!(p.contains(&("crate::a::b".into(), 1, 0)), "{p:?}");
    assert!(p.contains(&("crate::f::g".into(), 2, 0)), "{p:?}");
    assert!(p.contains(&("super::*".into(), 4, 1)), "{p:?}");
    assert!(
        !p.iter().any(|x| x.0.contains("::c") || x.0.contains("::e")),
        "{p:?}"
    );
}

#[test]
fn cycles_and_the_layer_table_are_read_right() {
    let mut e = BTreeMap::new();
    for (a, b) in [
        ("x::a", "x::b"),
        ("x::b", "x::a"),
        ("x::b", "y"),
        ("y", "z"),
    ] {
        let seen = Seen {
            file: "f".into(),
            line: 1,
        };
        e.insert((a.to_string(), b.to_string()), seen);
    }
    let c = cycles(&e);
    assert!(
        c.contains_key("x::a") && c.get("x::a") == c.get("x::b"),
        "{c:?}"
    );
    assert!(!c.contains_key("y") && !c.contains_key("z"), "{c:?}");
    let mut t: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    t.entry("x".into()).or_default().insert("y".into());
    t.entry("y".into()).or_default().insert("z".into());
    t.entry("*".into()).or_default().insert("w".into());
    assert!(reach("x", &t, true).contains("z"), "transitive");
    assert!(reach("z", &t, true).contains("w"), "`*` for everyone");
    assert!(!reach("z", &t, true).contains("x"), "upward");
}

#[test]
fn layering_and_cycles_match_the_allowlist() {
    let edges = graph();
    let table = layers();
    // The table itself must be a strict order.
    for m in table.keys().filter(|m| *m != "*") {
        assert!(
            !reach(m, &table, false).contains(m),
            "tests/layering/layers.txt: `{m}` reaches itself (the table has a cycle)"
        );
    }
    let cyc = cycles(&edges);
    let mut bad: BTreeMap<(Module, Module), (String, Seen)> = BTreeMap::new();
    for ((a, b), seen) in &edges {
        let (ta, tb) = (top(a), top(b));
        if ta != tb && !reach(ta, &table, true).contains(tb) {
            bad.insert(
                (a.clone(), b.clone()),
                (
                    format!("`{ta}` may not use `{tb}` (tests/layering/layers.txt)"),
                    seen.clone(),
                ),
            );
        } else if cyc.contains_key(a) && cyc.get(a) == cyc.get(b) {
            bad.insert(
                (a.clone(), b.clone()),
                (
                    "the edge is part of an import cycle".to_string(),
                    seen.clone(),
                ),
            );
        }
    }
    let allow_text = std::fs::read_to_string(root().join("tests/layering/allow.txt")).unwrap();
    let mut allowed = BTreeSet::new();
    for line in allow_text.lines() {
        let line = line.split('#').next().unwrap().trim();
        if line.is_empty() {
            continue;
        }
        let (a, b) = line
            .split_once("->")
            .expect("tests/layering/allow.txt: `from -> to`");
        allowed.insert((a.trim().to_string(), b.trim().to_string()));
    }
    let mut msgs = Vec::new();
    for ((a, b), (why, seen)) in &bad {
        if !allowed.contains(&(a.clone(), b.clone())) {
            msgs.push(format!(
                "new edge {a} -> {b} ({}:{}): {why}",
                seen.file, seen.line
            ));
        }
    }
    for (a, b) in &allowed {
        if !bad.contains_key(&(a.clone(), b.clone())) {
            msgs.push(format!(
                "tests/layering/allow.txt lists {a} -> {b}, which no longer breaks a rule: delete the line"
            ));
        }
    }
    if std::env::var_os("LAYERING_PRINT").is_some() {
        for ((a, b), (why, seen)) in &bad {
            println!("{a} -> {b}    # {}:{} {why}", seen.file, seen.line);
        }
    }
    assert!(msgs.is_empty(), "module layering:\n  {}", msgs.join("\n  "));
}
