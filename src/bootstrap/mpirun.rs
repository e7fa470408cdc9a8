//! Client of our `mpirun`'s wire-up server (see [`super::wire`] for the protocol
//! and [`super::launcher`] for the environment mpirun gives each rank).

use super::stream::Stream;
use super::wire::{self, Msg};
use super::Bootstrap;
use crate::config;
use crate::mpi::error::{MpiError, MpiResult};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// The variables our mpirun sets; any one of them present selects this method, and a missing
/// one is then an error (a half-set environment must not silently become a singleton).
pub const ENV: &[&str] = &[
    "GPUMPI_JOB_ID",
    "GPUMPI_RANK",
    "GPUMPI_SECRET",
    "GPUMPI_SERVER",
    "GPUMPI_SIZE",
];

/// Whether this process was started by our mpirun.
pub fn detect() -> bool {
    ENV.iter().any(|v| config::get(v).is_some())
}

pub struct MpirunBootstrap {
    rank: usize,
    size: usize,
    node_ranks: Vec<usize>,
    appnum: usize,
    job_id: String,
    server: String,
    secret: Vec<u8>,
    conn: Mutex<Stream>,
    pending: Mutex<Vec<(String, Vec<u8>)>>,
    visible: Mutex<HashMap<(usize, String), Vec<u8>>>,
}

fn env_required(name: &str) -> MpiResult<String> {
    config::get(name).ok_or_else(|| {
        crate::mpi_err!(
            MPI_ERR_OTHER,
            "mpirun bootstrap: {name} is not set (the process was not started by gpumpi's mpirun?)"
        )
    })
}

fn env_usize(name: &str) -> MpiResult<usize> {
    let v = env_required(name)?;
    v.trim().parse().map_err(|_| {
        crate::mpi_err!(
            MPI_ERR_OTHER,
            "mpirun bootstrap: {name}={v:?} is not a non-negative integer"
        )
    })
}

impl MpirunBootstrap {
    /// Connect to the server named by the environment mpirun sets and say hello.
    pub fn connect_from_env() -> MpiResult<Self> {
        let server = env_required("GPUMPI_SERVER")?;
        let job_id = env_required("GPUMPI_JOB_ID")?;
        let secret_hex = env_required("GPUMPI_SECRET")?;
        let rank = env_usize("GPUMPI_RANK")?;
        let size = env_usize("GPUMPI_SIZE")?;
        let secret = wire::from_hex(secret_hex.trim()).ok_or_else(|| {
            crate::mpi_err!(
                MPI_ERR_OTHER,
                "mpirun bootstrap: GPUMPI_SECRET is not a hex string"
            )
        })?;
        if rank >= size {
            crate::mpi_bail!(
                MPI_ERR_OTHER,
                "mpirun bootstrap: GPUMPI_RANK={rank} is not below GPUMPI_SIZE={size}"
            );
        }
        if job_id.is_empty()
            || !job_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            crate::mpi_bail!(
                MPI_ERR_OTHER,
                "mpirun bootstrap: GPUMPI_JOB_ID={job_id:?} must be made of [A-Za-z0-9-]"
            );
        }
        let timeout =
            Duration::from_secs(config::get_usize("GPUMPI_BOOTSTRAP_TIMEOUT").max(1) as u64);
        Self::connect(&server, &job_id, rank, size, &secret, timeout)
    }

    /// Connect to the wire-up server at `server` (a Unix socket path or `tcp://IP:PORT`).
    pub fn connect(
        server: &str,
        job_id: &str,
        rank: usize,
        size: usize,
        secret: &[u8],
        timeout: Duration,
    ) -> MpiResult<Self> {
        let fail = |what: String| -> MpiError {
            crate::mpi_err!(
                MPI_ERR_OTHER,
                "mpirun bootstrap: wire-up server GPUMPI_SERVER={server}: {what}"
            )
        };
        let mut s = Stream::connect(server, timeout).map_err(|e| {
            fail(format!(
                "cannot connect: {e} (is the job's mpirun still running?)"
            ))
        })?;
        s.set_read_timeout(Some(timeout))
            .map_err(|e| fail(e.to_string()))?;
        s.set_write_timeout(Some(timeout))
            .map_err(|e| fail(e.to_string()))?;
        let timed_out = |e: &std::io::Error| {
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            )
        };
        let nonce = wire::read_challenge(&mut s).map_err(|e| match timed_out(&e) {
            true => fail(format!(
                "no challenge (no reply to hello) within {timeout:?} (GPUMPI_BOOTSTRAP_TIMEOUT)"
            )),
            false => fail(format!("reading the server's challenge: {e}")),
        })?;
        let hello = Msg::Hello {
            version: wire::PROTOCOL_VERSION,
            rank: rank as u32,
            pid: std::process::id(),
            proof: wire::proof(secret, &nonce, "hello"),
        };
        wire::write_msg(&mut s, &hello).map_err(|e| fail(format!("sending hello: {e}")))?;
        let (node_ranks, appnum) = match wire::read_msg(&mut s) {
            Ok(Msg::Welcome { node_ranks, appnum }) => (
                node_ranks
                    .into_iter()
                    .map(|r| r as usize)
                    .collect::<Vec<_>>(),
                appnum as usize,
            ),
            Ok(Msg::Error { msg }) => return Err(fail(format!("refused rank {rank}: {msg}"))),
            Ok(m) => return Err(fail(format!("unexpected reply to hello: {m:?}"))),
            Err(e) if timed_out(&e) => {
                return Err(fail(format!(
                    "no reply to hello within {timeout:?} (GPUMPI_BOOTSTRAP_TIMEOUT)"
                )))
            }
            Err(e) => return Err(fail(format!("reading the reply to hello: {e}"))),
        };
        if !node_ranks.contains(&rank) {
            return Err(fail(format!(
                "rank {rank} is not in its own node's rank list {node_ranks:?}"
            )));
        }
        // Fences legitimately wait for slow ranks: no read timeout from now on.
        // A dead server closes the socket, which ends any wait.
        s.set_read_timeout(None).map_err(|e| fail(e.to_string()))?;
        tracing::debug!("mpirun bootstrap: rank {rank} of {size} connected to {server}");
        Ok(MpirunBootstrap {
            rank,
            size,
            node_ranks,
            appnum,
            job_id: job_id.to_string(),
            server: server.to_string(),
            secret: secret.to_vec(),
            conn: Mutex::new(s),
            pending: Mutex::new(Vec::new()),
            visible: Mutex::new(HashMap::new()),
        })
    }
}

impl Bootstrap for MpirunBootstrap {
    fn secret(&self) -> Option<Vec<u8>> {
        Some(self.secret.clone())
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn node_ranks(&self) -> Vec<usize> {
        self.node_ranks.clone()
    }
    fn appnum(&self) -> usize {
        self.appnum
    }
    fn job_id(&self) -> &str {
        &self.job_id
    }
    fn put(&self, key: &str, value: &[u8]) {
        let mut p = self.pending.lock().unwrap();
        p.retain(|(k, _)| k != key);
        p.push((key.to_string(), value.to_vec()));
    }
    fn fence(&self) -> MpiResult<()> {
        let puts = std::mem::take(&mut *self.pending.lock().unwrap());
        let mut conn = self.conn.lock().unwrap();
        let lost = |e: std::io::Error| {
            crate::mpi_err!(
                MPI_ERR_OTHER,
                "mpirun bootstrap: fence: lost the connection to mpirun ({}): {e}",
                self.server
            )
        };
        wire::write_msg(&mut *conn, &Msg::Fence { puts }).map_err(lost)?;
        match wire::read_msg(&mut *conn).map_err(lost)? {
            Msg::FenceDone { kvs } => {
                let mut vis = self.visible.lock().unwrap();
                for (r, k, v) in kvs {
                    vis.insert((r as usize, k), v);
                }
                Ok(())
            }
            m => crate::mpi_bail!(
                MPI_ERR_INTERN,
                "mpirun bootstrap: fence: unexpected reply {m:?}"
            ),
        }
    }
    fn get(&self, rank: usize, key: &str) -> MpiResult<Vec<u8>> {
        if rank >= self.size {
            crate::mpi_bail!(
                MPI_ERR_RANK,
                "bootstrap get: rank {rank} is not in a job of {}",
                self.size
            );
        }
        match self.visible.lock().unwrap().get(&(rank, key.to_string())) {
            Some(v) => Ok(v.clone()),
            None => crate::mpi_bail!(
                MPI_ERR_NAME,
                "bootstrap get: rank {rank} put no key {key:?} before the last fence"
            ),
        }
    }
    fn abort(&self, code: i32, msg: &str) -> ! {
        // A fresh connection: the main one may be held by another thread waiting in a fence.
        let sent = Stream::connect(&self.server, Duration::from_secs(5)).and_then(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            let nonce = wire::read_challenge(&mut s)?;
            let m = Msg::Abort {
                rank: self.rank as u32,
                proof: wire::proof(&self.secret, &nonce, "abort"),
                code,
                msg: clip(msg, wire::MAX_PREAUTH_FRAME / 2).to_string(),
            };
            wire::write_msg(&mut s, &m)?;
            wire::read_msg(&mut s)
        });
        match sent {
            // mpirun prints the message and kills the job; give it the time to do so.
            Ok(Msg::Ok) => std::thread::sleep(Duration::from_secs(5)),
            // Exiting non-zero makes mpirun stop the job all the same.
            other => eprintln!(
                "gpumpi: rank {} called abort({code}) and could not tell mpirun ({other:?}): {msg}",
                self.rank
            ),
        }
        std::process::exit(if code == 0 { 1 } else { code });
    }
    fn finalize(&self) -> MpiResult<()> {
        let mut conn = self.conn.lock().unwrap();
        let lost = |e: std::io::Error| {
            crate::mpi_err!(
                MPI_ERR_OTHER,
                "mpirun bootstrap: finalize: lost the connection to mpirun: {e}"
            )
        };
        wire::write_msg(&mut *conn, &Msg::Finalize).map_err(lost)?;
        match wire::read_msg(&mut *conn).map_err(lost)? {
            Msg::Ok => Ok(()),
            m => crate::mpi_bail!(
                MPI_ERR_INTERN,
                "mpirun bootstrap: finalize: unexpected reply {m:?}"
            ),
        }
    }
}

/// `s` cut to at most `max` bytes (on a character boundary): an abort travels on a fresh,
/// not yet authenticated connection, whose frame the server bounds.
fn clip(s: &str, max: usize) -> &str {
    let mut n = s.len().min(max);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    &s[..n]
}

#[cfg(test)]
mod tests {
    use super::super::server::Server;
    use super::super::stream::connect_unix;
    use super::*;

    #[test]
    fn clients_over_a_real_server() {
        let dir = std::env::temp_dir().join(format!("gpumpi-test-{}-client", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        let n = 4;
        let srv = Server::start(&path, n, vec![3; 32]).unwrap();
        let p = path.to_str().unwrap().to_string();
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let p = p.clone();
                std::thread::spawn(move || {
                    let b = MpirunBootstrap::connect(
                        &p,
                        "job-1",
                        r,
                        n,
                        &[3; 32],
                        Duration::from_secs(5),
                    )
                    .unwrap();
                    assert_eq!(
                        (b.rank(), b.size(), b.local_rank(), b.local_size()),
                        (r, n, r, n)
                    );
                    b.put("k", &[r as u8; 3]);
                    b.put("k", &[r as u8; 2]); // replaces
                    b.fence().unwrap();
                    for q in 0..n {
                        assert_eq!(b.get(q, "k").unwrap(), vec![q as u8; 2]);
                    }
                    assert!(b.get(0, "missing").is_err());
                    b.fence().unwrap(); // an empty fence
                    b.finalize().unwrap();
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        // Wrong secret: a clear error naming the server, no hang.
        let e = MpirunBootstrap::connect(&p, "job-1", 0, n, &[4; 32], Duration::from_secs(5))
            .err()
            .unwrap();
        assert!(e.msg.contains("bad secret") && e.msg.contains(&p), "{e}");
        drop(srv);
        // No server: immediate error.
        let e = MpirunBootstrap::connect(&p, "job-1", 0, n, &[3; 32], Duration::from_secs(5))
            .err()
            .unwrap();
        assert!(e.msg.contains("cannot connect"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn full_backlog_times_out_instead_of_blocking() {
        use std::os::unix::io::AsRawFd;
        let dir = std::env::temp_dir().join(format!("gpumpi-test-{}-backlog", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap(); // never accepts
                                                                        // SAFETY: listen(2) again on our listening socket only shrinks its backlog.
        assert_eq!(unsafe { libc::listen(l.as_raw_fd(), 0) }, 0);
        let t = std::time::Instant::now();
        let mut kept = Vec::new();
        let err = loop {
            match connect_unix(path.to_str().unwrap(), Duration::from_millis(200)) {
                Ok(s) => kept.push(s),
                Err(e) => break e,
            }
            assert!(kept.len() < 100, "the backlog never filled");
        };
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
        // The error above proves the timeout fired; this only tells it from a hang.
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "took {:?}",
            t.elapsed()
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn silent_server_times_out() {
        let dir = std::env::temp_dir().join(format!("gpumpi-test-{}-silent", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        let _l = std::os::unix::net::UnixListener::bind(&path).unwrap(); // never accepts
        let t = std::time::Instant::now();
        let e = MpirunBootstrap::connect(
            path.to_str().unwrap(),
            "j",
            0,
            1,
            &[1],
            Duration::from_millis(300),
        )
        .err()
        .unwrap();
        assert!(e.msg.contains("no reply to hello"), "{e}");
        // The error above proves the timeout fired; this only tells it from a hang.
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "took {:?}",
            t.elapsed()
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
