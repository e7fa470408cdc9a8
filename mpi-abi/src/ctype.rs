//! C declarations as they appear in the data (`const MPI_Count recvcounts[]`, `char ***argv`,
//! `int ranges[][3]`) and their Rust spelling.

use crate::Abi;

/// A C type as used in a parameter: `[const] base *...* name [dims]...`.
#[derive(Debug, Clone, PartialEq)]
pub struct CType {
    /// `const` on the base type (the innermost pointee).
    pub is_const: bool,
    pub base: String,
    /// Number of `*`.
    pub ptrs: usize,
    /// Array suffixes in order: `[]` is None, `[3]` is Some(3).
    pub arrays: Vec<Option<usize>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CParam {
    pub name: String,
    pub ty: CType,
}

/// Rust keywords that can appear as C parameter names get a trailing `_`.
const RUST_KEYWORDS: &[&str] = &[
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate",
    "do", "dyn", "else", "enum", "extern", "false", "final", "fn", "for", "if", "impl", "in",
    "let", "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref",
    "return", "self", "Self", "static", "struct", "super", "trait", "true", "try", "type",
    "typeof", "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
];

pub fn rust_ident(name: &str) -> String {
    if RUST_KEYWORDS.contains(&name) {
        format!("{name}_")
    } else {
        name.to_string()
    }
}

/// Parse one parameter declaration.
pub fn parse_param(text: &str) -> Result<CParam, String> {
    let mut s = text.trim().to_string();
    let mut arrays = Vec::new();
    while s.ends_with(']') {
        let open = s
            .rfind('[')
            .ok_or_else(|| format!("unbalanced [] in `{text}`"))?;
        let inner = s[open + 1..s.len() - 1].trim();
        let dim = if inner.is_empty() {
            None
        } else {
            Some(
                inner
                    .parse::<usize>()
                    .map_err(|_| format!("bad array size in `{text}`"))?,
            )
        };
        arrays.insert(0, dim);
        s.truncate(open);
        s = s.trim_end().to_string();
    }
    let name_start = s
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map(|i| i + 1)
        .ok_or_else(|| format!("parameter without a name: `{text}`"))?;
    let name = s[name_start..].to_string();
    let ty_text = &s[..name_start];
    let ptrs = ty_text.matches('*').count();
    let ty_text = ty_text.replace('*', " ");
    let mut is_const = false;
    let mut base = Vec::new();
    for tok in ty_text.split_whitespace() {
        if tok == "const" {
            is_const = true;
        } else {
            base.push(tok);
        }
    }
    if name.is_empty() || base.len() != 1 {
        return Err(format!("cannot parse parameter `{text}`"));
    }
    Ok(CParam {
        name,
        ty: CType {
            is_const,
            base: base[0].to_string(),
            ptrs,
            arrays,
        },
    })
}

impl CType {
    /// The C spelling around a declarator name.
    pub fn c_decl(&self, name: &str) -> String {
        let mut s = String::new();
        if self.is_const {
            s.push_str("const ");
        }
        s.push_str(&self.base);
        s.push(' ');
        s.push_str(&"*".repeat(self.ptrs));
        s.push_str(name);
        for d in &self.arrays {
            match d {
                Some(n) => s.push_str(&format!("[{n}]")),
                None => s.push_str("[]"),
            }
        }
        s
    }

    /// True for a by-value (non-pointer, non-array) parameter.
    pub fn by_value(&self) -> bool {
        self.ptrs == 0 && self.arrays.is_empty()
    }

    /// The Rust type of this C type in an `extern "C"` signature.
    /// Function-type bases (callbacks) become `Option<Callback>` (nullable function pointer).
    pub fn rust(&self, abi: &Abi) -> String {
        self.rust_with(abi, |base| {
            if abi.callback(base).is_some() {
                format!("Option<{base}>")
            } else {
                rust_base(base)
            }
        })
    }

    /// The Rust type with `elem` spelling the base type: arrays and pointers around it as in
    /// [`CType::rust`]. A callback base is already a function pointer (one level fewer).
    pub fn rust_with(&self, abi: &Abi, elem: impl Fn(&str) -> String) -> String {
        let mut levels = self.ptrs + usize::from(!self.arrays.is_empty());
        if abi.callback(&self.base).is_some() {
            // `MPI_User_function *f` and `MPI_T_event_cb_function f` are both one function pointer.
            levels = levels.saturating_sub(1);
        }
        let mut elem = elem(&self.base);
        for d in self.arrays.iter().skip(1).rev() {
            let n = d.expect("inner array dimension must be sized");
            elem = format!("[{elem}; {n}]");
        }
        for level in 0..levels {
            let q = if level == 0 && self.is_const {
                "*const"
            } else {
                "*mut"
            };
            elem = format!("{q} {elem}");
        }
        elem
    }
}

/// Rust name of a C base type.
pub fn rust_base(base: &str) -> String {
    match base {
        "void" => "c_void".into(),
        "int" => "c_int".into(),
        "char" => "c_char".into(),
        "double" => "f64".into(),
        "intptr_t" => "isize".into(),
        "int64_t" => "i64".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params() {
        let p = parse_param("const MPI_Count recvcounts[]").unwrap();
        assert_eq!(p.name, "recvcounts");
        assert_eq!(
            p.ty,
            CType {
                is_const: true,
                base: "MPI_Count".into(),
                ptrs: 0,
                arrays: vec![None]
            }
        );
        let p = parse_param("int ranges[][3]").unwrap();
        assert_eq!(p.ty.arrays, vec![None, Some(3)]);
        assert_eq!(p.ty.c_decl("ranges"), "int ranges[][3]");
        let p = parse_param("char **array_of_argv[]").unwrap();
        assert_eq!(p.ty.ptrs, 2);
        assert_eq!(p.ty.c_decl(&p.name), "char **array_of_argv[]");
        assert!(parse_param("int").is_err());
    }

    #[test]
    fn keywords() {
        assert_eq!(rust_ident("type"), "type_");
        assert_eq!(rust_ident("comm"), "comm");
    }
}
