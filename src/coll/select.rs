//! Algorithm selection: a table that is data (`tuning.txt`, embedded; replaced by the file named
//! in `GPUMPI_COLL_TUNING`), with per-collective forcing by `GPUMPI_<COLL>_ALGORITHM=<name>` (both read once, at first use).
//! Non-commutative ops never get an algorithm that reorders operands.

use super::{algorithm, algorithms, AlgoInfo, CollArgs, CollKind};
use crate::mpi::error::MpiResult;
use crate::mpi_bail;
use std::sync::OnceLock;

/// The built-in table.
pub const DEFAULT_TABLE: &str = include_str!("tuning.txt");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Var {
    Nranks,
    Bytes,
    /// The number of nodes the communicator's ranks are on (1 inside one node).
    Nodes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cond {
    Lt(Var, usize),
    Le(Var, usize),
    Gt(Var, usize),
    Ge(Var, usize),
    Pof2(bool),
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub kind: CollKind,
    conds: Vec<Cond>,
    pub algo: &'static str,
}

fn parse_num(s: &str) -> Option<usize> {
    crate::config::parse_size(s)
}

pub(crate) fn parse_cond(tok: &str) -> Option<Cond> {
    match tok {
        "pof2" => return Some(Cond::Pof2(true)),
        "!pof2" => return Some(Cond::Pof2(false)),
        _ => {}
    }
    let (var, rest) = if let Some(r) = tok.strip_prefix("nranks") {
        (Var::Nranks, r)
    } else if let Some(r) = tok.strip_prefix("bytes") {
        (Var::Bytes, r)
    } else if let Some(r) = tok.strip_prefix("nodes") {
        (Var::Nodes, r)
    } else {
        return None;
    };
    let (op, num) = if let Some(n) = rest.strip_prefix("<=") {
        ("<=", n)
    } else if let Some(n) = rest.strip_prefix(">=") {
        (">=", n)
    } else if let Some(n) = rest.strip_prefix('<') {
        ("<", n)
    } else if let Some(n) = rest.strip_prefix('>') {
        (">", n)
    } else {
        return None;
    };
    let n = parse_num(num)?;
    Some(match op {
        "<" => Cond::Lt(var, n),
        "<=" => Cond::Le(var, n),
        ">" => Cond::Gt(var, n),
        _ => Cond::Ge(var, n),
    })
}

/// One parsed line: (line number from 1, collective, conditions, algorithm name).
pub(crate) type Line<'a> = (usize, CollKind, Vec<Cond>, &'a str);

/// The rows of a table in this syntax (also used by src/gpu/tuning.txt). `what` names the
/// table in messages.
pub(crate) fn parse_lines<'a>(text: &'a str, what: &str) -> Result<Vec<Line<'a>>, String> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let toks: Vec<&str> = line.split_whitespace().collect();
        if toks.len() < 2 {
            return Err(format!(
                "{what} line {}: need <collective> [conditions] <algorithm>",
                i + 1
            ));
        }
        let Some(kind) = CollKind::from_name(toks[0]) else {
            return Err(format!(
                "{what} line {}: unknown collective {:?}",
                i + 1,
                toks[0]
            ));
        };
        let mut conds = Vec::new();
        for t in &toks[1..toks.len() - 1] {
            match parse_cond(t) {
                Some(c) => conds.push(c),
                None => return Err(format!("{what} line {}: bad condition {:?}", i + 1, t)),
            }
        }
        rows.push((i + 1, kind, conds, toks[toks.len() - 1]));
    }
    Ok(rows)
}

/// One row of a GPU path's table (src/gpu/nvlink/tuning.txt, src/gpu/resident/tuning.txt):
/// the path's own algorithm type `A`.
pub struct AlgoRow<A> {
    pub(crate) kind: CollKind,
    pub(crate) conds: Vec<Cond>,
    pub(crate) algo: A,
}

/// The rows of a table in this syntax whose algorithm name `algo` resolves for the row's
/// collective (`None`: an error naming the line).
pub(crate) fn parse_rows<A>(
    text: &str,
    what: &str,
    algo: impl Fn(CollKind, &str) -> Option<A>,
) -> Result<Vec<AlgoRow<A>>, String> {
    parse_lines(text, what)?
        .into_iter()
        .map(|(line, kind, conds, name)| {
            let algo = algo(kind, name).ok_or_else(|| {
                format!(
                    "{what} line {line}: {} has no algorithm {name:?}",
                    kind.name()
                )
            })?;
            Ok(AlgoRow { kind, conds, algo })
        })
        .collect()
}

/// Parse a table. Unknown collectives, conditions or algorithm names are errors (line numbers
/// start at 1).
pub fn parse_table(text: &str) -> MpiResult<Vec<Row>> {
    let lines = parse_lines(text, "tuning table")
        .map_err(|e| crate::mpi::error::MpiError::new(crate::standard::consts::MPI_ERR_ARG, e))?;
    let mut rows = Vec::new();
    for (line, kind, conds, name) in lines {
        let Some(info) = algorithm(kind, name) else {
            mpi_bail!(
                MPI_ERR_ARG,
                "tuning table line {}: {} has no algorithm {:?}",
                line,
                kind.name(),
                name
            );
        };
        rows.push(Row {
            kind,
            conds,
            algo: info.name,
        });
    }
    Ok(rows)
}

/// Whether `c` holds for a call on one node (the GPU paths' tables).
pub(crate) fn holds(c: &Cond, nranks: usize, bytes: usize) -> bool {
    holds_on(c, nranks, bytes, 1)
}

/// Whether `c` holds for a call of `bytes` over `nranks` ranks on `nodes` nodes.
pub(crate) fn holds_on(c: &Cond, nranks: usize, bytes: usize, nodes: usize) -> bool {
    let v = |var: &Var| match var {
        Var::Nranks => nranks,
        Var::Bytes => bytes,
        Var::Nodes => nodes,
    };
    match c {
        Cond::Lt(var, n) => v(var) < *n,
        Cond::Le(var, n) => v(var) <= *n,
        Cond::Gt(var, n) => v(var) > *n,
        Cond::Ge(var, n) => v(var) >= *n,
        Cond::Pof2(p) => nranks.is_power_of_two() == *p,
    }
}

fn usable(info: &AlgoInfo, kind: CollKind, a: &CollArgs) -> bool {
    !kind.is_reduction() || a.commutative || info.ordered
}

/// Pure selection: the forced name if usable, else the first matching usable row, else the
/// first usable registered algorithm.
pub fn select_from(
    rows: &[Row],
    forced: Option<&str>,
    kind: CollKind,
    a: &CollArgs,
) -> &'static AlgoInfo {
    if let Some(name) = forced {
        match algorithm(kind, name) {
            Some(info) if usable(info, kind, a) => return info,
            Some(_) => tracing::warn!(
                "{}: algorithm {name} reorders operands; not used for a non-commutative op",
                kind.algorithm_var()
            ),
            None => tracing::warn!(
                "{}: {} has no algorithm {name:?}; ignored",
                kind.algorithm_var(),
                kind.name()
            ),
        }
    }
    let bytes = a.msg_bytes(kind);
    for row in rows.iter().filter(|r| r.kind == kind) {
        if row
            .conds
            .iter()
            .all(|c| holds_on(c, a.size, bytes, a.nodes))
        {
            let info = algorithm(kind, row.algo).expect("rows name registered algorithms");
            if usable(info, kind, a) {
                return info;
            }
        }
    }
    algorithms(kind)
        .find(|i| usable(i, kind, a))
        .expect("every collective has a rank-ordered algorithm")
}

/// The table in use: `GPUMPI_COLL_TUNING` if set and valid, else the built-in one.
pub fn table() -> &'static [Row] {
    static TABLE: OnceLock<Vec<Row>> = OnceLock::new();
    TABLE.get_or_init(|| {
        if let Some(path) = &crate::config::snapshot().coll.tuning {
            match std::fs::read_to_string(path)
                .map_err(Into::into)
                .and_then(|t| parse_table(&t))
            {
                Ok(rows) => {
                    tracing::debug!("collective tuning table from {path} ({} rows)", rows.len());
                    return rows;
                }
                Err(e) => {
                    tracing::warn!("GPUMPI_COLL_TUNING={path}: {e}; using the built-in table")
                }
            }
        }
        parse_table(DEFAULT_TABLE).expect("built-in tuning table parses")
    })
}

/// The value of `GPUMPI_<COLL>_ALGORITHM` ([`crate::config::snapshot`]).
fn forced(kind: CollKind) -> Option<&'static str> {
    crate::config::snapshot().coll.forced(kind.algorithm_var())
}

/// Choose the algorithm for one call (logged at debug level).
pub fn select(kind: CollKind, a: &CollArgs) -> &'static AlgoInfo {
    let info = select_from(table(), forced(kind), kind, a);
    tracing::debug!(
        "{}: {} ranks on {} nodes, {} bytes, commutative={} -> {}",
        kind.name(),
        a.size,
        a.nodes,
        a.msg_bytes(kind),
        a.commutative,
        info.name
    );
    info
}
