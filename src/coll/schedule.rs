//! The schedule types of the collective layer (docs/CONTRACTS.md section 3) and a small
//! builder used by every algorithm.

/// Which of the three byte buffers of a collective call a region lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufId {
    /// The user's send buffer (packed). Never written.
    Send,
    /// The user's receive buffer (packed); also the only buffer of bcast and the input of
    /// in-place collectives.
    Recv,
    /// Scratch space of `Schedule::tmp_len` bytes, owned by the executor.
    Tmp,
}

/// A byte range of one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub buf: BufId,
    pub off: usize,
    pub len: usize,
}

impl Region {
    pub fn new(buf: BufId, off: usize, len: usize) -> Self {
        Region { buf, off, len }
    }
    pub fn send(off: usize, len: usize) -> Self {
        Region::new(BufId::Send, off, len)
    }
    pub fn recv(off: usize, len: usize) -> Self {
        Region::new(BufId::Recv, off, len)
    }
    pub fn tmp(off: usize, len: usize) -> Self {
        Region::new(BufId::Tmp, off, len)
    }
    /// The sub-range `[off, off + len)` of this region.
    pub fn sub(&self, off: usize, len: usize) -> Self {
        debug_assert!(off + len <= self.len, "sub-region out of range");
        Region {
            buf: self.buf,
            off: self.off + off,
            len,
        }
    }
    pub fn end(&self) -> usize {
        self.off + self.len
    }
    pub fn overlaps(&self, o: &Region) -> bool {
        self.buf == o.buf && self.len > 0 && o.len > 0 && self.off < o.end() && o.off < self.end()
    }
}

/// One step of a schedule. See the module docs of `coll` for the execution rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Send {
        peer: usize,
        src: Region,
    },
    Recv {
        peer: usize,
        dst: Region,
    },
    /// dst = src (op) dst   (src is the left operand)   -- len multiple of elem size
    Reduce {
        src: Region,
        dst: Region,
    },
    /// dst = dst (op) src   (dst is the left operand)
    ReduceRev {
        src: Region,
        dst: Region,
    },
    Copy {
        src: Region,
        dst: Region,
    },
    /// All Sends/Recvs issued before this point must complete before later steps start.
    Wait,
}

/// The schedule of one rank for one collective call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    pub steps: Vec<Step>,
    pub tmp_len: usize,
}

impl Schedule {
    /// The bytes of `buf` the schedule touches: the largest region end in that buffer. An
    /// executor can check the user's buffers against it.
    pub fn extent(&self, buf: BufId) -> usize {
        let end = |r: &Region| if r.buf == buf { r.end() } else { 0 };
        self.steps
            .iter()
            .map(|s| match s {
                Step::Send { src, .. } => end(src),
                Step::Recv { dst, .. } => end(dst),
                Step::Reduce { src, dst }
                | Step::ReduceRev { src, dst }
                | Step::Copy { src, dst } => end(src).max(end(dst)),
                Step::Wait => 0,
            })
            .max()
            .unwrap_or(0)
    }

    /// Number of Send steps (for tests and debug logs).
    pub fn sends(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Send { .. }))
            .count()
    }
}

impl std::fmt::Display for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = match self.buf {
            BufId::Send => "send",
            BufId::Recv => "recv",
            BufId::Tmp => "tmp",
        };
        write!(f, "{b}[{}..{}]", self.off, self.end())
    }
}

/// One step per line ("send 3 recv[0..16]", "reduce tmp[0..16] -> recv[0..16]", "wait"), for
/// trace logs and test failure messages.
impl std::fmt::Display for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "tmp_len {}", self.tmp_len)?;
        for s in &self.steps {
            match s {
                Step::Send { peer, src } => writeln!(f, "send {peer} {src}")?,
                Step::Recv { peer, dst } => writeln!(f, "recv {peer} {dst}")?,
                Step::Reduce { src, dst } => writeln!(f, "reduce {src} -> {dst}")?,
                Step::ReduceRev { src, dst } => writeln!(f, "reduce_rev {src} -> {dst}")?,
                Step::Copy { src, dst } => writeln!(f, "copy {src} -> {dst}")?,
                Step::Wait => writeln!(f, "wait")?,
            }
        }
        Ok(())
    }
}

/// Incremental construction of a `Schedule`. Tracks whether communication is pending so
/// that `wait()` never emits an empty Wait and `finish()` closes the last epoch.
#[derive(Default)]
pub(crate) struct Builder {
    steps: Vec<Step>,
    tmp_len: usize,
    pending: bool,
}

impl Builder {
    pub fn new() -> Self {
        Self::default()
    }
    /// Reserve scratch space: the schedule's Tmp buffer is at least `len` bytes.
    pub fn tmp_at_least(&mut self, len: usize) {
        self.tmp_len = self.tmp_len.max(len);
    }
    pub fn send(&mut self, peer: usize, src: Region) {
        self.steps.push(Step::Send { peer, src });
        self.pending = true;
    }
    pub fn recv(&mut self, peer: usize, dst: Region) {
        self.steps.push(Step::Recv { peer, dst });
        self.pending = true;
    }
    /// Send unless the region is empty. Only for lengths that both sides compute identically.
    pub fn send_nz(&mut self, peer: usize, src: Region) {
        if src.len > 0 {
            self.send(peer, src);
        }
    }
    /// Receive unless the region is empty (the peer uses `send_nz` with the same length).
    pub fn recv_nz(&mut self, peer: usize, dst: Region) {
        if dst.len > 0 {
            self.recv(peer, dst);
        }
    }
    /// dst = src op dst.
    pub fn reduce(&mut self, src: Region, dst: Region) {
        debug_assert_eq!(src.len, dst.len);
        if src.len > 0 {
            self.steps.push(Step::Reduce { src, dst });
        }
    }
    /// dst = dst op src.
    pub fn reduce_rev(&mut self, src: Region, dst: Region) {
        debug_assert_eq!(src.len, dst.len);
        if src.len > 0 {
            self.steps.push(Step::ReduceRev { src, dst });
        }
    }
    /// Combine `other` (data from rank-order position `other_first`) into `acc`, keeping
    /// rank order: when `other_first` the result is other op acc, else acc op other.
    pub fn combine(&mut self, other: Region, acc: Region, other_first: bool) {
        if other_first {
            self.reduce(other, acc)
        } else {
            self.reduce_rev(other, acc)
        }
    }
    pub fn copy(&mut self, src: Region, dst: Region) {
        debug_assert_eq!(src.len, dst.len);
        if src.len > 0 && src != dst {
            self.steps.push(Step::Copy { src, dst });
        }
    }
    pub fn wait(&mut self) {
        if self.pending {
            self.steps.push(Step::Wait);
            self.pending = false;
        }
    }
    pub fn finish(mut self) -> Schedule {
        self.wait();
        Schedule {
            steps: self.steps,
            tmp_len: self.tmp_len,
        }
    }
}

/// Split `count` elements into `parts` blocks on element boundaries (the first `count % parts`
/// blocks get one more element). Returns byte offsets and lengths of each block.
pub(crate) fn split_elems(count: usize, parts: usize, elem: usize) -> Vec<(usize, usize)> {
    let q = count / parts;
    let rem = count % parts;
    let mut out = Vec::with_capacity(parts);
    let mut off = 0;
    for i in 0..parts {
        let n = q + usize::from(i < rem);
        out.push((off * elem, n * elem));
        off += n;
    }
    out
}

/// Largest power of two <= n (n >= 1).
pub(crate) fn pof2_floor(n: usize) -> usize {
    debug_assert!(n > 0);
    1 << (usize::BITS - 1 - n.leading_zeros())
}
