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
        name: "GPUMPI_ALLGATHERV_ALGORITHM",
        default: "",
        doc: "Force the allgatherv algorithm: ring. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
    },
    Param {
        name: "GPUMPI_ALLGATHER_ALGORITHM",
        default: "",
        doc: "Force the allgather algorithm: recursive_doubling, bruck, ring. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
    },
    Param {
        name: "GPUMPI_ALLREDUCE_ALGORITHM",
        default: "",
        doc: "Force the allreduce algorithm: recursive_doubling, rabenseifner, ring. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
    },
    Param {
        name: "GPUMPI_ALLTOALLV_ALGORITHM",
        default: "",
        doc: "Force the alltoallv algorithm: pairwise. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
    },
    Param {
        name: "GPUMPI_ALLTOALLW_ALGORITHM",
        default: "",
        doc: "Force the alltoallw algorithm: pairwise. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
    },
    Param {
        name: "GPUMPI_ALLTOALL_ALGORITHM",
        default: "",
        doc: "Force the alltoall algorithm: bruck, pairwise. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
    },
    Param {
        name: "GPUMPI_APPNUM",
        default: "0",
        doc: "Set by mpirun for each rank: MPI_APPNUM, the index of the application in the launch (always 0 for now).",
    },
    Param {
        name: "GPUMPI_BARRIER_ALGORITHM",
        default: "",
        doc: "Force the barrier algorithm: dissemination. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
    },
    Param {
        name: "GPUMPI_BCAST_ALGORITHM",
        default: "",
        doc: "Force the bcast algorithm: binomial, scatter_recursive_doubling_allgather, scatter_ring_allgather. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
    },
    Param {
        name: "GPUMPI_BIND",
        default: "core",
        doc: "Read by mpirun: `core` (default) binds rank i to the i-th CPU mpirun may run on when the job has 2 ranks or more and exactly as many ranks as those CPUs (like Open MPI's binding to cores), so two ranks never share a core while another one is idle (a smaller job is left to the scheduler, so that concurrent jobs do not pile onto the first CPUs); `none` never binds.",
    },
    Param {
        name: "GPUMPI_BOOTSTRAP",
        default: "",
        doc: "Forces the bootstrap method instead of detecting it: `mpirun` (our mpirun's wire-up server), `pmix` (PMIx server: Open MPI's mpirun/prterun, srun --mpi=pmix), `pmi1` (PMI-1: MPICH's hydra mpiexec) or `singleton` (one rank, no launcher). Unset: the first method whose environment is present, in the order mpirun, pmix, pmi1, singleton.",
    },
    Param {
        name: "GPUMPI_BOOTSTRAP_TIMEOUT",
        default: "30",
        doc: "Seconds a rank waits for its launcher before failing with an error: mpirun's wire-up server to answer its hello, PMIx_Init to return, a PMI-1 connect or reply (fences/barriers themselves have no time limit).",
    },
    Param {
        name: "GPUMPI_COLL_TUNING",
        default: "",
        doc: "Path of a collective tuning table replacing the built-in src/coll/tuning.txt (same format: `<collective> [conditions] <algorithm>` per line, first match wins). Unset = built-in table.",
    },
    Param {
        name: "GPUMPI_CUDA",
        default: "1",
        doc: "CUDA support: 1 = on (the driver is loaded lazily, only once the application itself has loaded libcuda; device and managed buffers are then accepted by every call), 0 = off (every buffer is taken as host memory and CUDA is never loaded).",
    },
    Param {
        name: "GPUMPI_CUDA_IPC",
        default: "1",
        doc: "CUDA IPC between the ranks of a node: 1 = device buffers are exported with legacy IPC handles, so peers copy them directly (point-to-point messages above the eager limit, GPU-native collectives); 0 = never, as when P2P is unavailable (point-to-point device data is staged through host memory; GPU-native collectives go through pinned shared host memory, docs/GPU.md).",
    },
    Param {
        name: "GPUMPI_CUDA_IPC_CACHE",
        default: "128",
        doc: "Mappings of peers' device buffers kept per device (the registration cache, keyed by peer and buffer id; least recently used first out; a peer's reallocation at an overlapping address closes the stale mapping).",
    },
    Param {
        name: "GPUMPI_CUDA_PACK",
        default: "1",
        doc: "Pack and unpack derived datatypes on device (not managed) buffers with the GPU pack kernel (`0`: on the host, through a copy of the layout's span). Needs the library's CUDA kernels.",
    },
    Param {
        name: "GPUMPI_CUDA_PACK_LISTS",
        default: "4m",
        doc: "Most bytes of run lists of GPU-packed datatypes kept (24 bytes per run, per device in device memory and on the host; least recently used types first out, at most 32 types). A type whose list is larger is packed on the host; vector-like types need no list.",
    },
    Param {
        name: "GPUMPI_CUDA_PTR_CACHE",
        default: "256",
        doc: "Entries of the CUDA pointer-classification cache (allocations by address range, confirmed by the driver's buffer id so freed-and-reallocated memory is never misclassified).",
    },
    Param {
        name: "GPUMPI_CUDA_STAGING_POOL",
        default: "256m",
        doc: "Most bytes of page-locked host memory kept for staging device buffers (power-of-two buffers of at least 64 KiB, reused); beyond it staging uses ordinary heap memory.",
    },
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
        name: "GPUMPI_EXSCAN_ALGORITHM",
        default: "",
        doc: "Force the exscan algorithm: recursive_doubling. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
    },
    Param {
        name: "GPUMPI_GATHERV_ALGORITHM",
        default: "",
        doc: "Force the gatherv algorithm: linear. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
    },
    Param {
        name: "GPUMPI_GATHER_ALGORITHM",
        default: "",
        doc: "Force the gather algorithm: binomial. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
    },
    Param {
        name: "GPUMPI_GPU_BLOCKS",
        default: "0",
        doc: "Most thread blocks of one kernel of the GPU-native collectives (and of the kernel peer copy); 0 = one per SM of the device.",
    },
    Param {
        name: "GPUMPI_GPU_COLL",
        default: "auto",
        doc: "GPU-native collectives (allreduce, alltoall, allgather, bcast, reduce, reduce_scatter_block with device buffers on every rank, through CUDA IPC, or through pinned shared host memory with GPUMPI_CUDA_IPC=0): auto = attempted on nodes with an NVIDIA driver (/dev/nvidiactl), 1 = always attempted, 0 = never (device buffers are staged). Must be the same on every rank. Attempting costs one small host allgather per blocking call of those collectives, also for host buffers.",
    },
    Param {
        name: "GPUMPI_GPU_COLL_TUNING",
        default: "",
        doc: "Path of a table replacing the built-in src/gpu/tuning.txt (GPU-native algorithm per collective, size and rank count; same format as GPUMPI_COLL_TUNING; `staged` = host path). Must be the same on every rank.",
    },
    Param {
        name: "GPUMPI_GPU_HOST_CHUNK",
        default: "1048576",
        doc: "Without CUDA IPC (GPUMPI_CUDA_IPC=0 or no P2P): most bytes per rank of one round of the collectives pipelined through pinned shared host memory (64 KiB - 64 MiB, a multiple of 4 KiB; a call runs in about 4 rounds, at least 256 KiB each). Each rank's region per communicator holds GPUMPI_GPU_HOST_DEPTH x (ranks + 1) of them plus 1 MiB for the resident kernel. Must be the same on every rank.",
    },
    Param {
        name: "GPUMPI_GPU_HOST_DEPTH",
        default: "2",
        doc: "Without CUDA IPC: rounds of the host-memory pipelines in flight at once (slots per stage buffer, 2-8). Each rank's region per communicator holds depth x (ranks + 1) x GPUMPI_GPU_HOST_CHUNK bytes; on the 4 x H200 machine 2 was fastest (deeper regions fall out of the CPU caches). Must be the same on every rank.",
    },
    Param {
        name: "GPUMPI_GPU_HOST_KERNEL",
        default: "1M",
        doc: "Without CUDA IPC: most bytes per rank of one round of the kernel-driven allreduce through pinned shared host memory (64 KiB - 16 MiB, a multiple of 4 KiB; one kernel per rank moves every round, its blocks handing rounds to the peers' blocks through counters in host memory); 0 = the stream pipeline of GPUMPI_GPU_HOST_CHUNK instead. Used when every rank of the communicator has a GPU of its own and no rank runs at MPI_THREAD_MULTIPLE (its kernels wait for each other's: two communicators' kernels launched in different orders could each hold the SMs the other needs). Each rank's region per communicator grows by 2 x (ranks + 1) of them. Must be the same on every rank.",
    },
    Param {
        name: "GPUMPI_GPU_HOST_KERNEL_BLOCKS",
        default: "128",
        doc: "Without CUDA IPC: blocks of the kernel-driven allreduce (GPUMPI_GPU_HOST_KERNEL), rounded up to a power of two, at most 128. Must be the same on every rank.",
    },
    Param {
        name: "GPUMPI_GPU_HOST_KERNEL_MAX",
        default: "0",
        doc: "Without CUDA IPC: the largest allreduce (bytes) that takes the kernel-driven path (GPUMPI_GPU_HOST_KERNEL); larger ones take the stream pipeline; 0 = every size. Must be the same on every rank.",
    },
    Param {
        name: "GPUMPI_GPU_IPC_MIN",
        default: "0",
        doc: "Bytes above which a contiguous point-to-point send from device memory that CUDA IPC can share goes by device rendezvous (the receiver copies it peer to local: small copies through its GPU's resident kernel, one host <-> kernel round trip; larger ones by the copy engine) instead of eager staging through host memory (a copy to the host at the sender and one to the device at the receiver). 0: every non-empty message. Read by the sending rank.",
    },
    Param {
        name: "GPUMPI_GPU_P2P_COPY",
        default: "ce",
        doc: "How a point-to-point peer copy of an exported device buffer (the receiver's pull or the sender's push, GPUMPI_GPU_P2P_PUSH) is made: ce = copy engines (cuMemcpyAsync), kernel = gpumpi's copy kernel (SMs copying over NVLink).",
    },
    Param {
        name: "GPUMPI_GPU_P2P_PUSH",
        default: "4M",
        doc: "Bytes (suffixes k, m, g) from which a point-to-point message between two exported device buffers (CUDA IPC) is written by the sender into the receiver's buffer (push) instead of read by the receiver (pull); `off` = always pull. Read by the receiving rank.",
    },
    Param {
        name: "GPUMPI_GPU_PIPE",
        default: "2M",
        doc: "Bytes per slot (64 KiB - 64 MiB, a multiple of 4 KiB; suffixes k, m, g) of the pipes that carry point-to-point device messages above the eager limit when CUDA IPC cannot share the sender's buffer (GPUMPI_CUDA_IPC=0, no peer access, memory without an IPC handle): pinned shared host memory per sender and receiver, filled by the sender's copy engines and emptied by the receiver's. 0 = no pipes: such a send is copied to host memory whole and the receiver reads it with a single-copy read. The sender's value is used for its pipes.",
    },
    Param {
        name: "GPUMPI_GPU_PIPE_DEPTH",
        default: "4",
        doc: "Slots per pipe (2-16; see GPUMPI_GPU_PIPE): each pair of ranks that sends device messages through pipes holds GPUMPI_GPU_PIPE x GPUMPI_GPU_PIPE_DEPTH bytes (+4 KiB) of page-locked shared host memory per direction. The sender's value is used for its pipes.",
    },
    Param {
        name: "GPUMPI_GPU_RESIDENT",
        default: "1",
        doc: "Small blocking allreduce/alltoall/allgather (at most 16 KiB per vector or block; 64 KiB with GPUMPI_CUDA_IPC=0, scratch in host memory) on device buffers, one rank per GPU, outside MPI_THREAD_MULTIPLE: 1 = through a resident kernel (one block polling mapped host memory; no launch or stream synchronize per call), 0 = through the launched GPU-native path or staging. Must be the same on every rank.",
    },
    Param {
        name: "GPUMPI_GPU_RESIDENT_IDLE_US",
        default: "100",
        doc: "Microseconds the resident kernel waits for the next command before it exits (it holds one SM while it runs, and an application's cudaDeviceSynchronize or cudaFree waits for it); the next call relaunches it.",
    },
    Param {
        name: "GPUMPI_GPU_SMALL_COPY",
        default: "4096",
        doc: "Bytes up to which host<->device staging copies (point-to-point messages on device buffers, other staging) go through the resident kernel (one block polling mapped host memory, no launch or stream synchronize per copy; used once the CUDA kernels are loaded, and only while no other process uses the GPU); larger ones, and all with 0, by the copy engine (cuMemcpyAsync plus a stream synchronize). At most 16384. A receiver's pull of a small device message from a peer GPU (`GPUMPI_GPU_IPC_MIN`) takes the resident kernel up to 16384 bytes whatever this value, except with 0.",
    },
    Param {
        name: "GPUMPI_JOB_ID",
        default: "",
        doc: "Set by mpirun: the job id, unique per job and made of [A-Za-z0-9-] (shared-memory segments are /dev/shm/gpumpi-<job_id>-*).",
    },
    Param {
        name: "GPUMPI_LOCAL_RANK",
        default: "",
        doc: "Set by mpirun: the rank's index among the ranks of its node (usable before MPI_Init, e.g. to pick a GPU).",
    },
    Param {
        name: "GPUMPI_LOCAL_SIZE",
        default: "",
        doc: "Set by mpirun: the number of ranks on the rank's node.",
    },
    Param {
        name: "GPUMPI_OVERSUBSCRIBE",
        default: "",
        doc: "Read by mpirun: 1 allows more ranks than cores, like --oversubscribe.",
    },
    Param {
        name: "GPUMPI_PMIX_GDS",
        default: "hash",
        doc: "The PMIx data-store (gds) module the pmix bootstrap asks libpmix for, by setting PMIX_MCA_gds before PMIx_Init unless PMIX_MCA_gds is already set. Empty = libpmix's own choice (shmem2 under Open MPI 5: 100-300 ms PMIx_Init at 8 ranks on 2 cores, against 7-50 ms with hash).",
    },
    Param {
        name: "GPUMPI_PMIX_LIB",
        default: "",
        doc: "Path of libpmix.so.2 for the pmix bootstrap; when set, the only library tried. Unset: lib/, lib/openmpi/, lib64/ next to a bin/ on PATH holding prterun or pmix_info (the launcher's own), then libpmix.so.2 and libpmix.so from the library path.",
    },
    Param {
        name: "GPUMPI_RANK",
        default: "",
        doc: "Set by mpirun: the rank of the process in MPI_COMM_WORLD.",
    },
    Param {
        name: "GPUMPI_REDUCE_ALGORITHM",
        default: "",
        doc: "Force the reduce algorithm: binomial, rabenseifner. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
    },
    Param {
        name: "GPUMPI_REDUCE_SCATTER_ALGORITHM",
        default: "",
        doc: "Force the reduce_scatter algorithm: recursive_halving, recursive_halving_ordered, pairwise. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
    },
    Param {
        name: "GPUMPI_REDUCE_SCATTER_BLOCK_ALGORITHM",
        default: "",
        doc: "Force the reduce_scatter_block algorithm: recursive_halving, recursive_halving_ordered, pairwise. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
    },
    Param {
        name: "GPUMPI_SCAN_ALGORITHM",
        default: "",
        doc: "Force the scan algorithm: recursive_doubling. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
    },
    Param {
        name: "GPUMPI_SCATTERV_ALGORITHM",
        default: "",
        doc: "Force the scatterv algorithm: linear. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
    },
    Param {
        name: "GPUMPI_SCATTER_ALGORITHM",
        default: "",
        doc: "Force the scatter algorithm: binomial. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
    },
    Param {
        name: "GPUMPI_SECRET",
        default: "",
        doc: "Set by mpirun: the per-job random secret (hex) a rank presents to the wire-up server.",
    },
    Param {
        name: "GPUMPI_SERVER",
        default: "",
        doc: "Set by mpirun: path of the wire-up server's Unix socket (in a private 0700 directory). Its presence (or that of GPUMPI_JOB_ID, GPUMPI_RANK, GPUMPI_SECRET, GPUMPI_SIZE) selects the mpirun bootstrap.",
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
        name: "GPUMPI_SHM_COLL_MAX",
        default: "1k",
        doc: "Largest message (bytes, at most 1k) of the flag-based shared-memory path of blocking \
              MPI_Barrier, MPI_Bcast, MPI_Reduce and MPI_Allreduce on MPI_COMM_WORLD (predefined ops): \
              each rank publishes into a slot of its segment and reads the others', with no \
              point-to-point messages. 0 disables the path. Must be the same on every rank.",
    },
    Param {
        name: "GPUMPI_SHM_RING_BYTES",
        default: "128k",
        doc: "Bytes of each shared-memory ring (one per sender in every rank's inbox), rounded up to \
              a power of two, at least 1k. Per-rank segment = 4096 + (ranks - 1) x (256 + ring bytes).",
    },
    Param {
        name: "GPUMPI_SIZE",
        default: "",
        doc: "Set by mpirun: the number of ranks in MPI_COMM_WORLD.",
    },
    Param {
        name: "GPUMPI_UNIVERSE_SIZE",
        default: "",
        doc: "Set by mpirun: MPI_UNIVERSE_SIZE (the number of ranks launched).",
    },
    Param {
        name: "PATH",
        default: "",
        doc: "Read by the pmix bootstrap to find libpmix next to the launcher (see GPUMPI_PMIX_LIB).",
    },
    Param {
        name: "PMIX_MCA_gds",
        default: "",
        doc: "libpmix's own choice of data-store module; when set, gpumpi leaves it alone (see GPUMPI_PMIX_GDS).",
    },
    Param {
        name: "PMIX_NAMESPACE",
        default: "",
        doc: "Set by a PMIx launcher (Open MPI mpirun/prterun, srun --mpi=pmix): the job's namespace. Its presence (or PMIX_RANK's) selects the pmix bootstrap.",
    },
    Param {
        name: "PMIX_RANK",
        default: "",
        doc: "Set by a PMIx launcher: the process's rank. Its presence (or PMIX_NAMESPACE's) selects the pmix bootstrap.",
    },
    Param {
        name: "PMIX_SERVER_URI2",
        default: "",
        doc: "Set by a PMIx launcher: where its server listens (v2 clients). The pmix bootstrap fails at once, naming these, when PMIX_NAMESPACE/PMIX_RANK are set but none of the PMIX_SERVER_URI* variables is.",
    },
    Param {
        name: "PMIX_SERVER_URI21",
        default: "",
        doc: "Set by a PMIx launcher: server address (v2.1 clients); see PMIX_SERVER_URI2.",
    },
    Param {
        name: "PMIX_SERVER_URI3",
        default: "",
        doc: "Set by a PMIx launcher: server address (v3 clients); see PMIX_SERVER_URI2.",
    },
    Param {
        name: "PMIX_SERVER_URI4",
        default: "",
        doc: "Set by a PMIx launcher: server address (v4 clients); see PMIX_SERVER_URI2.",
    },
    Param {
        name: "PMIX_SERVER_URI41",
        default: "",
        doc: "Set by a PMIx launcher: server address (v4.1 clients); see PMIX_SERVER_URI2.",
    },
    Param {
        name: "PMI_FD",
        default: "",
        doc: "Set by a PMI-1 launcher (MPICH hydra mpiexec): the inherited socket to the launcher, with PMI_RANK and PMI_SIZE. Its presence (or PMI_PORT's) selects the pmi1 bootstrap; a value that is not an open socket is an error.",
    },
    Param {
        name: "PMI_ID",
        default: "",
        doc: "Set by a PMI-1 launcher along with PMI_PORT: the id sent in the initack exchange (default 0).",
    },
    Param {
        name: "PMI_PORT",
        default: "",
        doc: "Set by a PMI-1 launcher instead of PMI_FD: host:port of its PMI server (rank and size then come from the server).",
    },
    Param {
        name: "PMI_RANK",
        default: "",
        doc: "Set by a PMI-1 launcher with PMI_FD: the rank of the process.",
    },
    Param {
        name: "PMI_SIZE",
        default: "",
        doc: "Set by a PMI-1 launcher with PMI_FD: the number of ranks.",
    },
];

fn lookup(name: &str) -> &'static Param {
    PARAMS.iter().find(|p| p.name == name).unwrap_or_else(|| {
        panic!("environment variable {name} is not registered in config::PARAMS")
    })
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
        tracing::warn!(
            "{name}={v:?} is not a number; using the default {:?}",
            p.default
        );
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
            assert!(
                doc.contains(p.name),
                "docs/ENV.md does not document {}",
                p.name
            );
        }
    }

    #[test]
    fn params_sorted_and_unique() {
        for w in PARAMS.windows(2) {
            assert!(
                w[0].name < w[1].name,
                "{} / {} out of order",
                w[0].name,
                w[1].name
            );
        }
    }
}

/// Install the tracing subscriber for `GPUMPI_DEBUG` (once per process; later calls do nothing).
/// Lines go to stderr, prefixed with the process id so interleaved ranks stay readable.
pub fn init_logging() {
    use std::sync::Once;
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let level = match get("GPUMPI_DEBUG").as_deref() {
            None | Some("0") | Some("") => return,
            Some("1") => tracing::Level::INFO,
            Some("2") => tracing::Level::DEBUG,
            _ => tracing::Level::TRACE,
        };
        let _ = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer(std::io::stderr)
            .with_target(false)
            .without_time()
            .try_init();
        tracing::info!(pid = std::process::id(), "gpumpi debug log enabled");
    });
}
