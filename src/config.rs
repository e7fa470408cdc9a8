//! The one registry of environment variables (`GPUMPI_*`): each is declared
//! once here, with its default and its documentation. `docs/ENV.md` documents
//! every entry (a unit test checks that it names each of them), and code reads
//! variables only through [`get`], [`get_usize`] and [`get_bool`], which refuse
//! names that are not registered.

/// One environment variable.
pub struct Param {
    pub name: &'static str,
    /// Default value as text ("" = unset).
    pub default: &'static str,
    pub doc: &'static str,
}

/// Every environment variable gpumpi reads. Keep sorted by name.
pub static PARAMS: &[Param] = &[
    Param {
        name: "GPUMPI_DEBUG",
        default: "",
        doc: "Debug log to stderr via tracing: unset/0 = off, 1 = info, 2 = debug, 3 = trace. \
              Reports the transport and algorithm each operation uses and the shared-memory footprint.",
    },
    Param {
        name: "GPUMPI_EAGER_LIMIT",
        default: "16k",
        doc: "Point-to-point messages of at most this many bytes use the eager protocol (copied \
              through the shared-memory ring, fragmented if larger than one frame); larger ones use \
              rendezvous (single copy with CMA, else pipelined through the ring).",
    },
    Param {
        name: "GPUMPI_SHM_CMA",
        default: "1",
        doc: "Single-copy rendezvous with process_vm_readv (Linux CMA), probed per peer at start-up. \
              0 forces the pipelined copy through the ring.",
    },
    Param {
        name: "GPUMPI_SHM_CMA_MIN",
        default: "8m",
        doc: "Rendezvous messages of at least this many bytes use the CMA single copy; smaller ones \
              are pipelined through the ring, which is faster while both ranks have a core (cache-hot \
              copies). When the ranks outnumber the cores, CMA is used for every rendezvous size.",
    },
    Param {
        name: "GPUMPI_SHM_RING_BYTES",
        default: "128k",
        doc: "Bytes of each shared-memory ring (one per sender in every rank's inbox), rounded up to \
              a power of two, at least 1k. Per-rank segment = 4096 + (ranks - 1) x (256 + ring bytes).",
    },
];

fn lookup(name: &str) -> &'static Param {
    PARAMS
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("environment variable {name} is not registered in config::PARAMS"))
}

/// The value of a registered variable, or its default; `None` when both are empty.
pub fn get(name: &str) -> Option<String> {
    let p = lookup(name);
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if !p.default.is_empty() => Some(p.default.to_string()),
        _ => None,
    }
}

/// A registered variable parsed as an unsigned integer; accepts suffixes k, m, g (powers of 1024).
/// An unparsable value falls back to the default (and the fallback is logged).
pub fn get_usize(name: &str) -> usize {
    let p = lookup(name);
    let parse = |s: &str| -> Option<usize> {
        let s = s.trim().to_ascii_lowercase();
        let (num, mul) = match s.chars().last()? {
            'k' => (&s[..s.len() - 1], 1usize << 10),
            'm' => (&s[..s.len() - 1], 1 << 20),
            'g' => (&s[..s.len() - 1], 1 << 30),
            _ => (&s[..], 1),
        };
        num.parse::<usize>().ok()?.checked_mul(mul)
    };
    if let Ok(v) = std::env::var(name) {
        if let Some(x) = parse(&v) {
            return x;
        }
        tracing::warn!("{name}={v:?} is not a number; using the default {:?}", p.default);
    }
    parse(p.default).unwrap_or(0)
}

/// A registered variable as a boolean: 1/true/yes/on are true, 0/false/no/off/empty are false.
pub fn get_bool(name: &str) -> bool {
    matches!(
        get(name).map(|v| v.to_ascii_lowercase()),
        Some(ref v) if v == "1" || v == "true" || v == "yes" || v == "on"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_param_is_documented() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/ENV.md"))
            .expect("docs/ENV.md exists");
        for p in PARAMS {
            assert!(doc.contains(p.name), "docs/ENV.md does not document {}", p.name);
        }
    }

    #[test]
    fn params_sorted_and_unique() {
        for w in PARAMS.windows(2) {
            assert!(w[0].name < w[1].name, "{} / {} out of order", w[0].name, w[1].name);
        }
    }
}
