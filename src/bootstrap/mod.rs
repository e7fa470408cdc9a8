//! Bootstrap: how the ranks of a job find each other before any transport is up.
//!
//! Contract ([`Bootstrap`]): a process learns its rank, the job size, which
//! ranks share its node, and a job id that is unique per job and safe in
//! file names. It publishes small key/value pairs with [`Bootstrap::put`];
//! [`Bootstrap::fence`] is collective over the whole job and afterwards every
//! rank's puts made before the fence are readable with [`Bootstrap::get`].
//! A fence costs one round trip with the launcher whatever the job size.
//! [`Bootstrap::abort`] ends the whole job through the launcher.
//!
//! Implementations (one file each):
//! - [`mpirun`]: client of our own `mpirun`'s wire-up server (`launcher` + `server`);
//! - [`singleton`]: a process started without a launcher (one rank);
//! - [`fake`]: N threads in one process, for unit tests.
//!
//! [`init`] walks an ordered list of methods, takes the first whose
//! environment is present (or the one `GPUMPI_BOOTSTRAP` names) and logs its
//! choice. PMIx and PMI-1 will be added to that list ahead of the singleton.

pub mod fake;
pub mod launcher;
pub mod mpirun;
pub mod server;
pub mod singleton;
pub mod wire;

use crate::config;
use crate::mpi::error::MpiResult;

/// What the rest of the library needs from the launcher. All methods take
/// `&self` and implementations are `Send + Sync` (they synchronize
/// internally), so that the bootstrap can live in a global and `abort` can be
/// called from any thread, even while another waits in `fence`.
pub trait Bootstrap: Send + Sync {
    /// This process's rank in the job (MPI_COMM_WORLD).
    fn rank(&self) -> usize;
    /// Number of ranks in the job.
    fn size(&self) -> usize;
    /// Index of this rank among the ranks on its node.
    fn local_rank(&self) -> usize;
    /// Number of ranks on this node.
    fn local_size(&self) -> usize;
    /// The ranks on this node, ascending (contains `rank()` at `local_rank()`).
    fn node_ranks(&self) -> Vec<usize>;
    /// MPI_APPNUM: index of the application in an MPMD launch (0 here).
    fn appnum(&self) -> usize;
    /// Unique per job, made of `[A-Za-z0-9-]`: safe in file names
    /// (shared-memory segments are named `/dev/shm/gpumpi-<job_id>-*`).
    fn job_id(&self) -> &str;
    /// Publish `value` under `key` for this rank; visible to all ranks after the next fence.
    /// Putting a key again before the fence replaces the value.
    fn put(&self, key: &str, value: &[u8]);
    /// Collective over the job: after it returns, the puts of every rank made before
    /// its fence are visible through `get`.
    fn fence(&self) -> MpiResult<()>;
    /// The value `rank` put under `key` (visible after a fence); an error if there is none.
    fn get(&self, rank: usize, key: &str) -> MpiResult<Vec<u8>>;
    /// End the whole job with exit code `code`; `msg` is shown by the launcher.
    fn abort(&self, code: i32, msg: &str) -> !;
    /// Tell the launcher that this rank finished cleanly (MPI_Finalize).
    fn finalize(&self) -> MpiResult<()>;
}

/// One way of bootstrapping, in the order [`init`] tries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Mpirun,
    Singleton,
}

/// The methods `init` tries, in order.
pub const METHODS: &[Method] = &[Method::Mpirun, Method::Singleton];

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Mpirun => "mpirun",
            Method::Singleton => "singleton",
        }
    }
    /// Whether this method's environment is present.
    pub fn detect(self) -> bool {
        match self {
            Method::Mpirun => mpirun::detect(),
            Method::Singleton => true,
        }
    }
    pub fn start(self) -> MpiResult<Box<dyn Bootstrap + Send>> {
        Ok(match self {
            Method::Mpirun => Box::new(mpirun::MpirunBootstrap::connect_from_env()?),
            Method::Singleton => Box::new(singleton::Singleton::new()),
        })
    }
}

/// Choose and start the bootstrap of this process (see the module doc).
pub fn init() -> MpiResult<Box<dyn Bootstrap + Send>> {
    let method = match config::get("GPUMPI_BOOTSTRAP") {
        Some(forced) => match METHODS.iter().find(|m| m.name() == forced.trim()) {
            Some(m) => {
                tracing::info!("bootstrap: {} (forced by GPUMPI_BOOTSTRAP)", m.name());
                *m
            }
            None => {
                let names: Vec<_> = METHODS.iter().map(|m| m.name()).collect();
                crate::mpi_bail!(
                    MPI_ERR_OTHER,
                    "GPUMPI_BOOTSTRAP={forced:?} is not a bootstrap method; use one of {}",
                    names.join(", ")
                );
            }
        },
        None => {
            let m = *METHODS
                .iter()
                .find(|m| m.detect())
                .expect("singleton is always available");
            tracing::info!("bootstrap: {} (first detected of {:?})", m.name(), METHODS);
            m
        }
    };
    method.start().map_err(|mut e| {
        e.msg = format!("bootstrap method {:?} failed: {}", method.name(), e.msg);
        e
    })
}
