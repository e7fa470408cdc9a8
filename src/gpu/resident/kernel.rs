//! The resident kernel of a device (kernels/resident.cuh): one block that stays launched and
//! runs commands the host writes into mapped pinned memory, with no kernel launch and no stream
//! synchronize per command. Two users: the resident collectives (the parent module, whose
//! per-communicator scratch layout is defined here with the commands) and small staging copies
//! of point-to-point ([`copy_small`], used by `gpu::stage` and `gpu::p2p`).
//!
//! Holding an SM: one block of [`THREADS`] threads, which exits after
//! `GPUMPI_GPU_RESIDENT_IDLE_US` without a command (a `cudaDeviceSynchronize` or `cudaFree`
//! of the application waits at most that long for it); the next command relaunches it.
//!
//! The mid-size collectives (`resident::mid`) run on a second, wide instance of the same
//! protocol (kernels/resident_mid.cuh: `GPUMPI_GPU_RESIDENT_BLOCKS` blocks, launched at the first
//! mid-size command, exiting after the same idle time): [`with_wide`].

use crate::gpu::kernels::MAXP;
use crate::sys::cuda::{self, Function, Stream};
use std::ffi::c_void;
use std::sync::Mutex;

/// Largest vector (allreduce) or block (alltoall, allgather) of the resident path.
pub const SLOT: usize = 16 << 10;
/// The same with `GPUMPI_CUDA_IPC=0`, where the scratch is pinned host memory: the launched
/// alternative pays several PCIe round trips of stream ordering there (78 us at 32 KiB against
/// 14.7 us resident at 4 KiB, 4 x H200, benches/NOTES.md), so the resident kernel serves more.
pub const HOST_SLOT: usize = 64 << 10;
const THREADS: u32 = 512;
/// How long a released command may take to finish ([`Res::run`]).
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// How often a released command that has not finished is released again ([`Res::run`]): a
/// peer's kernel that took the command up after the release overwrote that peer's flag word
/// in my scratch with its own flag value of the call, which my kernel does not wait for.
const RELEASE_AGAIN: std::time::Duration = std::time::Duration::from_millis(1);
/// Largest staging copy the resident kernel can take ([`copy_small`]; its host areas' size).
/// `GPUMPI_GPU_SMALL_COPY` sets the limit used, at most this.
pub const COPY_MAX: usize = 16 << 10;
/// Small copies before the kernels are loaded in the background for them.
const PRELOAD_AFTER: usize = 16;
/// Bytes a host-to-device command carries in its own line.
const INLINE: usize = 16;
const DATA_OFF: usize = 256;
/// Bytes of one rank's scratch for one communicator.
pub const SCRATCH: usize = DATA_OFF + 2 * MAXP * SLOT;
/// Bytes of one rank's scratch in pinned host memory (host mode).
pub const HOST_SCRATCH: usize = DATA_OFF + 2 * MAXP * HOST_SLOT;

/// `struct ResCmd` of kernels/resident.cuh: one 64-byte line.
#[repr(C, align(64))]
#[derive(Clone, Copy, Default)]
pub(super) struct ResCmd {
    pub(super) seq: u64,
    pub(super) kind: u32,
    pub(super) op: u32,
    pub(super) ty: u32,
    pub(super) ok: u32,
    pub(super) bytes: u64,
    pub(super) src: u64,
    pub(super) dst: u64,
    pub(super) flagv: u64,
    pub(super) desc: u64,
}
// The layout of kernels/resident.cuh (checked against the header by gpu::kabi's test).
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<ResCmd>() == 64);
    assert!(offset_of!(ResCmd, kind) == 8 && offset_of!(ResCmd, ok) == 20);
    assert!(offset_of!(ResCmd, bytes) == 24 && offset_of!(ResCmd, desc) == 56);
    assert!(size_of::<ResDesc>() == 88);
    assert!(offset_of!(ResDesc, slot) == 8 && offset_of!(ResDesc, peers) == 16);
    assert!(offset_of!(ResDesc, host) == 16 + 8 * MAXP);
    assert!(size_of::<ResDone>() == 16 && offset_of!(ResDone, exited) == 8);
};
/// `ResCmd::kind` (the RES_* of kernels/resident.cuh).
pub(super) const RES_ALLREDUCE: u32 = 1;
pub(super) const RES_ALLTOALL: u32 = 2;
pub(super) const RES_ALLGATHER: u32 = 3;
const RES_COPY: u32 = 4;
/// Two-shot allreduce of the wide kernel (kernels/resident_mid.cuh).
pub(super) const RES_AR_TWO_SHOT: u32 = 5;
/// Kind bit of the wide kernel: the data travel as LL words (tagged, no flags and no fence).
pub(super) const RES_MID_LL: u32 = 0x8000;
/// The data of a wide command as LL128 lines (kernels/resident_mid.cuh).
pub(super) const RES_MID_LL128: u32 = 0x4000;
/// Most blocks of the wide kernel (its flag array's size).
pub const MID_BLOCKS_MAX: usize = 64;
/// Where the wide kernel's scratch keeps its `ResDesc` and its data (after the flags: u64
/// [2 phases][2 parities][MID_BLOCKS_MAX][MAXP]).
pub(super) const MID_DESC_OFF: usize = 16384;
pub(super) const MID_DATA_OFF: usize = 20480;
const _: () = assert!(4 * MID_BLOCKS_MAX * MAXP * 8 <= MID_DESC_OFF);
const _: () = assert!(MID_DESC_OFF + std::mem::size_of::<ResDesc>() <= MID_DATA_OFF);
/// Bytes of the wide kernel's `MidGrid` (device memory shared by its blocks).
const MID_GRID_BYTES: usize = 128;

/// `struct MidGrid` of kernels/resident_mid.cuh: the command as block 0 hands it to the other
/// blocks. Device memory the host only zeroes.
#[repr(C)]
struct MidGrid {
    cmd: [u64; 8],
    gen: u64,
}
const _: () = assert!(std::mem::size_of::<MidGrid>() <= MID_GRID_BYTES);

/// `struct MidDone` of kernels/resident_mid.cuh: the wide kernel's completion, `ResDone`'s
/// words followed by one word per block, (command seq << 1) | status, written by every block of
/// the grid (no count between blocks on the device).
#[repr(C)]
struct MidDone {
    seq: u64,
    exited: u64,
    blk: [u64; MID_BLOCKS_MAX],
}
const _: () = assert!(std::mem::offset_of!(MidDone, exited) == 8);

/// `struct ResDesc` of kernels/resident.cuh, at `DESC_OFF` of each rank's scratch.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(super) struct ResDesc {
    pub(super) nranks: u32,
    pub(super) rank: u32,
    pub(super) slot: u64,
    pub(super) peers: [u64; MAXP],
    /// 1: the scratch is pinned shared host memory (no P2P), 0: device memory (CUDA IPC).
    pub(super) host: u64,
}
pub(super) const DESC_OFF: usize = 128;
const _: () = assert!(DESC_OFF + std::mem::size_of::<ResDesc>() <= DATA_OFF);

/// `struct ResDone`: `seq` is (command seq << 1) | status (1 done, 0 some rank was not ok),
/// written in one store.
#[repr(C)]
struct ResDone {
    seq: u64,
    exited: u64,
}

/// The resident kernel of one device.
pub(super) struct Res {
    ctx: cuda::Context,
    stream: Stream,
    func: Function,
    cmd: *mut ResCmd,
    cmd_dev: u64,
    done: *mut ResDone,
    done_dev: u64,
    /// Small copies: the device-to-host word area (2 x COPY_MAX bytes) and the host-to-device
    /// staging area (COPY_MAX bytes), mapped pinned memory.
    ll: *mut u64,
    ll_dev: u64,
    stage: *mut u8,
    stage_dev: u64,
    epoch: u64,
    seq: u64,
    launched: bool,
    idle_ns: u64,
    /// The wide kernel: its blocks and its `MidGrid` (device memory); 0 for the one-block one.
    blocks: u32,
    grid_dev: u64,
}
// SAFETY: the raw pointers are pinned host memory owned by this object, used under RES's lock.
unsafe impl Send for Res {}

static RES: Mutex<Vec<Option<Res>>> = Mutex::new(Vec::new());
static WIDE: Mutex<Vec<Option<Res>>> = Mutex::new(Vec::new());

impl Res {
    /// The resident kernel of device `ordinal`: the one-block kernel (`blocks` 0) or the wide
    /// one of `blocks` blocks.
    fn new(ordinal: i32, blocks: u32) -> Result<Res, String> {
        let g = crate::gpu::gpu().ok_or("CUDA is not available")?;
        let d = g.device(ordinal)?;
        let k = g.kernels(ordinal)?;
        let func = if blocks == 0 {
            k.resident.ok_or("no resident kernel in this build")?
        } else {
            k.resident_mid
                .ok_or("no wide resident kernel in this build")?
        };
        let grid_dev = if blocks == 0 {
            0
        } else {
            cuda::with_context(d.ctx, || {
                let p = cuda::mem_alloc(MID_GRID_BYTES)?;
                // SAFETY: a fresh allocation of MID_GRID_BYTES bytes.
                unsafe { cuda::memset_async(p, 0, MID_GRID_BYTES, d.stream)? };
                cuda::stream_synchronize(d.stream)?;
                Ok(p as u64)
            })
            .map_err(|e| e.to_string())?
        };
        let (stream, (cmd, cmd_dev), (done, done_dev), (ll, ll_dev), (stage, stage_dev)) =
            cuda::with_context(d.ctx, || {
                Ok((
                    cuda::stream_create()?,
                    cuda::host_alloc_mapped(std::mem::size_of::<ResCmd>())?,
                    cuda::host_alloc_mapped(if blocks == 0 {
                        std::mem::size_of::<ResDone>()
                    } else {
                        std::mem::size_of::<MidDone>()
                    })?,
                    cuda::host_alloc_mapped(2 * COPY_MAX)?,
                    cuda::host_alloc_mapped(COPY_MAX)?,
                ))
            })
            .map_err(|e| e.to_string())?;
        // SAFETY: fresh mapped allocations of the right sizes.
        unsafe {
            std::ptr::write_volatile(cmd as *mut ResCmd, ResCmd::default());
            std::ptr::write_bytes(
                done,
                0,
                if blocks == 0 {
                    std::mem::size_of::<ResDone>()
                } else {
                    std::mem::size_of::<MidDone>()
                },
            );
            std::ptr::write_bytes(ll, 0, 2 * COPY_MAX);
        }
        let idle_us = crate::config::snapshot().gpu.resident_idle_us.max(1) as u64;
        Ok(Res {
            ctx: d.ctx,
            stream,
            func,
            cmd: cmd as *mut ResCmd,
            cmd_dev,
            done: done as *mut ResDone,
            done_dev,
            ll: ll as *mut u64,
            ll_dev,
            stage,
            stage_dev,
            epoch: 0,
            seq: 0,
            launched: false,
            idle_ns: idle_us * 1000,
            blocks,
            grid_dev,
        })
    }

    fn launch(&mut self) -> Result<(), String> {
        self.epoch += 1;
        let (mut c, mut d, mut grid, mut e, mut idle, mut last) = (
            self.cmd_dev,
            self.done_dev,
            self.grid_dev,
            self.epoch,
            self.idle_ns,
            self.seq - 1,
        );
        let p = |x: &mut u64| x as *mut u64 as *mut c_void;
        // gpumpi_resident(cmd, done, epoch, idle_ns, last_seq); gpumpi_resident_mid(cmd, done,
        // grid, epoch, idle_ns, last_seq).
        let mut params: Vec<*mut c_void> = if self.blocks == 0 {
            vec![p(&mut c), p(&mut d), p(&mut e), p(&mut idle), p(&mut last)]
        } else {
            vec![
                p(&mut c),
                p(&mut d),
                p(&mut grid),
                p(&mut e),
                p(&mut idle),
                p(&mut last),
            ]
        };
        let (f, s, blocks) = (self.func, self.stream, self.blocks.max(1));
        // SAFETY: the parameters match the kernel's signature (above); the pointers are the
        // device addresses of this object's mapped memory and its MidGrid.
        cuda::with_context(self.ctx, || unsafe {
            cuda::launch(f, blocks, THREADS, &mut params, s)
        })
        .map_err(|e| e.to_string())?;
        self.launched = true;
        Ok(())
    }

    /// Whether the current command is done, and then its status (every rank's buffers
    /// qualified): the one-block kernel's `ResDone::seq`, or every block's word of the wide
    /// kernel's `MidDone`.
    fn finished(&self) -> Option<bool> {
        let want = self.seq;
        if self.blocks == 0 {
            // SAFETY: done is this object's mapped memory, written by the kernel.
            let d = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*self.done).seq)) };
            return (d >> 1 == want).then_some(d & 1 == 1);
        }
        let words = self.done as *const MidDone;
        let mut ok = true;
        for b in 0..self.blocks as usize {
            // SAFETY: the wide kernel's done is a mapped MidDone (Res::new), and b is below
            // its blocks (at most MID_BLOCKS_MAX).
            let d = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*words).blk[b])) };
            if d >> 1 != want {
                return None;
            }
            ok &= d & 1 == 1;
        }
        Some(ok)
    }

    /// Run one command to completion; whether every rank's buffers qualified (else nothing
    /// was done). While it waits, `stop` is asked now and then whether to give the command up
    /// (the peers called something else); then `release` makes the kernel finish it without
    /// doing it, and `Ok(None)` says so.
    pub(super) fn run(
        &mut self,
        mut c: ResCmd,
        stop: &mut dyn FnMut() -> bool,
        release: &dyn Fn() -> Result<(), String>,
    ) -> Result<Option<bool>, String> {
        self.seq += 1;
        c.seq = 0;
        // SAFETY: cmd is this object's mapped memory; the kernel reads the fields only after it
        // sees the new seq, which is written last (x86 stores are ordered; the fence keeps the
        // compiler from reordering).
        unsafe {
            let seq_ptr = std::ptr::addr_of_mut!((*self.cmd).seq);
            let body = (self.cmd as *mut u8).add(8);
            let src = (&c as *const ResCmd as *const u8).add(8);
            for i in 0..std::mem::size_of::<ResCmd>() - 8 {
                std::ptr::write_volatile(body.add(i), *src.add(i));
            }
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            std::ptr::write_volatile(seq_ptr, self.seq);
        }
        if !self.launched {
            self.launch()?;
        }
        let mut spins: u64 = 0;
        // When the command was released first, and last.
        let mut released: Option<(std::time::Instant, std::time::Instant)> = None;
        loop {
            if let Some(ok) = self.finished() {
                return Ok(released.is_none().then_some(ok));
            }
            // SAFETY: done is this object's mapped memory, written by the kernel.
            let exited =
                unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*self.done).exited)) };
            if exited == self.epoch {
                // It exited idle; it wrote its completion before exited, so look once more.
                if let Some(ok) = self.finished() {
                    return Ok(released.is_none().then_some(ok));
                }
                self.launch()?;
            }
            spins += 1;
            if spins.is_multiple_of(1024) {
                match released {
                    None if stop() => {
                        release()?;
                        let now = std::time::Instant::now();
                        released = Some((now, now));
                    }
                    Some((t, _)) if t.elapsed() > RELEASE_WAIT => {
                        return Err(format!(
                            "the kernel did not finish a command it was released from within \
                             {} s; the GPU's resident kernels are unusable",
                            RELEASE_WAIT.as_secs()
                        ));
                    }
                    Some((t, last)) if last.elapsed() > RELEASE_AGAIN => {
                        tracing::debug!(
                            seq = self.seq,
                            "resident kernel: command released again (a peer's flag came after \
                             the release)"
                        );
                        release()?;
                        released = Some((t, std::time::Instant::now()));
                    }
                    _ => {}
                }
            }
            if spins > 1 << 22 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// `f` on the resident kernel of device `ordinal` (set up at first use), under its lock: one
/// command at a time per device.
pub(super) fn with_res<R>(
    ordinal: i32,
    f: impl FnOnce(&mut Res) -> Result<R, String>,
) -> Result<R, String> {
    with_kernel(&RES, ordinal, 0, f)
}

/// `f` on the wide resident kernel of device `ordinal` (set up at first use with
/// [`wide_blocks`] blocks), under its lock.
pub(super) fn with_wide<R>(
    ordinal: i32,
    f: impl FnOnce(&mut Res) -> Result<R, String>,
) -> Result<R, String> {
    with_kernel(&WIDE, ordinal, wide_blocks(ordinal), f)
}

fn with_kernel<R>(
    table: &Mutex<Vec<Option<Res>>>,
    ordinal: i32,
    blocks: u32,
    f: impl FnOnce(&mut Res) -> Result<R, String>,
) -> Result<R, String> {
    let mut res = table.lock().unwrap_or_else(|e| e.into_inner());
    let idx = ordinal.max(0) as usize;
    if res.len() <= idx {
        res.resize_with(idx + 1, || None);
    }
    if res[idx].is_none() {
        res[idx] = Some(Res::new(ordinal, blocks)?);
    }
    f(res[idx].as_mut().expect("set up above"))
}

/// Blocks of the wide kernel of device `ordinal`: `GPUMPI_GPU_RESIDENT_BLOCKS`, within 1 and
/// [`MID_BLOCKS_MAX`], and at most the device's SMs (every block must be resident at once: the
/// blocks of one command wait for the peers' blocks, never for each other, but block 0 hands
/// every command to the others).
pub(super) fn wide_blocks(ordinal: i32) -> u32 {
    let want = crate::config::snapshot()
        .gpu
        .resident_blocks
        .clamp(1, MID_BLOCKS_MAX);
    let sms = cuda::multiprocessor_count(ordinal).map_or(1, |n| n.max(1) as usize);
    want.min(sms) as u32
}

// ---- small copies for point-to-point staging ----

/// Bytes up to which staging copies take the resident kernel (`GPUMPI_GPU_SMALL_COPY`, at
/// most [`COPY_MAX`]; 0: never).
fn small_copy_limit() -> usize {
    crate::config::snapshot().gpu.small_copy.min(COPY_MAX)
}

/// Whether a copy of `len` bytes may use the resident kernel of device `ordinal`: `len` is
/// within `GPUMPI_GPU_SMALL_COPY`; the kernels are already loaded (their first load costs
/// milliseconds, more than the first-call budget: after a few small copies it is started in
/// the background, and no copy waits for it); and no other process is known to use this GPU
/// (kernels of processes sharing a GPU time-slice, so a polling kernel would delay the
/// other's work).
pub fn small_copy_ready(ordinal: i32, len: usize, dir: SmallCopy) -> bool {
    // A device-to-device pull uses none of the host areas: any size they would allow.
    let limit = match (dir, small_copy_limit()) {
        (SmallCopy::DevToDev, l) if l > 0 => COPY_MAX,
        (_, l) => l,
    };
    if len > limit {
        return false;
    }
    kernels_ready(ordinal) && sole::alone(ordinal)
}

/// Whether the kernels of device `ordinal` are loaded. Their first load costs milliseconds, more
/// than the first-call budget: after [`PRELOAD_AFTER`] resident copies were asked for (not at
/// the very first copies either: the load would compete with them for the driver, and the
/// first device send/recv must stay under 2 ms) it is started in the background, and no copy
/// waits for it.
fn kernels_ready(ordinal: i32) -> bool {
    let Some(g) = crate::gpu::gpu() else {
        return false;
    };
    if !g.kernels_loaded(ordinal) {
        static ASKED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        if ASKED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= PRELOAD_AFTER {
            g.preload_kernels(ordinal);
        }
        return false;
    }
    true
}

/// The direction of a small copy by the resident kernel ([`copy_small`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SmallCopy {
    /// Device address `src` (memory of the device, or a peer's buffer mapped into its context)
    /// to host memory `dst`.
    ToHost,
    /// Host memory `src` to device address `dst`.
    FromHost,
    /// Device address `src` (a peer's buffer mapped through CUDA IPC into this device's
    /// context) to device address `dst` of this device: the receiver's pull of a small device
    /// message, one host <-> kernel round trip.
    DevToDev,
}

/// Copy `len` bytes (at most `GPUMPI_GPU_SMALL_COPY`, itself at most [`COPY_MAX`]; a
/// [`SmallCopy::DevToDev`] copy up to [`COPY_MAX`] unless that variable is 0) with the resident
/// kernel of device `ordinal`, in direction `dir`. Synchronous, like the copies it
/// replaces. `None`: not available here (the caller copies with the copy engine).
///
/// # Safety
/// The device ranges are memory the kernel of `ordinal` may read (or write); a host range is
/// valid for `len` bytes.
pub unsafe fn copy_small(
    ordinal: i32,
    dst: usize,
    src: usize,
    len: usize,
    dir: SmallCopy,
) -> Option<Result<(), String>> {
    if len == 0 || !small_copy_ready(ordinal, len, dir) {
        return None;
    }
    Some(copy_small_now(ordinal, dst, src, len, dir))
}

/// [`copy_small`] where the caller found [`small_copy_ready`] for a non-empty copy.
///
/// # Safety
/// As [`copy_small`].
pub unsafe fn copy_small_now(
    ordinal: i32,
    dst: usize,
    src: usize,
    len: usize,
    dir: SmallCopy,
) -> Result<(), String> {
    with_res(ordinal, |r| {
        let mut c = ResCmd {
            kind: RES_COPY,
            bytes: len as u64,
            ..Default::default()
        };
        match dir {
            SmallCopy::ToHost => {
                c.src = src as u64;
                c.dst = r.ll_dev;
            }
            SmallCopy::DevToDev => {
                c.op = 1;
                c.src = src as u64;
                c.dst = dst as u64;
            }
            SmallCopy::FromHost if len <= INLINE => {
                let mut inline = [0u8; INLINE];
                inline[..len].copy_from_slice(std::slice::from_raw_parts(src as *const u8, len));
                c.op = 1;
                c.ty = 1;
                c.dst = dst as u64;
                c.flagv = u64::from_le_bytes(inline[..8].try_into().unwrap());
                c.desc = u64::from_le_bytes(inline[8..].try_into().unwrap());
            }
            SmallCopy::FromHost => {
                std::ptr::copy_nonoverlapping(src as *const u8, r.stage, len);
                c.op = 1;
                c.src = r.stage_dev;
                c.dst = dst as u64;
            }
        }
        r.run(c, &mut || false, &|| Ok(()))?;
        if dir == SmallCopy::ToHost {
            // Every word carries the command's tag once its data has arrived.
            let tag = (r.seq & 0xffff_ffff) << 32;
            let out = dst as *mut u8;
            for i in 0..len.div_ceil(4) {
                let w = loop {
                    let w = std::ptr::read_volatile(r.ll.add(i));
                    if w & !0xffff_ffff == tag {
                        break w;
                    }
                    std::hint::spin_loop();
                };
                let b = (w as u32).to_le_bytes();
                let k = (len - 4 * i).min(4);
                std::ptr::copy_nonoverlapping(b.as_ptr(), out.add(4 * i), k);
            }
        }
        Ok(())
    })
}

/// Whether a device-to-device pull of `len` bytes from `src` to `dst` can take the wide
/// resident kernel of device `ordinal` ([`copy_wide`]): resident copies are on
/// (`GPUMPI_GPU_SMALL_COPY` not 0), both ends are 16-byte aligned (the kernel copies 16-byte
/// words; unaligned ends would be byte loads over the link), the kernels are loaded and no other
/// process uses the GPU (as for [`copy_small`]).
pub fn wide_copy_ready(ordinal: i32, dst: usize, src: usize, len: usize) -> bool {
    if len == 0 || small_copy_limit() == 0 || (dst | src) & 15 != 0 || !kernels_ready(ordinal) {
        return false;
    }
    let wide_built = crate::gpu::gpu()
        .and_then(|g| g.kernels(ordinal).ok())
        .is_some_and(|k| k.resident_mid.is_some());
    wide_built && sole::alone(ordinal)
}

/// Bytes per block of a pull by the wide kernel (the mid-size collectives' 4 KiB per block).
const WIDE_COPY_BLOCK: usize = 4 << 10;

/// Blocks of the wide kernel a pull of `len` bytes runs on, of the kernel's `blocks`: one per
/// [`WIDE_COPY_BLOCK`] bytes, at least one.
pub fn wide_copy_blocks(len: usize, blocks: usize) -> usize {
    len.div_ceil(WIDE_COPY_BLOCK).clamp(1, blocks.max(1))
}

/// Copy `len` bytes from `src` (a peer's buffer mapped through CUDA IPC into device
/// `ordinal`'s context, or memory of that device) to `dst` (memory of that device) with the
/// wide resident kernel of `ordinal` (launched at its first use; exits after
/// `GPUMPI_GPU_RESIDENT_IDLE_US` without a command): the receiver's pull of a mid-size device
/// message, one host <-> kernel round trip, many blocks loading over NVLink at once.
/// Synchronous. The caller found [`wide_copy_ready`].
///
/// # Safety
/// Both device ranges are memory the kernel of `ordinal` may read (`src`) and write (`dst`),
/// 16-byte aligned.
pub unsafe fn copy_wide(ordinal: i32, dst: usize, src: usize, len: usize) -> Result<(), String> {
    with_wide(ordinal, |r| {
        let nblk = wide_copy_blocks(len, r.blocks as usize) as u32;
        let c = ResCmd {
            kind: RES_COPY | nblk << 16,
            bytes: len as u64,
            src: src as u64,
            dst: dst as u64,
            ..Default::default()
        };
        match r.run(c, &mut || false, &|| Ok(()))? {
            Some(true) => Ok(()),
            _ => Err("the wide resident kernel did not finish a copy".into()),
        }
    })
}

/// Whether this process is the only one (of any gpumpi job on this host's network namespace)
/// known to use a GPU for resident small copies: the first process takes an abstract Unix
/// socket named after the GPU's UUID (released by the kernel when the process exits); a
/// later one finds the name taken, binds the "shared" marker beside it and stays off; the
/// holder looks for that marker at most every 10 ms and turns off when it appears.
mod sole {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    struct State {
        ordinal: i32,
        shared: bool,
        marker: Option<SocketAddr>,
        last: Instant,
        _held: Option<UnixListener>,
    }

    static STATE: Mutex<Vec<State>> = Mutex::new(Vec::new());

    fn name(uuid: &[u8; 16], suffix: &str) -> String {
        let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
        format!("gpumpi-gpu-{hex}{suffix}")
    }

    fn first_look(ordinal: i32) -> State {
        let mut st = State {
            ordinal,
            shared: true,
            marker: None,
            last: Instant::now(),
            _held: None,
        };
        let Some(uuid) = crate::gpu::device::device_uuid(ordinal) else {
            return st;
        };
        let (Ok(own), Ok(marker)) = (
            SocketAddr::from_abstract_name(name(&uuid, "")),
            SocketAddr::from_abstract_name(name(&uuid, "-shared")),
        ) else {
            return st;
        };
        match UnixListener::bind_addr(&own) {
            Ok(l) => {
                st._held = Some(l);
                st.shared = UnixStream::connect_addr(&marker).is_ok();
                st.marker = Some(marker);
            }
            Err(_) => {
                // Another process holds this GPU: mark it shared (kept for our lifetime; a
                // marker someone else bound already says the same).
                st._held = UnixListener::bind_addr(&marker).ok();
                tracing::debug!(
                    ordinal,
                    "another process uses this GPU: small copies by the copy engine"
                );
            }
        }
        st
    }

    pub fn alone(ordinal: i32) -> bool {
        let mut v = STATE.lock().unwrap_or_else(|e| e.into_inner());
        let i = match v.iter().position(|s| s.ordinal == ordinal) {
            Some(i) => i,
            None => {
                v.push(first_look(ordinal));
                v.len() - 1
            }
        };
        let st = &mut v[i];
        if !st.shared && st.last.elapsed() > Duration::from_millis(10) {
            st.last = Instant::now();
            if let Some(m) = &st.marker {
                if UnixStream::connect_addr(m).is_ok() {
                    st.shared = true;
                    tracing::debug!(
                        ordinal,
                        "another process now uses this GPU: small copies by the copy engine"
                    );
                }
            }
        }
        !st.shared
    }
}

/// The shared structs' layouts (gpu::kabi's test holds them against kernels/resident.cuh).
#[cfg(test)]
pub(crate) fn layouts() -> Vec<crate::gpu::kabi::Layout> {
    use crate::gpu::kabi::layout;
    vec![
        layout!(
            "ResCmd",
            ResCmd,
            "seq" => seq, "kind" => kind, "op" => op, "type" => ty, "ok" => ok,
            "bytes" => bytes, "src" => src, "dst" => dst, "flagv" => flagv, "desc" => desc,
        ),
        layout!(
            "ResDesc",
            ResDesc,
            "nranks" => nranks, "rank" => rank, "slot" => slot, "peers" => peers,
            "host" => host,
        ),
        layout!(
            "ResDone",
            ResDone,
            "seq" => seq, "exited" => exited,
        ),
        layout!(
            "MidGrid",
            MidGrid,
            "cmd" => cmd, "gen" => gen,
        ),
        layout!(
            "MidDone",
            MidDone,
            "seq" => seq, "exited" => exited, "blk" => blk,
        ),
    ]
}

/// The header's `#define`s with their Rust values.
#[cfg(test)]
pub(crate) fn constants() -> Vec<(&'static str, u64)> {
    vec![
        ("RES_ALLREDUCE", RES_ALLREDUCE as u64),
        ("RES_ALLTOALL", RES_ALLTOALL as u64),
        ("RES_ALLGATHER", RES_ALLGATHER as u64),
        ("RES_COPY", RES_COPY as u64),
        ("RES_DATA_OFF", DATA_OFF as u64),
        ("RES_DESC_OFF", DESC_OFF as u64),
        ("RES_AR_TWO_SHOT", RES_AR_TWO_SHOT as u64),
        ("RES_MID_LL", RES_MID_LL as u64),
        ("RES_MID_LL128", RES_MID_LL128 as u64),
        ("RES_MID_BLOCKS_MAX", MID_BLOCKS_MAX as u64),
        ("RES_MID_DESC_OFF", MID_DESC_OFF as u64),
        ("RES_MID_DATA_OFF", MID_DATA_OFF as u64),
        ("RES_MID_GRID_BYTES", MID_GRID_BYTES as u64),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pull runs on one block per 4 KiB, at least one, at most the kernel's blocks.
    #[test]
    fn wide_pull_blocks_by_size() {
        assert_eq!(wide_copy_blocks(1, 32), 1);
        assert_eq!(wide_copy_blocks(4096, 32), 1);
        assert_eq!(wide_copy_blocks(4097, 32), 2);
        assert_eq!(wide_copy_blocks(32 << 10, 32), 8);
        assert_eq!(wide_copy_blocks(1 << 20, 32), 32);
        assert_eq!(wide_copy_blocks(1 << 20, 64), 64);
        assert_eq!(wide_copy_blocks(1 << 20, 0), 1);
    }

    /// Small copies through the resident kernel against the copy engine: every length class
    /// (inline, staged, word tails), unaligned device and host ends, both directions, and
    /// back-to-back reuse of the word area (stale tags must not pass).
    #[test]
    fn small_copies_match_the_copy_engine() {
        let Some(g) = crate::gpu::kernels_or_skip() else {
            return;
        };
        let d = g.device(0).unwrap();
        g.kernels(0).unwrap();
        if !small_copy_ready(0, 1, SmallCopy::ToHost) {
            crate::test_skip::gpu_skip(
                &crate::test_skip::current_test(),
                "another process uses GPU 0 (small copies stay on the copy engine)",
            );
            return;
        }
        let limit = small_copy_limit();
        let buf = cuda::with_context(d.ctx, || cuda::mem_alloc(2 * COPY_MAX + 64)).unwrap();
        let mut round = 0u8;
        for len in [
            1usize, 3, 4, 5, 8, 15, 16, 17, 31, 255, 1000, 4093, 4096, limit,
        ] {
            if len > limit {
                continue;
            }
            for off in [0usize, 1, 3, 8] {
                round = round.wrapping_add(1);
                let data: Vec<u8> = (0..len)
                    .map(|i| (i as u8).wrapping_mul(31) ^ round)
                    .collect();
                // SAFETY: buf holds 2 * COPY_MAX + 64 bytes; every copy is synchronous.
                unsafe {
                    // Host -> device by the kernel, read back by the copy engine.
                    let host = [vec![0xee; off], data.clone()].concat();
                    let r = copy_small(
                        0,
                        buf as usize + off,
                        host[off..].as_ptr() as usize,
                        len,
                        SmallCopy::FromHost,
                    );
                    r.expect("applies").unwrap();
                    let mut back = vec![0u8; len];
                    cuda::with_context(d.ctx, || {
                        cuda::memcpy_dtoh_async(&mut back, buf + off, d.stream)?;
                        cuda::stream_synchronize(d.stream)
                    })
                    .unwrap();
                    assert_eq!(back, data, "host to device len={len} off={off}");
                    // Device -> host by the kernel into an unaligned host buffer.
                    let mut out = vec![0x55u8; len + off + 1];
                    let r = copy_small(
                        0,
                        out[off..].as_mut_ptr() as usize,
                        buf as usize + off,
                        len,
                        SmallCopy::ToHost,
                    );
                    r.expect("applies").unwrap();
                    assert_eq!(
                        &out[off..off + len],
                        &data[..],
                        "device to host len={len} off={off}"
                    );
                    assert!(
                        out[..off].iter().all(|&b| b == 0x55),
                        "nothing written before"
                    );
                    assert_eq!(out[off + len], 0x55, "nothing written after");
                    // Device -> device by the kernel (the path of a pulled small message),
                    // into the buffer's upper half, read back by the copy engine.
                    let dst = buf as usize + COPY_MAX + 32 + (off ^ 1);
                    let r = copy_small(0, dst, buf as usize + off, len, SmallCopy::DevToDev);
                    r.expect("applies").unwrap();
                    let mut back = vec![0u8; len];
                    cuda::with_context(d.ctx, || {
                        cuda::memcpy_dtoh_async(&mut back, dst, d.stream)?;
                        cuda::stream_synchronize(d.stream)
                    })
                    .unwrap();
                    assert_eq!(back, data, "device to device len={len} off={off}");
                }
            }
        }
        // SAFETY: refused before anything is touched; then buf is freed once, unused after.
        unsafe {
            assert!(
                copy_small(0, 0, 0, limit + 1, SmallCopy::ToHost).is_none(),
                "too long: not here"
            );
            cuda::with_context(d.ctx, || {
                cuda::mem_free(buf);
                Ok(())
            })
            .unwrap();
        }
    }
}
