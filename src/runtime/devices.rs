//! What the engine and the GPU layer are handed from above, so that neither reaches into a
//! layer beside or above it:
//! - [`Cuda`]: the engine's device copies over `gpu/`, the CUDA implementation of
//!   [`DevCopy`], installed into the engine at MPI_Init;
//! - [`JobShm`]: the job's named shared host memory for the GPU paths without peer access
//!   (`gpu::shmem`), regions of the shared-memory transport.

use crate::engine::devcopy::{pending, DevCopy, HostStage, Pending, EXPORT_BYTES};
use crate::gpu::shmem::{SharedMem, SharedRegion};
use crate::transport::shm::{self, Region};

// The engine carries exports in fixed-size request-to-send payloads.
const _: () = assert!(crate::gpu::ipc::EXPORT_BYTES == EXPORT_BYTES);

/// The library's device copies: CUDA, through `gpu::p2p` and `gpu::pipe`.
pub struct Cuda;

impl Pending for crate::gpu::p2p::InFlight {
    fn done(&self) -> Result<bool, String> {
        crate::gpu::p2p::InFlight::done(self)
    }
}

impl Pending for crate::gpu::pipe::Ticket {
    fn done(&self) -> Result<bool, String> {
        crate::gpu::pipe::Ticket::done(self)
    }
}

impl DevCopy for Cuda {
    fn export_range(&self, addr: usize, len: usize) -> Option<Box<[u8]>> {
        crate::gpu::p2p::export_range(addr, len).map(|e| e.to_vec().into_boxed_slice())
    }

    fn worth_mapping(&self, peer: usize, export: &[u8], dst: usize, dev: bool, len: usize) -> bool {
        crate::gpu::p2p::worth_mapping(peer, export, dst, dev, len)
    }

    unsafe fn read(
        &self,
        peer: usize,
        export: &[u8],
        dst: usize,
        dev: bool,
        len: usize,
    ) -> Result<Option<Box<dyn Pending>>, String> {
        crate::gpu::p2p::read_ipc(peer, export, dst, dev, len).map(|p| p.map(pending))
    }

    unsafe fn write(
        &self,
        peer: usize,
        export: &[u8],
        src: usize,
        len: usize,
    ) -> Result<Option<Box<dyn Pending>>, String> {
        crate::gpu::p2p::write_ipc(peer, export, src, len).map(|p| p.map(pending))
    }

    fn pipe_offer(&self, me: usize, peer: usize) -> Option<Box<[u8]>> {
        crate::gpu::pipe::offer(&JobShm, me, peer).map(|d| d.to_vec().into_boxed_slice())
    }

    unsafe fn pipe_recv(
        &self,
        me: usize,
        peer: usize,
        desc: &[u8],
        dst: usize,
        dev: bool,
        len: usize,
    ) -> Result<(u64, Box<dyn Pending>), String> {
        crate::gpu::pipe::recv(&JobShm, me, peer, desc, dst, dev, len).map(|(s, t)| (s, pending(t)))
    }

    unsafe fn pipe_send(
        &self,
        me: usize,
        peer: usize,
        start: u64,
        src: usize,
        len: usize,
    ) -> Result<Box<dyn Pending>, String> {
        crate::gpu::pipe::send(me, peer, start, src, len).map(pending)
    }

    unsafe fn fill(
        &self,
        dst: usize,
        len: usize,
        read: &mut dyn FnMut(usize, &mut [u8]) -> bool,
    ) -> Result<bool, String> {
        crate::gpu::p2p::fill_device(dst, len, read)
    }

    fn staging(&self, dst: usize, len: usize) -> Option<HostStage> {
        crate::gpu::p2p::staging_for(dst, len).map(|b| Box::new(b) as HostStage)
    }

    unsafe fn htod(&self, dst: usize, data: &[u8]) -> Result<(), String> {
        crate::gpu::p2p::htod(dst, data)
    }

    unsafe fn dtoh(&self, src: usize, len: usize) -> Result<Vec<u8>, String> {
        crate::gpu::p2p::dtoh(src, len)
    }

    unsafe fn dtod(&self, dst: usize, src: usize, len: usize) -> Result<(), String> {
        crate::gpu::collmem::dtod(dst, src, len)
    }

    unsafe fn dtoh_stage(&self, src: usize, len: usize) -> Result<HostStage, String> {
        crate::gpu::p2p::dtoh_stage(src, len).map(|b| Box::new(b) as HostStage)
    }

    unsafe fn dtoh_start(
        &self,
        src: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<Box<dyn Pending>, String> {
        crate::gpu::p2p::chunk_copy(src, dst, len, true).map(pending)
    }

    unsafe fn htod_start(
        &self,
        dst: usize,
        src: *const u8,
        len: usize,
    ) -> Result<Box<dyn Pending>, String> {
        crate::gpu::p2p::chunk_copy(dst, src as *mut u8, len, false).map(pending)
    }
}

/// The job's named shared host memory: regions of the shared-memory transport,
/// `/dev/shm/gpumpi-<job id>-<tag>` (removed by the launcher's clean-up too).
pub struct JobShm;

impl JobShm {
    fn job() -> Result<&'static str, String> {
        shm::job_id().ok_or_else(|| "no shared-memory transport in this process".into())
    }
}

impl SharedMem for JobShm {
    fn create(&self, tag: &str, len: usize) -> Result<Box<dyn SharedRegion>, String> {
        let r = Region::create(Self::job()?, tag, len).map_err(|e| e.to_string())?;
        Ok(Box::new(r))
    }

    fn open(&self, tag: &str, len: usize) -> Result<Box<dyn SharedRegion>, String> {
        let r = Region::open(Self::job()?, tag, len).map_err(|e| e.to_string())?;
        Ok(Box::new(r))
    }
}

impl SharedRegion for Region {
    fn as_ptr(&self) -> *mut u8 {
        Region::as_ptr(self)
    }

    fn bytes(&self) -> usize {
        self.len()
    }

    fn unlink(&self) {
        Region::unlink(self)
    }
}
