//! A process started without a launcher: one rank, fences are local.

use super::Bootstrap;
use crate::mpi::error::MpiResult;
use std::collections::HashMap;
use std::sync::Mutex;

pub struct Singleton {
    job_id: String,
    /// Values put, visible after the next fence.
    pending: Mutex<HashMap<String, Vec<u8>>>,
    visible: Mutex<HashMap<String, Vec<u8>>>,
}

impl Singleton {
    pub fn new() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Singleton {
            job_id: format!("s{}-{:x}", std::process::id(), nanos),
            pending: Mutex::new(HashMap::new()),
            visible: Mutex::new(HashMap::new()),
        }
    }
}

impl Default for Singleton {
    fn default() -> Self {
        Self::new()
    }
}

impl Bootstrap for Singleton {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn local_rank(&self) -> usize {
        0
    }
    fn local_size(&self) -> usize {
        1
    }
    fn node_ranks(&self) -> Vec<usize> {
        vec![0]
    }
    fn appnum(&self) -> usize {
        0
    }
    fn job_id(&self) -> &str {
        &self.job_id
    }
    fn put(&self, key: &str, value: &[u8]) {
        self.pending
            .lock()
            .unwrap()
            .insert(key.to_string(), value.to_vec());
    }
    fn fence(&self) -> MpiResult<()> {
        let p = std::mem::take(&mut *self.pending.lock().unwrap());
        self.visible.lock().unwrap().extend(p);
        Ok(())
    }
    fn get(&self, rank: usize, key: &str) -> MpiResult<Vec<u8>> {
        if rank != 0 {
            crate::mpi_bail!(
                MPI_ERR_RANK,
                "bootstrap get: rank {rank} is not in a job of 1 rank"
            );
        }
        match self.visible.lock().unwrap().get(key) {
            Some(v) => Ok(v.clone()),
            None => crate::mpi_bail!(
                MPI_ERR_NAME,
                "bootstrap get: rank 0 put no key {key:?} before the last fence"
            ),
        }
    }
    fn abort(&self, code: i32, msg: &str) -> ! {
        eprintln!("gpumpi: MPI_Abort({code}) called by the singleton rank: {msg}");
        std::process::exit(if code == 0 { 1 } else { code });
    }
    fn finalize(&self) -> MpiResult<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn singleton_put_fence_get() {
        let s = Singleton::new();
        assert_eq!(
            (s.rank(), s.size(), s.local_rank(), s.local_size()),
            (0, 1, 0, 1)
        );
        assert_eq!(s.node_ranks(), vec![0]);
        assert!(s
            .job_id()
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-'));
        s.put("a", b"1");
        assert!(s.get(0, "a").is_err(), "not visible before the fence");
        s.fence().unwrap();
        assert_eq!(s.get(0, "a").unwrap(), b"1");
        assert!(s.get(1, "a").is_err());
        assert_ne!(Singleton::new().job_id(), "");
        s.finalize().unwrap();
    }
}
