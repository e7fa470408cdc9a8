//! An in-process bootstrap for unit tests: [`job`] returns one
//! [`FakeBootstrap`] per rank; run each on its own thread. Fences really
//! synchronize the threads; `abort` panics with the message.

use super::Bootstrap;
use crate::mpi::error::MpiResult;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};

struct State {
    gen: u64,
    arrived: usize,
    pending: Vec<(usize, String, Vec<u8>)>,
    visible: HashMap<(usize, String), Vec<u8>>,
}

struct Shared {
    size: usize,
    per_node: usize,
    job_id: String,
    st: Mutex<State>,
    cv: Condvar,
}

pub struct FakeBootstrap {
    rank: usize,
    shared: Arc<Shared>,
    mine: Mutex<Vec<(String, Vec<u8>)>>,
}

/// A job of `size` ranks, all on one node.
pub fn job(size: usize) -> Vec<FakeBootstrap> {
    job_on_nodes(size, size.max(1))
}

/// A job of `size` ranks placed on nodes of `per_node` consecutive ranks each
/// (to test node-aware code on one machine).
pub fn job_on_nodes(size: usize, per_node: usize) -> Vec<FakeBootstrap> {
    assert!(per_node > 0);
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let shared = Arc::new(Shared {
        size,
        per_node,
        job_id: format!("f{}-{n}", std::process::id()),
        st: Mutex::new(State {
            gen: 0,
            arrived: 0,
            pending: Vec::new(),
            visible: HashMap::new(),
        }),
        cv: Condvar::new(),
    });
    (0..size)
        .map(|rank| FakeBootstrap {
            rank,
            shared: shared.clone(),
            mine: Mutex::new(Vec::new()),
        })
        .collect()
}

impl Bootstrap for FakeBootstrap {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.shared.size
    }
    fn local_rank(&self) -> usize {
        self.rank % self.shared.per_node
    }
    fn local_size(&self) -> usize {
        self.node_ranks().len()
    }
    fn node_ranks(&self) -> Vec<usize> {
        let first = self.rank / self.shared.per_node * self.shared.per_node;
        (first..(first + self.shared.per_node).min(self.shared.size)).collect()
    }
    fn appnum(&self) -> usize {
        0
    }
    fn job_id(&self) -> &str {
        &self.shared.job_id
    }
    fn put(&self, key: &str, value: &[u8]) {
        let mut m = self.mine.lock().unwrap();
        m.retain(|(k, _)| k != key);
        m.push((key.to_string(), value.to_vec()));
    }
    fn fence(&self) -> MpiResult<()> {
        let puts = std::mem::take(&mut *self.mine.lock().unwrap());
        let sh = &self.shared;
        let mut st = sh.st.lock().unwrap();
        st.pending
            .extend(puts.into_iter().map(|(k, v)| (self.rank, k, v)));
        st.arrived += 1;
        let my_gen = st.gen;
        if st.arrived == sh.size {
            let p = std::mem::take(&mut st.pending);
            st.visible
                .extend(p.into_iter().map(|(r, k, v)| ((r, k), v)));
            st.arrived = 0;
            st.gen += 1;
            sh.cv.notify_all();
        }
        while st.gen == my_gen {
            st = sh.cv.wait(st).unwrap();
        }
        Ok(())
    }
    fn get(&self, rank: usize, key: &str) -> MpiResult<Vec<u8>> {
        if rank >= self.shared.size {
            crate::mpi_bail!(
                MPI_ERR_RANK,
                "bootstrap get: rank {rank} is not in a job of {}",
                self.shared.size
            );
        }
        match self
            .shared
            .st
            .lock()
            .unwrap()
            .visible
            .get(&(rank, key.to_string()))
        {
            Some(v) => Ok(v.clone()),
            None => crate::mpi_bail!(
                MPI_ERR_NAME,
                "bootstrap get: rank {rank} put no key {key:?} before the last fence"
            ),
        }
    }
    fn abort(&self, code: i32, msg: &str) -> ! {
        panic!(
            "fake bootstrap: rank {} called abort({code}): {msg}",
            self.rank
        )
    }
    fn finalize(&self) -> MpiResult<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_exchange_through_fences() {
        for n in [1usize, 2, 3, 7] {
            let ranks = job(n);
            let hs: Vec<_> = ranks
                .into_iter()
                .map(|b| {
                    std::thread::spawn(move || {
                        for round in 0..3 {
                            b.put("v", format!("{}:{round}", b.rank()).as_bytes());
                            b.fence().unwrap();
                            for q in 0..b.size() {
                                assert_eq!(
                                    b.get(q, "v").unwrap(),
                                    format!("{q}:{round}").as_bytes()
                                );
                            }
                            // Nobody overwrites the next round's value before all have read this one.
                            b.fence().unwrap();
                        }
                        assert!(b.get(0, "nope").is_err());
                        assert!(b.get(n, "v").is_err());
                        (b.local_rank(), b.local_size(), b.job_id().to_string())
                    })
                })
                .collect();
            let res: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
            for (r, (lr, ls, id)) in res.iter().enumerate() {
                assert_eq!((*lr, *ls), (r, n));
                assert_eq!(id, &res[0].2);
            }
        }
    }

    #[test]
    fn nodes_layout() {
        let ranks = job_on_nodes(7, 3);
        assert_eq!(ranks[4].node_ranks(), vec![3, 4, 5]);
        assert_eq!((ranks[4].local_rank(), ranks[4].local_size()), (1, 3));
        assert_eq!(ranks[6].node_ranks(), vec![6]);
        assert_eq!((ranks[6].local_rank(), ranks[6].local_size()), (0, 1));
        assert_ne!(job(1)[0].job_id(), ranks[0].job_id());
    }

    #[test]
    #[should_panic(expected = "abort(5): oops")]
    fn abort_panics() {
        job(1)[0].abort(5, "oops");
    }
}
