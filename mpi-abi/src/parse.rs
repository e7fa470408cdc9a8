//! Parser for the line-based data files. Errors name the file and line.

use crate::ctype::parse_param;
use crate::*;

/// Lines without blank lines and whole-line `#` comments, with their line numbers.
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

/// Split a trailing `# note` off a line.
fn split_note(line: &str) -> (&str, Option<String>) {
    match line.find('#') {
        Some(i) => (line[..i].trim(), Some(line[i + 1..].trim().to_string())),
        None => (line, None),
    }
}

fn parse_int(s: &str) -> Result<i64, String> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s),
    };
    let v = if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        i64::from_str_radix(h, 16)
    } else {
        body.parse::<i64>()
    }
    .map_err(|_| format!("bad integer `{s}`"))?;
    Ok(if neg { -v } else { v })
}

pub fn parse_all(
    handles: &str,
    constants: &str,
    typedefs: &str,
    functions: &str,
) -> Result<Abi, String> {
    let handles = parse_handles(handles).map_err(|e| format!("handles.txt:{e}"))?;
    let sections = parse_constants(constants).map_err(|e| format!("constants.txt:{e}"))?;
    let (scalars, structs, callbacks) =
        parse_typedefs(typedefs).map_err(|e| format!("typedefs.txt:{e}"))?;
    let functions = parse_functions(functions).map_err(|e| format!("functions.txt:{e}"))?;
    let abi = Abi {
        handles,
        sections,
        scalars,
        structs,
        callbacks,
        functions,
    };
    check(&abi)?;
    Ok(abi)
}

fn parse_handles(text: &str) -> Result<Vec<HandleType>, String> {
    let mut out: Vec<HandleType> = Vec::new();
    for (n, line) in lines(text) {
        let toks: Vec<&str> = line.split_whitespace().collect();
        if toks[0] == "@handle" {
            if toks.len() < 3 {
                return Err(format!(
                    "{n}: `@handle <type> <struct> [tool] [mpix] [c2f <Stem>]`"
                ));
            }
            let mut h = HandleType {
                name: toks[1].into(),
                abi_struct: toks[2].into(),
                tool: false,
                mpix: false,
                conv_stem: None,
                values: vec![],
            };
            let mut i = 3;
            while i < toks.len() {
                match toks[i] {
                    "tool" => h.tool = true,
                    "mpix" => h.mpix = true,
                    "c2f" if i + 1 < toks.len() => {
                        h.conv_stem = Some(toks[i + 1].into());
                        i += 1;
                    }
                    t => return Err(format!("{n}: unknown handle attribute `{t}`")),
                }
                i += 1;
            }
            out.push(h);
            continue;
        }
        let h = out
            .last_mut()
            .ok_or_else(|| format!("{n}: value before any @handle"))?;
        let value = match toks.as_slice() {
            [_, "=", other] => HandleValueKind::Alias(other.to_string()),
            [_, v] => HandleValueKind::Value(parse_int(v).map_err(|e| format!("{n}: {e}"))? as u64),
            _ => return Err(format!("{n}: expected `NAME value` or `NAME = OTHER`")),
        };
        h.values.push(HandleValue {
            name: toks[0].into(),
            value,
        });
    }
    Ok(out)
}

fn parse_constants(text: &str) -> Result<Vec<Section>, String> {
    let mut out: Vec<Section> = Vec::new();
    for (n, line) in lines(text) {
        if let Some(rest) = line.strip_prefix("@section") {
            let mut it = rest.split_whitespace();
            let (id, kind) = match (it.next(), it.next()) {
                (Some(id), Some(kind)) => (id, kind),
                _ => return Err(format!("{n}: `@section <id> <kind> <title>`")),
            };
            let kind = match kind {
                "enum" => SectionKind::Enum,
                "define" => SectionKind::Define,
                "ext-define" => SectionKind::ExtDefine,
                k if k.starts_with("enum:") => SectionKind::NamedEnum(k[5..].to_string()),
                k => return Err(format!("{n}: unknown section kind `{k}`")),
            };
            let title = it.collect::<Vec<_>>().join(" ");
            out.push(Section {
                id: id.into(),
                kind,
                title,
                constants: vec![],
            });
            continue;
        }
        let sec = out
            .last_mut()
            .ok_or_else(|| format!("{n}: constant before any @section"))?;
        let (body, note) = split_note(line);
        let toks: Vec<&str> = body.split_whitespace().collect();
        if toks.len() != 3 {
            return Err(format!("{n}: expected `NAME c-type value`"));
        }
        let value = parse_int(toks[2]).map_err(|e| format!("{n}: {e}"))?;
        if matches!(sec.kind, SectionKind::Enum) && toks[1] != "int" {
            return Err(format!("{n}: enum members are int"));
        }
        sec.constants.push(Constant {
            name: toks[0].into(),
            ctype: toks[1].into(),
            value,
            text: toks[2].into(),
            note,
        });
    }
    Ok(out)
}

/// Parse `ret name(params)`.
pub fn parse_proto(text: &str) -> Result<Proto, String> {
    let open = text.find('(').ok_or("missing (")?;
    let close = text.rfind(')').ok_or("missing )")?;
    let head: Vec<&str> = text[..open].split_whitespace().collect();
    if head.len() < 2 {
        return Err(format!("cannot find return type and name in `{text}`"));
    }
    let name = head[head.len() - 1].to_string();
    let ret = head[..head.len() - 1].join(" ");
    let inner = text[open + 1..close].trim();
    let mut params = Vec::new();
    let mut variadic = false;
    if inner != "void" && !inner.is_empty() {
        for p in inner.split(',') {
            let p = p.trim();
            if p == "..." {
                variadic = true;
            } else if variadic {
                return Err("parameter after ...".into());
            } else {
                params.push(parse_param(p)?);
            }
        }
    }
    Ok(Proto {
        ret,
        name,
        params,
        variadic,
    })
}

type Typedefs = (Vec<Scalar>, Vec<Struct>, Vec<Callback>);

fn parse_typedefs(text: &str) -> Result<Typedefs, String> {
    let (mut scalars, mut structs, mut callbacks) = (vec![], vec![], vec![]);
    for (n, line) in lines(text) {
        let (kw, rest) = line
            .split_once(char::is_whitespace)
            .ok_or_else(|| format!("{n}: empty"))?;
        let rest = rest.trim();
        match kw {
            "scalar" | "ext-scalar" => {
                let t: Vec<&str> = rest.split_whitespace().collect();
                if t.len() != 3 {
                    return Err(format!("{n}: `scalar <name> <c-def> <rust>`"));
                }
                scalars.push(Scalar {
                    name: t[0].into(),
                    c_def: t[1].into(),
                    rust: t[2].into(),
                    ext: kw == "ext-scalar",
                });
            }
            "struct" => {
                let (name, fields) = rest
                    .split_once(char::is_whitespace)
                    .ok_or_else(|| format!("{n}: struct"))?;
                let mut fs = vec![];
                for f in fields.split(';').map(str::trim).filter(|f| !f.is_empty()) {
                    let p = parse_param(f).map_err(|e| format!("{n}: {e}"))?;
                    if p.ty.ptrs != 0 || p.ty.arrays.len() > 1 {
                        return Err(format!("{n}: struct fields are scalars or 1-d arrays"));
                    }
                    let len = match p.ty.arrays.first() {
                        Some(Some(l)) => Some(*l),
                        Some(None) => return Err(format!("{n}: unsized struct array")),
                        None => None,
                    };
                    fs.push((p.ty.base.clone(), p.name.clone(), len));
                }
                structs.push(Struct {
                    name: name.into(),
                    fields: fs,
                });
            }
            "callback" | "mpix-callback" => {
                let proto = parse_proto(rest).map_err(|e| format!("{n}: {e}"))?;
                callbacks.push(Callback {
                    name: proto.name.clone(),
                    proto: Some(proto),
                    alias_of: None,
                    mpix: kw == "mpix-callback",
                });
            }
            "alias" => {
                let t: Vec<&str> = rest.split_whitespace().collect();
                if t.len() != 2 {
                    return Err(format!("{n}: `alias <new> <callback>`"));
                }
                callbacks.push(Callback {
                    name: t[0].into(),
                    proto: None,
                    alias_of: Some(t[1].into()),
                    mpix: false,
                });
            }
            k => return Err(format!("{n}: unknown typedef kind `{k}`")),
        }
    }
    Ok((scalars, structs, callbacks))
}

fn parse_functions(text: &str) -> Result<Vec<Function>, String> {
    let mut out = Vec::new();
    let mut group = None;
    for (n, line) in lines(text) {
        if let Some(g) = line.strip_prefix("@group") {
            group = Some(match g.trim() {
                "mpi" => Group::Mpi,
                "tool" => Group::Tool,
                "ext" => Group::Ext,
                "mpix" => Group::Mpix,
                g => return Err(format!("{n}: unknown group `{g}`")),
            });
            continue;
        }
        let group = group.ok_or_else(|| format!("{n}: function before any @group"))?;
        let (body, note) = split_note(line);
        let (body, int_value) = match body.strip_suffix("@value") {
            Some(b) => (b.trim(), true),
            None => (body, false),
        };
        let proto = parse_proto(body).map_err(|e| format!("{n}: {e}"))?;
        if int_value && proto.ret != "int" {
            return Err(format!("{n}: @value only applies to int results"));
        }
        out.push(Function {
            proto,
            group,
            int_value,
            note,
        });
    }
    Ok(out)
}

/// Consistency checks across files: unique names, known types, sorted groups.
fn check(abi: &Abi) -> Result<(), String> {
    let mut names = std::collections::HashSet::new();
    let all_names = abi
        .handles
        .iter()
        .flat_map(|h| h.values.iter().map(|v| v.name.as_str()))
        .chain(abi.constants().map(|c| c.name.as_str()))
        .chain(abi.functions.iter().map(|f| f.name()));
    for n in all_names {
        if !names.insert(n) {
            return Err(format!("duplicate name {n}"));
        }
    }
    let known = |t: &str| {
        matches!(t, "void" | "int" | "char" | "double")
            || abi.handle(t).is_some()
            || abi.scalar(t).is_some()
            || abi.callback(t).is_some()
            || abi.structs.iter().any(|s| s.name == t)
            || abi
                .sections
                .iter()
                .any(|s| s.kind == SectionKind::NamedEnum(t.to_string()))
    };
    let protos = abi
        .functions
        .iter()
        .map(|f| &f.proto)
        .chain(abi.callbacks.iter().filter_map(|c| c.proto.as_ref()));
    for p in protos {
        if !known(&p.ret) {
            return Err(format!("{}: unknown return type {}", p.name, p.ret));
        }
        for q in &p.params {
            if !known(&q.ty.base) {
                return Err(format!("{}: unknown parameter type {}", p.name, q.ty.base));
            }
        }
    }
    for c in abi.constants() {
        let base = c.ctype.trim_end_matches('*');
        if !known(base) {
            return Err(format!("{}: unknown constant type {}", c.name, c.ctype));
        }
    }
    for cb in &abi.callbacks {
        if let Some(a) = &cb.alias_of {
            if abi
                .callbacks
                .iter()
                .all(|c| &c.name != a || c.proto.is_none())
            {
                return Err(format!("{}: alias of unknown callback {a}", cb.name));
            }
        }
    }
    Ok(())
}
