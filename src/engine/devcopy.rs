//! The device-memory operations of the engine's protocols, behind one narrow trait: CUDA IPC
//! peer copies (a receiver's pull, a sender's push), the export of a receive buffer, the two
//! sides of a pipe through pinned shared host memory, and the host<->device copies of device
//! buffers meeting host protocols (single copies, page-locked rounds, gathering buffers).
//! The engine knows only this trait and plain sizes: the library installs the CUDA
//! implementation over `gpu/` (`runtime/devices.rs`) with [`crate::engine::Engine::set_device_copies`];
//! until then an engine has [`NoDevice`]. The engine's tests use a host-memory fake, so the
//! protocols around device buffers (PUT/DONE, copies finishing later, fallbacks to streaming)
//! are tested without a GPU.

/// Bytes of a device buffer's export as a request-to-send carries it (the device layer's
/// export format has exactly this size; its implementation of [`DevCopy`] checks that).
pub const EXPORT_BYTES: usize = 104;

/// Host memory that gathers a streamed message bound for device memory (page-locked where the
/// implementation can), handed back to it when dropped.
pub type HostStage = Box<dyn std::ops::DerefMut<Target = [u8]> + Send>;

/// A peer copy in flight.
pub trait Pending {
    /// Whether the copy has finished; an error: it failed.
    fn done(&self) -> Result<bool, String>;
}

/// A copy that finished when it was issued.
pub struct Finished;

impl Pending for Finished {
    fn done(&self) -> Result<bool, String> {
        Ok(true)
    }
}

/// A copy in flight as the engine keeps it.
pub fn pending(p: impl Pending + 'static) -> Box<dyn Pending> {
    Box::new(p)
}

/// See the module documentation.
pub trait DevCopy {
    /// Export bytes of the device buffer `addr..addr+len` for a peer, `None` when it is not
    /// exportable device memory.
    fn export_range(&self, addr: usize, len: usize) -> Option<Box<[u8]>>;

    /// Whether a pull of `len` bytes from `peer`'s exported buffer into `dst` (device memory
    /// of this process when `dev`) should map it now; `false`: the engine has the sender stream
    /// it instead (a small message from a buffer not seen before, where mapping would cost
    /// more than staging).
    fn worth_mapping(
        &self,
        _peer: usize,
        _export: &[u8],
        _dst: usize,
        _dev: bool,
        _len: usize,
    ) -> bool {
        true
    }

    /// Start copying `len` bytes of `peer`'s exported buffer to `dst` (device memory of this
    /// process when `dev`, else host memory); `None`: nothing to copy.
    ///
    /// # Safety
    /// `dst..dst+len` is writable and owned by the caller until the copy is done.
    unsafe fn read(
        &self,
        peer: usize,
        export: &[u8],
        dst: usize,
        dev: bool,
        len: usize,
    ) -> Result<Option<Box<dyn Pending>>, String>;

    /// Start copying `len` bytes of this process's device buffer `src` into `peer`'s exported
    /// buffer; `None`: nothing to copy.
    ///
    /// # Safety
    /// `src..src+len` is device memory left untouched until the copy is done.
    unsafe fn write(
        &self,
        peer: usize,
        export: &[u8],
        src: usize,
        len: usize,
    ) -> Result<Option<Box<dyn Pending>>, String>;

    /// Sender `me`: the descriptor of its pipe to `peer` for an RTS (made at the first call);
    /// `None`: no pipe (the engine stages the buffer).
    fn pipe_offer(&self, me: usize, peer: usize) -> Option<Box<[u8]>>;

    /// Receiver `me`: start taking `len` bytes from `peer`'s pipe (`desc`) into `dst` (device
    /// memory of this process when `dev`, else host memory); returns the number of the
    /// message's first chunk, for the sender, and the copy to poll.
    ///
    /// # Safety
    /// `dst..dst+len` is writable and owned by the caller until the copy is done.
    unsafe fn pipe_recv(
        &self,
        me: usize,
        peer: usize,
        desc: &[u8],
        dst: usize,
        dev: bool,
        len: usize,
    ) -> Result<(u64, Box<dyn Pending>), String>;

    /// Sender `me`: start writing `len` bytes of device buffer `src` into its pipe to `peer`
    /// as the message the receiver numbered `start`.
    ///
    /// # Safety
    /// `src..src+len` is device memory left untouched until the copy is done.
    unsafe fn pipe_send(
        &self,
        me: usize,
        peer: usize,
        start: u64,
        src: usize,
        len: usize,
    ) -> Result<Box<dyn Pending>, String>;

    /// Fill `len` bytes of device memory at `dst` from a host-side source, `read(offset, buf)`
    /// filling `buf` with the bytes at `offset` (false: the source failed); `Ok(false)` when
    /// `read` failed. Finished on return.
    ///
    /// # Safety
    /// `dst..dst+len` is writable device memory of this process owned by the caller.
    unsafe fn fill(
        &self,
        dst: usize,
        len: usize,
        read: &mut dyn FnMut(usize, &mut [u8]) -> bool,
    ) -> Result<bool, String>;

    /// Page-locked host memory to gather `len` bytes bound for device address `dst` (`None`:
    /// the caller copies piece by piece).
    fn staging(&self, dst: usize, len: usize) -> Option<HostStage>;

    /// Copy host bytes to device address `dst` (finished on return).
    ///
    /// # Safety
    /// `dst..dst+data.len()` is writable device memory of this process.
    unsafe fn htod(&self, dst: usize, data: &[u8]) -> Result<(), String>;

    /// The `len` bytes at device address `src`, copied to host memory.
    ///
    /// # Safety
    /// `src..src+len` is readable device memory of this process.
    unsafe fn dtoh(&self, src: usize, len: usize) -> Result<Vec<u8>, String>;

    /// Copy `len` bytes between device buffers of this process (a collective schedule's copy
    /// step on device operands); finished on return. The default goes through host memory.
    ///
    /// # Safety
    /// `src..src+len` is readable and `dst..dst+len` writable device memory of this process;
    /// the ranges do not overlap.
    unsafe fn dtod(&self, dst: usize, src: usize, len: usize) -> Result<(), String> {
        let v = self.dtoh(src, len)?;
        self.htod(dst, &v)
    }

    /// The `len` bytes at device address `src`, copied to host memory the implementation
    /// keeps for such copies (page-locked and reused where it can: a send staged whole, which
    /// its transport reads once); the default is [`DevCopy::dtoh`]'s new vector.
    ///
    /// # Safety
    /// `src..src+len` is readable device memory of this process.
    unsafe fn dtoh_stage(&self, src: usize, len: usize) -> Result<HostStage, String> {
        self.dtoh(src, len).map(|v| Box::new(v) as HostStage)
    }

    /// Start copying the `len` bytes at device address `src` to host memory `dst` (a chunk of
    /// a message pipelined to another node, `engine::devnet`); the copy to poll. The default
    /// copies before it returns.
    ///
    /// # Safety
    /// `src..src+len` is readable device memory of this process and `dst..dst+len` writable
    /// host memory, both left alone until the copy is done.
    unsafe fn dtoh_start(
        &self,
        src: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<Box<dyn Pending>, String> {
        let v = self.dtoh(src, len)?;
        std::ptr::copy_nonoverlapping(v.as_ptr(), dst, len);
        Ok(pending(Finished))
    }

    /// Start copying `len` bytes of host memory `src` to device address `dst` (a chunk of a
    /// message pipelined from another node); the copy to poll. The default copies before it
    /// returns.
    ///
    /// # Safety
    /// `dst..dst+len` is writable device memory of this process and `src..src+len` readable
    /// host memory, both left alone until the copy is done.
    unsafe fn htod_start(
        &self,
        dst: usize,
        src: *const u8,
        len: usize,
    ) -> Result<Box<dyn Pending>, String> {
        self.htod(dst, std::slice::from_raw_parts(src, len))?;
        Ok(pending(Finished))
    }
}

/// No device memory at all (an engine before the library installs its device copies): nothing
/// is exportable, no pipe is offered, and a device operation fails.
pub struct NoDevice;

const NO_DEVICE: &str = "no device copies in this engine";

impl DevCopy for NoDevice {
    fn export_range(&self, _addr: usize, _len: usize) -> Option<Box<[u8]>> {
        None
    }

    unsafe fn read(
        &self,
        _peer: usize,
        _export: &[u8],
        _dst: usize,
        _dev: bool,
        _len: usize,
    ) -> Result<Option<Box<dyn Pending>>, String> {
        Err(NO_DEVICE.into())
    }

    unsafe fn write(
        &self,
        _peer: usize,
        _export: &[u8],
        _src: usize,
        _len: usize,
    ) -> Result<Option<Box<dyn Pending>>, String> {
        Err(NO_DEVICE.into())
    }

    fn pipe_offer(&self, _me: usize, _peer: usize) -> Option<Box<[u8]>> {
        None
    }

    unsafe fn pipe_recv(
        &self,
        _me: usize,
        _peer: usize,
        _desc: &[u8],
        _dst: usize,
        _dev: bool,
        _len: usize,
    ) -> Result<(u64, Box<dyn Pending>), String> {
        Err(NO_DEVICE.into())
    }

    unsafe fn pipe_send(
        &self,
        _me: usize,
        _peer: usize,
        _start: u64,
        _src: usize,
        _len: usize,
    ) -> Result<Box<dyn Pending>, String> {
        Err(NO_DEVICE.into())
    }

    unsafe fn fill(
        &self,
        _dst: usize,
        _len: usize,
        _read: &mut dyn FnMut(usize, &mut [u8]) -> bool,
    ) -> Result<bool, String> {
        Err(NO_DEVICE.into())
    }

    fn staging(&self, _dst: usize, _len: usize) -> Option<HostStage> {
        None
    }

    unsafe fn htod(&self, _dst: usize, _data: &[u8]) -> Result<(), String> {
        Err(NO_DEVICE.into())
    }

    unsafe fn dtoh(&self, _src: usize, _len: usize) -> Result<Vec<u8>, String> {
        Err(NO_DEVICE.into())
    }
}
