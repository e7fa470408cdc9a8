//! Collective schedules (minimal copy of the types in CONTRACTS.md section 3, so the engine's
//! executor compiles on its own branch; the coll helper owns the real file).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufId {
    Send,
    Recv,
    Tmp,
}

/// Bytes `off .. off + len` of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub buf: BufId,
    pub off: usize,
    pub len: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Send { peer: usize, src: Region },
    Recv { peer: usize, dst: Region },
    /// dst = src (op) dst   (src is the left operand)   -- len multiple of elem size
    Reduce { src: Region, dst: Region },
    /// dst = dst (op) src   (dst is the left operand)
    ReduceRev { src: Region, dst: Region },
    Copy { src: Region, dst: Region },
    /// All Sends/Recvs issued before this point must complete before later steps start.
    Wait,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    pub steps: Vec<Step>,
    pub tmp_len: usize,
}
