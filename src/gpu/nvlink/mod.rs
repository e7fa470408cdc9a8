//! GPU-native collectives between the ranks of one node: every rank's buffers are device
//! memory, peers' buffers are mapped with CUDA IPC ([`super::ipc`]), and kernels read and write
//! them directly over NVLink (zero-copy: nothing is staged through host memory).
//!
//! Structure (as the host collectives): an algorithm is a pure **plan** ([`plan`]), a list of
//! [`Step`]s per rank with symbolic buffer references ([`Ref`]: rank, send/recv buffer, byte
//! offset), tested without a GPU by simulating every rank on host memory ([`simulate`]). The
//! executor ([`execute`]) resolves references to local or IPC-mapped addresses, launches the
//! kernels of kernels/coll.cuh on gpumpi's stream and turns `Barrier` steps into a stream
//! synchronize plus a host barrier on the communicator. Selection is data (`tuning.txt` here).
//!
//! The protocol of one call (every rank takes the same path, or none does):
//! 1. Every rank publishes a [`Desc`] (its buffers' IPC exports, device UUID, pid) with a host
//!    allgather. This is also the entry barrier: after it, every rank is inside the call, so its
//!    buffers may be read and written by peers.
//! 2. If any rank is not eligible (host or managed memory, non-contiguous type, memory that
//!    cannot be exported), every rank returns `false` and the caller runs the staged path.
//! 3. Peers' buffers are mapped (cached); the first call on a set of devices checks with one
//!    more host allreduce that every rank could map every peer, and falls back together if not.
//! 4. The plan's steps run; the last step is always a barrier, so when the call returns no peer
//!    reads or writes this rank's buffers any more.
//!
//! Correctness of in-place variants comes from the plans: no step writes a region another rank
//! may still read in the same phase (see each planner).

use super::call::{chunk, Shape};
use super::call::{Call, Desc, DESC_BYTES};
use super::comm::Host;
use super::device::{device_uuid, max_grid, mode, Mode};
use super::ipc;
use super::kernels::{Seg, MAXP};
use crate::coll::CollKind;
use crate::mpi::error::{MpiError, MpiResult};
use crate::sys::cuda;
use std::sync::{Mutex, OnceLock};

/// Which buffer of a rank a reference points into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buf {
    Send,
    Recv,
}

/// A byte offset in one rank's send or receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ref {
    pub rank: usize,
    pub buf: Buf,
    pub off: usize,
}

fn r(rank: usize, buf: Buf, off: usize) -> Ref {
    Ref { rank, buf, off }
}

/// One step of a plan, run by one rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// `dst[i] = srcs[0][i] op srcs[1][i] op ...` for `elems` elements (dst is this rank's),
    /// the result also stored at every place in `also` (other ranks' buffers) by the thread
    /// that computed it.
    Reduce {
        dst: Ref,
        also: Vec<Ref>,
        srcs: Vec<Ref>,
        elems: usize,
    },
    /// Byte copies (dst, src, len), any rank's buffers on either end, by a kernel.
    Copy(Vec<(Ref, Ref, usize)>),
    /// The same, by the copy engines (one `cuMemcpyAsync` per copy, on several streams).
    CopyCe(Vec<(Ref, Ref, usize)>),
    /// The same, by the copy engines one after another on one stream, in the listed order.
    /// Plans list them as a ring (at copy k, rank r reads from r-k or writes to r+k): while
    /// the ranks keep pace every link direction carries one copy, as in a send/recv ring.
    CopyCeRing(Vec<(Ref, Ref, usize)>),
    /// Everything before is complete on every rank.
    Barrier,
}

impl Step {
    /// Where a `Reduce` stores its result: `dst`, then `also` (empty for other steps).
    fn targets(&self) -> impl Iterator<Item = &Ref> {
        let (dst, also): (Option<&Ref>, &[Ref]) = match self {
            Step::Reduce { dst, also, .. } => (Some(dst), also),
            _ => (None, &[]),
        };
        dst.into_iter().chain(also)
    }
}

/// The algorithms (names as in tuning.txt).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algo {
    /// Allreduce: every rank reduces every input into its own output. Not in place.
    OneShot,
    /// Allreduce: reduce-scatter (rank i reduces chunk i) then allgather of the chunks, each
    /// rank reading the others' chunks.
    TwoShot,
    /// Two-shot whose allgather writes: each rank stores its chunk into every peer's output.
    TwoShotPush,
    /// Two-shot whose allgather writes with the copy engines (SMs free for phase 1 only).
    TwoShotCe,
    /// Alltoall writing the peers' blocks with the copy engines.
    DirectCe,
    /// Two-shot whose allgather reads the peers' chunks with the copy engines.
    TwoShotPullCe,
    /// Alltoall reading the blocks from the peers with the copy engines.
    PullCe,
    /// Alltoall: the copy engines read the peers' blocks one peer at a time in ring order
    /// (own block beside them on a second stream).
    RingCe,
    /// Alltoall/allgather: the copy engines write the blocks into the peers one peer at a time
    /// in ring order.
    RingPushCe,
    /// Alltoall: the copy kernel writes the blocks into the peers one peer at a time in ring
    /// order (a launch per peer, every block on one peer).
    Ring,
    /// Two-shot whose allgather writes with the copy engines one peer at a time in ring order.
    TwoShotRingCe,
    /// Two-shot in ring order in both phases: the reduce-scatter adds one peer's chunk at a
    /// time (a kernel per peer), the allgather writes as `two_shot_ring_ce`.
    TwoShotRing,
    /// Two-shot whose both phases the copy engines push in ring order: the reduce-scatter
    /// copies my input's chunk p into peer p's output at chunk `me` (free until the allgather
    /// writes it), then each rank reduces its chunk locally; the chunks are cut in
    /// [`RING_PIECES`] pieces so that a piece's local reduction runs under the next piece's
    /// copies (and the last one's under the first allgather copies). Not in place, and only
    /// when the vector cuts into equal chunks.
    TwoShotRingPush,
    /// Two-shot in one kernel and one phase: the threads that reduce an element of my chunk
    /// store it into every rank's output at once (no barrier, launch or synchronize between
    /// the reduce-scatter and the allgather).
    TwoShotFused,
    /// Alltoall/allgather: each rank writes its blocks straight into the peers' receive buffers;
    /// reduce: the root reduces all inputs; reduce_scatter_block: each rank reduces its block.
    Direct,
    /// Bcast: every rank reads the root's buffer; alltoall: every rank reads its blocks from
    /// the peers' send buffers.
    Pull,
    /// Not on the GPU path: the caller stages.
    Staged,
}

/// Every algorithm with its name in tuning.txt (one table for both directions).
const ALGOS: [(Algo, &str); 17] = [
    (Algo::OneShot, "one_shot"),
    (Algo::TwoShot, "two_shot"),
    (Algo::TwoShotPush, "two_shot_push"),
    (Algo::TwoShotCe, "two_shot_ce"),
    (Algo::DirectCe, "direct_ce"),
    (Algo::TwoShotPullCe, "two_shot_pull_ce"),
    (Algo::PullCe, "pull_ce"),
    (Algo::RingCe, "ring_ce"),
    (Algo::RingPushCe, "ring_push_ce"),
    (Algo::Ring, "ring"),
    (Algo::TwoShotRingCe, "two_shot_ring_ce"),
    (Algo::TwoShotRing, "two_shot_ring"),
    (Algo::TwoShotRingPush, "two_shot_ring_push"),
    (Algo::TwoShotFused, "two_shot_fused"),
    (Algo::Direct, "direct"),
    (Algo::Pull, "pull"),
    (Algo::Staged, "staged"),
];

impl Algo {
    fn from_name(s: &str) -> Option<Algo> {
        ALGOS.iter().find(|(_, n)| *n == s).map(|(a, _)| *a)
    }
    pub fn name(self) -> &'static str {
        ALGOS
            .iter()
            .find(|(a, _)| *a == self)
            .map_or("unnamed", |(_, n)| *n)
    }
    fn serves(self, kind: CollKind) -> bool {
        use CollKind as K;
        match self {
            Algo::OneShot
            | Algo::TwoShot
            | Algo::TwoShotPush
            | Algo::TwoShotCe
            | Algo::TwoShotPullCe
            | Algo::TwoShotRingCe
            | Algo::TwoShotRing
            | Algo::TwoShotRingPush
            | Algo::TwoShotFused => kind == K::Allreduce,
            Algo::DirectCe | Algo::PullCe | Algo::RingCe | Algo::Ring => kind == K::Alltoall,
            Algo::RingPushCe => matches!(kind, K::Alltoall | K::Allgather),
            Algo::Direct => matches!(
                kind,
                K::Alltoall | K::Allgather | K::Reduce | K::ReduceScatterBlock
            ),
            Algo::Pull => matches!(kind, K::Bcast | K::Alltoall),
            Algo::Staged => true,
        }
    }
}

/// The steps rank `s.rank` runs for `algo`, or `None` when `algo` cannot serve this call (the
/// caller then stages). Pure: no GPU needed.
pub fn plan(s: &Shape, algo: Algo) -> Option<Vec<Step>> {
    use CollKind as K;
    let (n, me, b) = (s.nranks, s.rank, s.bytes);
    // The input buffer of a rank (in place: its receive buffer).
    let input = if s.in_place { Buf::Recv } else { Buf::Send };
    let mut steps = Vec::new();
    match (s.kind, algo) {
        (_, Algo::Staged) => return None,
        (K::Allreduce, Algo::OneShot) => {
            // In place, a rank would overwrite its input while peers still read it.
            if s.in_place {
                return None;
            }
            steps.push(Step::Reduce {
                dst: r(me, Buf::Recv, 0),
                also: Vec::new(),
                srcs: (0..n).map(|p| r(p, Buf::Send, 0)).collect(),
                elems: b / s.elem,
            });
        }
        (
            K::Allreduce,
            Algo::TwoShot
            | Algo::TwoShotPush
            | Algo::TwoShotCe
            | Algo::TwoShotPullCe
            | Algo::TwoShotRingCe
            | Algo::TwoShotRing
            | Algo::TwoShotFused,
        ) => {
            // Phase 1: I reduce chunk `me` of every input into chunk `me` of my output; peers
            // read other chunks of my input (in place too: disjoint). Phase 2: I read the
            // finished chunks p of every peer's output into mine; nobody writes chunk p of a
            // buffer but rank p (phase 1) and the buffer's owner (phase 2, chunks != owner's).
            // Fused: phase 1 also stores my chunk into chunk `me` of every output, and there is
            // no phase 2. In place too: chunk `me` of any buffer is read and written only by my
            // threads, each element read before the same thread writes it.
            let elems = b / s.elem;
            let align = (16 / s.elem).max(1);
            let (c0, cl) = chunk(elems, n, me, align);
            let mine = r(me, Buf::Recv, c0 * s.elem);
            let fused = algo == Algo::TwoShotFused;
            if algo == Algo::TwoShotRing && n > 1 {
                // acc = mine + peer me+1, then acc += peer me+k, one peer per kernel.
                for (k, p) in ring(n, me).enumerate() {
                    let acc = if k == 0 {
                        r(me, input, c0 * s.elem)
                    } else {
                        mine
                    };
                    steps.push(Step::Reduce {
                        dst: mine,
                        also: Vec::new(),
                        srcs: vec![acc, r(p, input, c0 * s.elem)],
                        elems: cl,
                    });
                }
            } else {
                steps.push(Step::Reduce {
                    dst: mine,
                    also: if fused {
                        ring(n, me).map(|p| r(p, Buf::Recv, c0 * s.elem)).collect()
                    } else {
                        Vec::new()
                    },
                    srcs: (0..n).map(|p| r(p, input, c0 * s.elem)).collect(),
                    elems: cl,
                });
            }
            if !fused {
                steps.push(Step::Barrier);
                let push = matches!(
                    algo,
                    Algo::TwoShotPush | Algo::TwoShotCe | Algo::TwoShotRingCe | Algo::TwoShotRing
                );
                let segs = if push {
                    // Push: my finished chunk into every peer's output (peers write only the
                    // other chunks of mine), in ring order (only the ring variants care).
                    ring(n, me)
                        .map(|p| {
                            let off = c0 * s.elem;
                            (r(p, Buf::Recv, off), r(me, Buf::Recv, off), cl * s.elem)
                        })
                        .collect()
                } else {
                    (0..n)
                        .filter(|&p| p != me)
                        .map(|p| {
                            let (p0, pl) = chunk(elems, n, p, align);
                            let off = p0 * s.elem;
                            (r(me, Buf::Recv, off), r(p, Buf::Recv, off), pl * s.elem)
                        })
                        .collect()
                };
                steps.push(match algo {
                    Algo::TwoShotCe | Algo::TwoShotPullCe => Step::CopyCe(segs),
                    Algo::TwoShotRingCe | Algo::TwoShotRing => Step::CopyCeRing(segs),
                    _ => Step::Copy(segs),
                });
            }
        }
        (K::Allreduce, Algo::TwoShotRingPush) => {
            // Chunk c of a buffer holds elements c*cl.. (equal chunks, or the table's next row).
            // Phase by phase (barriers between): RS(0) | Red(0), RS(1) | ... | Red(last),
            // AG(0) | AG(rest), where RS(h) pushes piece h of my input's chunk p into peer p's
            // output chunk me, Red(h) reduces piece h of my chunk from my input and the peers'
            // contributions in my output's other chunks, and AG pushes my finished chunk into
            // every peer's output chunk me (overwriting my contribution there, which the peer
            // reduced a phase earlier).
            if s.in_place {
                return None;
            }
            let es = s.elem;
            let elems = b / es;
            let align = (16 / es).max(1);
            let cl = chunk(elems, n, 0, align).1;
            if (1..n).any(|p| chunk(elems, n, p, align).1 != cl) {
                return None;
            }
            let at = |c: usize, e: usize| (c * cl + e) * es;
            let pieces: Vec<(usize, usize)> = (0..RING_PIECES)
                .map(|h| chunk(cl, RING_PIECES, h, align))
                .filter(|x| x.1 > 0)
                .collect();
            // Piece (e0, len) into every peer's output chunk me, in ring order: of my input's
            // chunk p for peer p (reduce-scatter), or of my output's chunk me (allgather).
            let push = |e0: usize, len: usize, from: Buf| {
                Step::CopyCeRing(
                    ring(n, me)
                        .map(|p| {
                            let c = if from == Buf::Send { p } else { me };
                            (
                                r(p, Buf::Recv, at(me, e0)),
                                r(me, from, at(c, e0)),
                                len * es,
                            )
                        })
                        .collect(),
                )
            };
            let rs = |(e0, len): (usize, usize)| push(e0, len, Buf::Send);
            let ag = |e0: usize, len: usize| push(e0, len, Buf::Recv);
            let red = |(e0, len): (usize, usize)| Step::Reduce {
                dst: r(me, Buf::Recv, at(me, e0)),
                also: Vec::new(),
                srcs: std::iter::once(r(me, Buf::Send, at(me, e0)))
                    .chain(ring(n, me).map(|p| r(me, Buf::Recv, at(p, e0))))
                    .collect(),
                elems: len,
            };
            for (i, h) in pieces.iter().enumerate() {
                if i > 0 {
                    steps.push(red(pieces[i - 1]));
                }
                steps.push(rs(*h));
                steps.push(Step::Barrier);
            }
            steps.push(red(*pieces.last().expect("cl > 0: at least one piece")));
            if pieces.len() == 1 {
                steps.push(Step::Barrier);
                steps.push(ag(0, cl));
            } else {
                steps.push(ag(pieces[0].0, pieces[0].1));
                steps.push(Step::Barrier);
                steps.push(ag(pieces[1].0, cl - pieces[1].0));
            }
        }
        (K::Alltoall, Algo::Direct | Algo::DirectCe) => {
            // In place, a peer's block me would be overwritten while the peer still reads it.
            if s.in_place {
                return None;
            }
            // (Measured: the own block on a copy engine beside the kernel was slower, 288-308
            // against 296-328 GB/s busbw at 512 MiB; benches/NOTES.md.)
            let segs = (0..n)
                .map(|p| (r(p, Buf::Recv, me * b), r(me, Buf::Send, p * b), b))
                .collect();
            steps.push(if algo == Algo::DirectCe {
                Step::CopyCe(segs)
            } else {
                Step::Copy(segs)
            });
        }
        (K::Alltoall, Algo::Pull | Algo::PullCe) => {
            if s.in_place {
                return None;
            }
            let segs = (0..n)
                .map(|p| (r(me, Buf::Recv, p * b), r(p, Buf::Send, me * b), b))
                .collect();
            steps.push(if algo == Algo::PullCe {
                Step::CopyCe(segs)
            } else {
                Step::Copy(segs)
            });
        }
        (K::Alltoall, Algo::Ring) => {
            if s.in_place {
                return None;
            }
            // Own block first (local, short), then one peer per launch.
            for p in std::iter::once(me).chain(ring(n, me)) {
                steps.push(Step::Copy(vec![(
                    r(p, Buf::Recv, me * b),
                    r(me, Buf::Send, p * b),
                    b,
                )]));
            }
        }
        (K::Alltoall, Algo::RingCe | Algo::RingPushCe) => {
            if s.in_place {
                return None;
            }
            // My own block on a second stream, beside the ring.
            steps.push(Step::CopyCe(vec![(
                r(me, Buf::Recv, me * b),
                r(me, Buf::Send, me * b),
                b,
            )]));
            // Copy k reads from (pull) or writes to (push) rank me+k.
            let segs = ring(n, me)
                .map(|p| {
                    if algo == Algo::RingCe {
                        (r(me, Buf::Recv, p * b), r(p, Buf::Send, me * b), b)
                    } else {
                        (r(p, Buf::Recv, me * b), r(me, Buf::Send, p * b), b)
                    }
                })
                .collect();
            steps.push(Step::CopyCeRing(segs));
        }
        (K::Allgather, Algo::Direct) => {
            // Block me of every receive buffer is written only by me.
            let src = if s.in_place {
                r(me, Buf::Recv, me * b)
            } else {
                r(me, Buf::Send, 0)
            };
            steps.push(Step::Copy(
                (0..n)
                    .filter(|&p| !(s.in_place && p == me))
                    .map(|p| (r(p, Buf::Recv, me * b), src, b))
                    .collect(),
            ));
        }
        (K::Allgather, Algo::RingPushCe) => {
            // My block into every peer's block me, one peer at a time in ring order; my own
            // copy (not in place) beside them.
            let src = if s.in_place {
                r(me, Buf::Recv, me * b)
            } else {
                steps.push(Step::CopyCe(vec![(
                    r(me, Buf::Recv, me * b),
                    r(me, Buf::Send, 0),
                    b,
                )]));
                r(me, Buf::Send, 0)
            };
            steps.push(Step::CopyCeRing(
                ring(n, me)
                    .map(|p| (r(p, Buf::Recv, me * b), src, b))
                    .collect(),
            ));
        }
        (K::Bcast, Algo::Pull) => {
            if me != s.root {
                steps.push(Step::Copy(vec![(
                    r(me, Buf::Recv, 0),
                    r(s.root, Buf::Recv, 0),
                    b,
                )]));
            }
        }
        (K::Reduce, Algo::Direct) => {
            // In place at the root: each element is read before the same thread writes it.
            if me == s.root {
                steps.push(Step::Reduce {
                    dst: r(me, Buf::Recv, 0),
                    also: Vec::new(),
                    srcs: (0..n)
                        .map(|p| {
                            if p == s.root && s.in_place {
                                r(p, Buf::Recv, 0)
                            } else {
                                r(p, Buf::Send, 0)
                            }
                        })
                        .collect(),
                    elems: b / s.elem,
                });
            }
        }
        (K::ReduceScatterBlock, Algo::Direct) => {
            // In place the result goes to block 0 of the buffer peers still read: not here.
            if s.in_place {
                return None;
            }
            steps.push(Step::Reduce {
                dst: r(me, Buf::Recv, 0),
                also: Vec::new(),
                srcs: (0..n).map(|p| r(p, Buf::Send, me * b)).collect(),
                elems: b / s.elem,
            });
        }
        _ => return None,
    }
    steps.push(Step::Barrier);
    Some(steps)
}

/// Pieces of a `two_shot_ring_push` chunk (its local reductions pipelined under the copies).
/// Measured on 4 x H200 at 1 GiB: 2 pieces 381-382 GB/s busbw, 4: 378, 8: 369 (each piece
/// costs a barrier; benches/NOTES.md).
pub const RING_PIECES: usize = 2;

/// The peers of rank `me` of `n` in ring order: me+1, me+2, ... (mod n). At every position
/// k the ranks' peers form a permutation: no rank is the k-th peer of two ranks.
fn ring(n: usize, me: usize) -> impl Iterator<Item = usize> {
    (1..n).map(move |k| (me + k) % n)
}

// ---- selection (data) ----

pub type Row = crate::coll::select::AlgoRow<Algo>;

/// The built-in table.
pub const DEFAULT_TABLE: &str = include_str!("tuning.txt");

fn parse_table(text: &str) -> Result<Vec<Row>, String> {
    crate::coll::select::parse_rows(text, "GPU tuning table", |kind, name| {
        Algo::from_name(name).filter(|a| a.serves(kind))
    })
}

fn table() -> &'static [Row] {
    static T: OnceLock<Vec<Row>> = OnceLock::new();
    T.get_or_init(|| {
        if let Some(path) = &crate::config::snapshot().gpu.coll_tuning {
            match std::fs::read_to_string(path)
                .map_err(|e| e.to_string())
                .and_then(|t| parse_table(&t))
            {
                Ok(rows) => return rows,
                Err(e) => tracing::warn!("GPUMPI_GPU_COLL_TUNING={path}: {e}; built-in table used"),
            }
        }
        parse_table(DEFAULT_TABLE).expect("the built-in GPU tuning table parses")
    })
}

/// The algorithms of the rows that match a call, in table order.
fn matching(
    rows: &[Row],
    kind: CollKind,
    nranks: usize,
    bytes: usize,
) -> impl Iterator<Item = Algo> + '_ {
    rows.iter()
        .filter(move |r| r.kind == kind)
        .filter(move |r| {
            r.conds
                .iter()
                .all(|c| crate::coll::select::holds(c, nranks, bytes))
        })
        .map(|r| r.algo)
}

/// The first matching row's algorithm (`Staged` when none matches).
#[cfg(test)]
fn select_from(rows: &[Row], kind: CollKind, nranks: usize, bytes: usize) -> Algo {
    matching(rows, kind, nranks, bytes)
        .next()
        .unwrap_or(Algo::Staged)
}

/// The first matching row whose algorithm can serve this call (e.g. one-shot declines in
/// place, so an in-place allreduce takes the next row), with its plan; `None`: stage. Depends
/// on shared values only, so every rank picks the same.
pub fn plan_from(rows: &[Row], s: &Shape) -> Option<(Algo, Vec<Step>)> {
    matching(rows, s.kind, s.nranks, s.bytes)
        .find_map(|a| {
            if a == Algo::Staged {
                Some(None)
            } else {
                plan(s, a).map(|p| Some((a, p)))
            }
        })
        .flatten()
}

fn err(e: impl std::fmt::Display) -> MpiError {
    MpiError::new(
        crate::standard::consts::MPI_ERR_OTHER,
        format!("GPU collective: {e}"),
    )
}

/// Our own descriptor: eligible when every used buffer is exportable device memory of one device.
fn describe(c: &Call) -> Desc {
    let mut d = Desc {
        ok: false,
        pid: std::process::id(),
        uuid: [0; 16],
        send: None,
        recv: None,
        ordinal: -1,
    };
    // Classification first: a process that never loaded libcuda answers "host" without
    // initializing the driver.
    if c.device.is_none() {
        return d;
    }
    let mut dev: Option<i32> = None;
    let mut ex = [None, None];
    for (k, buf) in [c.send, c.recv].into_iter().enumerate() {
        let Some((addr, len)) = buf else { continue };
        let Some((e, ordinal)) = ipc::export(addr) else {
            return d;
        };
        if e.offset + len as u64 > e.size || dev.is_some_and(|x| x != ordinal) {
            return d;
        }
        dev = Some(ordinal);
        ex[k] = Some(e);
    }
    [d.send, d.recv] = ex;
    let Some(ordinal) = dev else { return d };
    let Some(uuid) = device_uuid(ordinal) else {
        return d;
    };
    d.uuid = uuid;
    d.ordinal = ordinal;
    d.ok = true;
    d
}

/// Run `c` on the GPU if every rank can; `Ok(false)`: every rank stages instead.
///
/// # Safety
/// The buffers in `c` are the caller's live device buffers for the whole call.
pub unsafe fn run(c: &Call, host: &dyn Host) -> MpiResult<bool> {
    // The kernels take at most MAXP operands (whatever a user table says): stage beyond.
    if c.shape.nranks > MAXP {
        return Ok(false);
    }
    if mode() == Some(Mode::Host) {
        return super::hostmem::run(c, host);
    }
    let Some((algo, steps)) = plan_from(table(), &c.shape) else {
        return Ok(false);
    };
    let me = describe(c);
    let ordinal = me.ordinal;
    let all = host.allgather(&me.to_bytes())?;
    let descs: Vec<Desc> = all.chunks(DESC_BYTES).map(Desc::from_bytes).collect();
    if descs.iter().any(|d| !d.ok) {
        // Every rank saw the same descriptors, so every rank comes here. Device buffers that
        // cannot be exported (pool memory, VMM memory without a shareable handle type or
        // spanning two allocations) still move through the pinned host-memory pipelines, where
        // the call is one they serve and every rank's buffers are on a device; else staged.
        tracing::debug!(
            coll = c.shape.kind.name(),
            "GPU collective: some rank's buffers are not exportable device memory; \
             through pinned host memory where it serves, else staged"
        );
        return super::hostmem::run(c, host);
    }
    // Resolve every rank's buffers this plan touches.
    let mypid = std::process::id();
    let mut addr = vec![[0usize; 2]; c.shape.nranks];
    let mut map_err: Option<String> = None;
    let used = refs(&steps);
    for (p, d) in descs.iter().enumerate() {
        for (k, e, local) in [(0, &d.send, c.send), (1, &d.recv, c.recv)] {
            let Some(e) = e else { continue };
            let b = if k == 0 { Buf::Send } else { Buf::Recv };
            if !used.contains(&(p, b)) {
                continue;
            }
            addr[p][k] = if p == c.shape.rank {
                local.map(|x| x.0).unwrap_or(0)
            } else if d.pid == mypid {
                (e.base + e.offset) as usize
            } else {
                match ipc::import(host.world_rank(p), e, ordinal) {
                    Ok(a) => a,
                    Err(x) => {
                        map_err.get_or_insert(x);
                        0
                    }
                }
            };
        }
    }
    // Device sets on which every rank mapped every peer once, kept by the communicator.
    let uuids: Vec<[u8; 16]> = descs.iter().map(|d| d.uuid).collect();
    let state = host.gpu().state();
    let verified = state
        .verified
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&uuids);
    if !verified {
        let ok = host.all(map_err.is_none())?;
        if !ok {
            tracing::info!(
                coll = c.shape.kind.name(),
                "GPU collective: a rank could not map its peers' memory (no P2P?): {}; \
                 through pinned host memory where it serves, else staged",
                map_err.as_deref().unwrap_or("on another rank")
            );
            return super::hostmem::run(c, host);
        }
        let mut v = state.verified.lock().unwrap_or_else(|e| e.into_inner());
        if v.len() >= 16 {
            v.clear();
        }
        v.push(uuids);
    } else if let Some(e) = map_err {
        // Peers go ahead on the GPU path: there is no consistent way back for this call.
        return Err(err(format!("mapping a peer's buffer failed: {e}")));
    }
    tracing::debug!(
        coll = c.shape.kind.name(),
        algo = algo.name(),
        bytes = c.shape.bytes,
        ranks = c.shape.nranks,
        "collective on the GPU (CUDA IPC, zero-copy)"
    );
    host.commit(0);
    execute(&steps, &addr, c, ordinal, host)?;
    Ok(true)
}

/// (rank, buffer) pairs a plan references.
fn refs(steps: &[Step]) -> Vec<(usize, Buf)> {
    let mut v = Vec::new();
    let mut add = |x: &Ref| {
        if !v.contains(&(x.rank, x.buf)) {
            v.push((x.rank, x.buf));
        }
    };
    for s in steps {
        match s {
            Step::Reduce { srcs, .. } => {
                s.targets().for_each(&mut add);
                srcs.iter().for_each(&mut add);
            }
            Step::Copy(segs) | Step::CopyCe(segs) | Step::CopyCeRing(segs) => {
                for (d, s, _) in segs {
                    add(d);
                    add(s);
                }
            }
            Step::Barrier => {}
        }
    }
    v
}

/// Streams for copy-engine steps of device `ordinal` (created at first use, never freed).
fn aux_streams(ordinal: i32, ctx: cuda::Context) -> Result<Vec<cuda::Stream>, String> {
    static AUX: Mutex<Vec<(i32, Vec<cuda::Stream>)>> = Mutex::new(Vec::new());
    let mut a = AUX.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, v)) = a.iter().find(|(o, _)| *o == ordinal) {
        return Ok(v.clone());
    }
    let v = cuda::with_context(ctx, || (0..MAXP).map(|_| cuda::stream_create()).collect())
        .map_err(|e| e.to_string())?;
    a.push((ordinal, v));
    Ok(a.last().unwrap().1.clone())
}

unsafe fn execute(
    steps: &[Step],
    addr: &[[usize; 2]],
    c: &Call,
    ordinal: i32,
    host: &dyn Host,
) -> MpiResult<()> {
    let g = super::gpu().ok_or_else(|| err("CUDA is not available"))?;
    let d = g.device(ordinal).map_err(err)?;
    let k = g.kernels(ordinal).map_err(err)?;
    let at = |x: &Ref| addr[x.rank][if x.buf == Buf::Send { 0 } else { 1 }] + x.off;
    let grid = max_grid(ordinal);
    // The copy engines' streams, looked up once for a plan that uses them; bit i of
    // `aux_used`: stream i has work since the last barrier (which waits for it).
    let aux = if steps
        .iter()
        .any(|s| matches!(s, Step::CopyCe(_) | Step::CopyCeRing(_)))
    {
        aux_streams(ordinal, d.ctx).map_err(err)?
    } else {
        Vec::new()
    };
    let mut aux_used = 0u32;
    for s in steps {
        match s {
            Step::Reduce { srcs, elems, .. } => {
                let (op, t) = c.red.ok_or_else(|| err("reduction without an operation"))?;
                let ptrs: Vec<usize> = srcs.iter().map(at).collect();
                let dsts: Vec<usize> = s.targets().map(at).collect();
                cuda::with_context(d.ctx, || {
                    k.reduce_n_async(op, t, &dsts, &ptrs, *elems, grid, d.stream)
                })
                .map_err(err)?;
            }
            Step::Copy(segs) => {
                let segs: Vec<Seg> = segs
                    .iter()
                    .map(|(dd, ss, len)| Seg {
                        dst: at(dd) as u64,
                        src: at(ss) as u64,
                        len: *len as u64,
                    })
                    .collect();
                cuda::with_context(d.ctx, || k.copy_segs_async(&segs, grid, d.stream))
                    .map_err(err)?;
            }
            Step::CopyCe(segs) => {
                cuda::with_context(d.ctx, || {
                    for (i, (dd, ss, len)) in segs.iter().enumerate() {
                        cuda::memcpy_dtod_async(at(dd), at(ss), *len, aux[i % aux.len()])?;
                    }
                    Ok(())
                })
                .map_err(err)?;
                aux_used |= (1u32 << segs.len().min(aux.len())) - 1;
            }
            Step::CopyCeRing(segs) => {
                // On the last auxiliary stream: beside a reduction of the same phase (its
                // plan keeps them apart), apart from CopyCe's streams (counted from the first).
                let last = aux.len() - 1;
                let s = aux[last];
                cuda::with_context(d.ctx, || {
                    for (dd, ss, len) in segs {
                        cuda::memcpy_dtod_async(at(dd), at(ss), *len, s)?;
                    }
                    Ok(())
                })
                .map_err(err)?;
                aux_used |= 1 << last;
            }
            Step::Barrier => {
                cuda::with_context(d.ctx, || {
                    cuda::stream_synchronize(d.stream)?;
                    for (i, s) in aux.iter().enumerate() {
                        if aux_used & (1 << i) != 0 {
                            cuda::stream_synchronize(*s)?;
                        }
                    }
                    Ok(())
                })
                .map_err(err)?;
                aux_used = 0;
                host.barrier()?;
            }
        }
    }
    Ok(())
}

/// The first race among one phase's steps (`steps[rank]`: what that rank runs between two
/// barriers), which the GPUs run concurrently: two accesses to overlapping bytes, one a write,
/// not by the same elementwise reduction. `elem`: bytes per reduced element.
pub fn race(steps: &[&[Step]], elem: usize) -> Option<String> {
    // (executing rank, step index, target, len, write)
    let mut acc: Vec<(usize, usize, Ref, usize, bool)> = Vec::new();
    for (rank, p) in steps.iter().enumerate() {
        for (i, st) in p.iter().enumerate() {
            match st {
                Step::Reduce {
                    dst, srcs, elems, ..
                } => {
                    let len = elems * elem;
                    assert_eq!(dst.rank, rank, "a reduction writes its own rank's buffer");
                    acc.extend(st.targets().map(|d| (rank, i, *d, len, true)));
                    acc.extend(srcs.iter().map(|s| (rank, i, *s, len, false)));
                }
                Step::Copy(segs) | Step::CopyCe(segs) | Step::CopyCeRing(segs) => {
                    for (d, s, len) in segs {
                        acc.push((rank, i, *d, *len, true));
                        acc.push((rank, i, *s, *len, false));
                    }
                }
                Step::Barrier => {}
            }
        }
    }
    for (a, x) in acc.iter().enumerate() {
        for y in &acc[a + 1..] {
            let overlap = x.2.rank == y.2.rank
                && x.2.buf == y.2.buf
                && x.3 > 0
                && y.3 > 0
                && x.2.off < y.2.off + y.3
                && y.2.off < x.2.off + x.3;
            if !overlap || !(x.4 || y.4) {
                continue;
            }
            let elementwise = x.0 == y.0
                && x.1 == y.1
                && x.2.off == y.2.off
                && matches!(steps[x.0][x.1], Step::Reduce { .. });
            // One rank's steps on its main stream run in order (only CopyCe runs beside).
            let ordered = x.0 == y.0
                && x.1 != y.1
                && !matches!(steps[x.0][x.1], Step::CopyCe(_))
                && !matches!(steps[y.0][y.1], Step::CopyCe(_));
            if !elementwise && !ordered {
                return Some(format!(
                    "rank {} step {} and rank {} step {} race on {:?}",
                    x.0, x.1, y.0, y.1, x.2
                ));
            }
        }
    }
    None
}

/// Combines two elements given as byte slices (the simulator's reduction).
pub type ElemOp = dyn Fn(&[u8], &[u8]) -> Vec<u8>;

/// Run every rank's plan on host memory (tests): `send[p]`/`recv[p]` are rank p's buffers,
/// `op` combines two elements given as byte slices. Within each phase (between barriers) it
/// first checks that no access races with a write of another step (the GPUs run a phase's
/// steps concurrently, one rank's in order except `CopyCe`, which runs beside the others; an
/// elementwise reduction may write what it reads itself), then runs the
/// steps rank by rank. Returns `None` when the algorithm cannot serve the shape.
pub fn simulate(
    shape: Shape,
    algo: Algo,
    send: &mut [Vec<u8>],
    recv: &mut [Vec<u8>],
    op: &ElemOp,
) -> Option<()> {
    let n = shape.nranks;
    let plans: Vec<Vec<Step>> = (0..n)
        .map(|rank| plan(&Shape { rank, ..shape }, algo))
        .collect::<Option<_>>()?;
    let phases: Vec<Vec<Vec<Step>>> = plans
        .iter()
        .map(|p| {
            p.split(|s| *s == Step::Barrier)
                .map(|x| x.to_vec())
                .collect()
        })
        .collect();
    let nphases = phases[0].len();
    assert!(
        phases.iter().all(|p| p.len() == nphases),
        "same barriers on every rank"
    );
    for ph in 0..nphases {
        let steps: Vec<&[Step]> = phases.iter().map(|p| p[ph].as_slice()).collect();
        if let Some(r) = race(&steps, shape.elem) {
            panic!("{algo:?} {:?} phase {ph}: {r}", shape.kind);
        }
        for (rank, p) in phases.iter().enumerate() {
            for st in &p[ph] {
                let read = |send: &[Vec<u8>], recv: &[Vec<u8>], x: &Ref, len: usize| {
                    let b = if x.buf == Buf::Send {
                        &send[x.rank]
                    } else {
                        &recv[x.rank]
                    };
                    b[x.off..x.off + len].to_vec()
                };
                match st {
                    Step::Reduce { srcs, elems, .. } => {
                        let (len, es) = (elems * shape.elem, shape.elem);
                        let ins: Vec<Vec<u8>> =
                            srcs.iter().map(|s| read(send, recv, s, len)).collect();
                        let mut out = Vec::with_capacity(len);
                        for e in 0..*elems {
                            let mut v = ins[0][e * es..(e + 1) * es].to_vec();
                            for i in &ins[1..] {
                                v = op(&v, &i[e * es..(e + 1) * es]);
                            }
                            out.extend_from_slice(&v);
                        }
                        let _ = rank;
                        for d in st.targets() {
                            write(send, recv, d, &out);
                        }
                    }
                    Step::Copy(segs) | Step::CopyCe(segs) | Step::CopyCeRing(segs) => {
                        for (d, s, len) in segs {
                            let v = read(send, recv, s, *len);
                            write(send, recv, d, &v);
                        }
                    }
                    Step::Barrier => unreachable!(),
                }
            }
        }
    }
    Some(())
}

fn write(send: &mut [Vec<u8>], recv: &mut [Vec<u8>], d: &Ref, v: &[u8]) {
    let buf = if d.buf == Buf::Send {
        &mut send[d.rank]
    } else {
        &mut recv[d.rank]
    };
    buf[d.off..d.off + v.len()].copy_from_slice(v);
}

#[cfg(test)]
mod tests;
