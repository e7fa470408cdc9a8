//! MPIX streams (MPICH's extension, declared in mpi-ext.h): the stream objects behind
//! `MPIX_Stream` handles, the state a stream communicator carries, and the requests of the
//! enqueued nonblocking calls. The CUDA side of the enqueue forms is `gpu::enqueue`.

use crate::gpu::enqueue::{Op, Queue, UserStream};
use crate::gpu::enqueue_kernel::Ready;
use crate::mpi::error::MpiResult;
use crate::mpi::handles::{Kind, Table};
use crate::mpi_bail;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

/// What an MPIX stream stands for on this rank.
pub enum Local {
    /// A stream without a GPU stream (MPIX_Stream_create without the info keys): a serial
    /// execution context of the application; the enqueue forms refuse it.
    Host,
    /// An application CUDA stream (info `type` = `cudaStream_t`, `value` = the handle's bytes).
    Cuda(UserStream),
}

pub struct StreamObj {
    pub local: Local,
}

static STREAMS: Mutex<Table<StreamObj>> = Mutex::new(Table::new(Kind::Stream));

/// A new stream's handle.
pub fn insert(s: StreamObj) -> usize {
    STREAMS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(Arc::new(s))
}

/// The stream behind `h` (MPI_ERR_ARG for a freed, stale or foreign handle).
pub fn get(h: usize, what: &str) -> MpiResult<Arc<StreamObj>> {
    match STREAMS.lock().unwrap_or_else(|e| e.into_inner()).get(h) {
        Some(s) => Ok(s),
        None => mpi_bail!(MPI_ERR_ARG, "{what} is not a valid MPIX_Stream ({h:#x})"),
    }
}

/// Free the handle `h`; refused while a communicator uses the stream (as MPICH does).
pub fn remove(h: usize, what: &str) -> MpiResult<()> {
    let mut t = STREAMS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(s) = t.get(h) else {
        mpi_bail!(MPI_ERR_ARG, "{what} is not a valid MPIX_Stream ({h:#x})");
    };
    // The table's reference and `s`: any other is a stream communicator's.
    let users = Arc::strong_count(&s) - 2;
    if users > 0 {
        mpi_bail!(
            MPI_ERR_ARG,
            "{what} is still attached to {users} communicator(s): free them first"
        );
    }
    t.remove(h);
    Ok(())
}

/// What `MPIX_Stream_comm_create(_multiplex)` attaches to the new communicator.
pub struct StreamComm {
    /// The local streams as given (handle, object; None for MPIX_STREAM_NULL).
    pub local: Vec<(usize, Option<Arc<StreamObj>>)>,
    /// The enqueue state, where the first local stream is a CUDA stream.
    pub queue: Option<Arc<Queue>>,
    /// The stream kernel of `MPIX_Allreduce_enqueue` (`gpu::enqueue_kernel`), or why the
    /// communicator never uses it (the same answer on every rank).
    pub kernel: Result<StreamKernel, String>,
}

/// A stream communicator's side of the stream kernel.
pub struct StreamKernel {
    /// The communicator's private duplicate (a handle), for the kernel's set-up exchange; it
    /// holds the scratch (its GPU state) and is freed with the communicator.
    pub setup_comm: AtomicUsize,
    /// None until the first call that takes the kernel: then the set-up's outcome (the same on
    /// every rank).
    pub state: Mutex<Option<Result<Ready, String>>>,
}

impl StreamComm {
    /// Wait for the stream's work and stop the worker (at `MPI_Comm_free`).
    pub fn release(&self) -> Result<(), String> {
        match &self.queue {
            Some(q) => q.release(),
            None => Ok(()),
        }
    }
}

/// The request of an enqueued nonblocking call: what the enqueued wait needs.
pub struct EnqReq {
    pub queue: Arc<Queue>,
    /// The communicator's handle (errors of the wait are raised on it).
    pub comm: usize,
    /// The call's memory and steps, taken over by the wait that completes it.
    pub pending: Mutex<Option<Op>>,
    /// The MPI_Request of the call, stored by the worker when it started the call.
    pub inner: Arc<AtomicUsize>,
    /// A staged receive: (device destination, staging source, bytes) to copy after the wait.
    pub copy_back: Option<(usize, usize, usize)>,
}

static REQS: Mutex<Table<EnqReq>> = Mutex::new(Table::new(Kind::EnqueueRequest));

pub fn insert_req(r: EnqReq) -> usize {
    REQS.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(Arc::new(r))
}

/// The enqueued request `h`, or None where `h` is not one.
pub fn get_req(h: usize) -> Option<Arc<EnqReq>> {
    REQS.lock().unwrap_or_else(|e| e.into_inner()).get(h)
}

pub fn remove_req(h: usize) {
    REQS.lock().unwrap_or_else(|e| e.into_inner()).remove(h);
}
