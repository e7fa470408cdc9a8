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
//! - [`mpirun`]: client of our own `mpirun`'s wire-up server (`launcher` + `server`, over
//!   [`stream`]: a Unix socket, or TCP for ranks on other hosts); `mpirun` itself places ranks
//!   on hosts ([`hosts`]), forks those of its own host ([`procs`]) and starts the others'
//!   through a launch agent and a node daemon ([`remote`], [`daemon`]);
//! - [`pmix`]: PMIx client (Open MPI 5 `mpirun`/`prterun`, `srun --mpi=pmix`), libpmix dlopen'd;
//! - [`pmi1`]: PMI-1 text protocol (MPICH hydra `mpiexec`, `srun --mpi=pmi2`'s PMI-1 side);
//! - [`singleton`]: a process started without a launcher (one rank);
//! - [`fake`]: N threads in one process, for unit tests.
//!
//! [`node`] names each rank's node (`GPUMPI_NODE_ID`, else the launcher's name for it, else the
//! host name) and maps ranks to nodes.
//!
//! [`init`] walks an ordered list of methods, takes the first whose
//! environment is present (or the one `GPUMPI_BOOTSTRAP` names) and logs its
//! choice: mpirun (`GPUMPI_*` set), PMIx (`PMIX_NAMESPACE`/`PMIX_RANK`), PMI-1
//! (`PMI_FD`/`PMI_PORT`), singleton. A method whose variables are present but whose launcher
//! cannot be reached fails `MPI_Init` with an error naming it; it never falls through to a
//! singleton (N singletons instead of one job of N would be worse than an error).

pub mod daemon;
pub mod fake;
pub mod hosts;
pub mod launcher;
pub mod mpirun;
pub mod node;
pub mod pmi1;
pub mod pmix;
pub mod procs;
pub mod remote;
pub mod server;
pub mod singleton;
pub mod stream;
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
    fn local_rank(&self) -> usize {
        self.node_ranks()
            .iter()
            .position(|&r| r == self.rank())
            .unwrap_or(0)
    }
    /// Number of ranks on this node.
    fn local_size(&self) -> usize {
        self.node_ranks().len()
    }
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
    /// The job's secret when the launcher handed one to every rank (our mpirun's
    /// `GPUMPI_SECRET`); `None` under launchers that have none (PMIx, PMI-1): the runtime then
    /// shares one through the key-value store, which only the job's ranks read.
    fn secret(&self) -> Option<Vec<u8>> {
        None
    }
    /// The launcher's name for this rank's node, where it gives one: PMIx's `pmix.hname`,
    /// PMI-1's `PMI_HOSTNAME` (hydra: the host as its host list names it). `None` (our
    /// mpirun, which sets `GPUMPI_NODE_ID` instead; a singleton): [`node`] falls back to the
    /// host name.
    fn node_name(&self) -> Option<String> {
        None
    }
}

/// `n` random bytes from the kernel.
pub fn random_bytes(n: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut b = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

/// One way of bootstrapping, in the order [`init`] tries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Mpirun,
    Pmix,
    Pmi1,
    Singleton,
}

/// The methods `init` tries, in order.
pub const METHODS: &[Method] = &[
    Method::Mpirun,
    Method::Pmix,
    Method::Pmi1,
    Method::Singleton,
];

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Mpirun => "mpirun",
            Method::Pmix => "pmix",
            Method::Pmi1 => "pmi1",
            Method::Singleton => "singleton",
        }
    }
    /// Whether this method's environment is present.
    pub fn detect(self) -> bool {
        self.detect_in(|v| config::get(v).is_some())
    }
    /// Whether this method's environment is present, by `present(variable)`.
    pub fn detect_in(self, present: impl Fn(&str) -> bool) -> bool {
        self == Method::Singleton || self.env().iter().any(|v| present(v))
    }
    pub fn start(self) -> MpiResult<Box<dyn Bootstrap + Send>> {
        Ok(match self {
            Method::Mpirun => Box::new(mpirun::MpirunBootstrap::connect_from_env()?),
            Method::Pmix => Box::new(pmix::PmixBootstrap::connect_from_env()?),
            Method::Pmi1 => Box::new(pmi1::Pmi1::connect_from_env()?),
            Method::Singleton => Box::new(singleton::Singleton::new()),
        })
    }
}

impl Method {
    /// The variables whose presence selects this method (empty for the singleton).
    pub fn env(self) -> &'static [&'static str] {
        match self {
            Method::Mpirun => mpirun::ENV,
            Method::Pmix => pmix::ENV,
            Method::Pmi1 => pmi1::ENV,
            Method::Singleton => &[],
        }
    }
}

/// Pick the method: `forced` (the value of `GPUMPI_BOOTSTRAP`) or the first of [`METHODS`]
/// that `detect` accepts. Returns the method and why it was chosen.
pub fn choose(
    forced: Option<&str>,
    detect: impl Fn(Method) -> bool,
) -> MpiResult<(Method, String)> {
    let names: Vec<_> = METHODS.iter().map(|m| m.name()).collect();
    if let Some(f) = forced {
        return match METHODS.iter().find(|m| m.name() == f.trim()) {
            Some(m) => Ok((*m, "forced by GPUMPI_BOOTSTRAP".into())),
            None => crate::mpi_bail!(
                MPI_ERR_OTHER,
                "GPUMPI_BOOTSTRAP={f:?} is not a bootstrap method; use one of {}",
                names.join(", ")
            ),
        };
    }
    let m = *METHODS
        .iter()
        .find(|m| detect(**m))
        .unwrap_or(&Method::Singleton);
    let why = if m == Method::Singleton {
        format!(
            "no launcher variables set (looked for {})",
            METHODS
                .iter()
                .flat_map(|m| m.env().iter().copied())
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        format!(
            "first detected in the order {}: {} set",
            names.join(", "),
            m.env().join(" or ")
        )
    };
    Ok((m, why))
}

/// Choose and start the bootstrap of this process (see the module doc).
pub fn init() -> MpiResult<Box<dyn Bootstrap + Send>> {
    let forced = config::get("GPUMPI_BOOTSTRAP");
    let (method, why) = choose(forced.as_deref(), Method::detect)?;
    tracing::info!("bootstrap: {} ({why})", method.name());
    method.start().map_err(|mut e| {
        e.msg = format!(
            "bootstrap method {:?} ({why}) failed: {}",
            method.name(),
            e.msg
        );
        e
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_order_and_forcing() {
        let only = |set: &'static [Method]| move |m: Method| set.contains(&m);
        assert_eq!(choose(None, only(&[])).unwrap().0, Method::Singleton);
        assert_eq!(
            choose(None, only(&[Method::Pmi1, Method::Pmix])).unwrap().0,
            Method::Pmix
        );
        assert_eq!(
            choose(None, only(&[Method::Pmi1, Method::Mpirun, Method::Pmix]))
                .unwrap()
                .0,
            Method::Mpirun
        );
        let (m, why) = choose(None, only(&[Method::Pmi1])).unwrap();
        assert_eq!(m, Method::Pmi1);
        assert!(why.contains("PMI_FD"), "{why}");
        for (name, m) in [
            ("mpirun", Method::Mpirun),
            ("pmix", Method::Pmix),
            ("pmi1", Method::Pmi1),
            (" singleton", Method::Singleton),
        ] {
            assert_eq!(choose(Some(name), only(&[Method::Mpirun])).unwrap().0, m);
        }
        let e = choose(Some("slurm"), only(&[])).unwrap_err();
        assert!(
            e.msg.contains("pmix") && e.msg.contains("pmi1"),
            "{}",
            e.msg
        );
    }

    #[test]
    fn detection_from_environment_variables() {
        let env = |set: &'static [&'static str]| move |v: &str| set.contains(&v);
        for m in [Method::Mpirun, Method::Pmix, Method::Pmi1] {
            assert!(!m.detect_in(env(&[])), "{m:?}");
        }
        assert!(Method::Singleton.detect_in(env(&[])));
        assert!(Method::Pmi1.detect_in(env(&["PMI_PORT"])));
        assert!(Method::Pmi1.detect_in(env(&["PMI_FD"])));
        assert!(!Method::Pmix.detect_in(env(&["PMI_FD", "PMI_RANK"])));
        assert!(Method::Pmix.detect_in(env(&["PMIX_RANK"])));
        assert!(Method::Pmix.detect_in(env(&["PMIX_NAMESPACE"])));
        assert!(!Method::Pmix.detect_in(env(&["PMIX_SERVER_URI41"])));
        assert!(Method::Mpirun.detect_in(env(&["GPUMPI_SERVER"])));
        // What srun --mpi=pmix sets (it also sets PMI_* for PMI-2 clients in some setups):
        // PMIx comes first.
        let srun = env(&["PMIX_NAMESPACE", "PMIX_RANK", "PMI_FD"]);
        assert_eq!(choose(None, |m| m.detect_in(srun)).unwrap().0, Method::Pmix);
        let hydra = env(&["PMI_FD", "PMI_RANK", "PMI_SIZE"]);
        assert_eq!(
            choose(None, |m| m.detect_in(hydra)).unwrap().0,
            Method::Pmi1
        );
    }
}
