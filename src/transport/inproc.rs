//! In-process transport: the [`Transport`] contract over bounded queues shared by threads of one
//! process. For multi-rank tests (one thread per rank). `read_remote` is a plain memory copy
//! (all "ranks" share the address space) and can be switched off to test the pipelined path;
//! so is `write_remote`, and the shared-copy slots are heap memory shared by the group.

use super::shm::{COPY_SLOTS, COPY_SLOT_BYTES};
use super::{Header, Transport};
use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

struct Msg {
    src: usize,
    hdr: Header,
    payload: Vec<u8>,
}

/// One bounded FIFO per (sender, receiver) pair, like the shared-memory rings.
type Inboxes = Arc<Vec<Vec<Mutex<VecDeque<Msg>>>>>; // [receiver][sender]

/// The shared-copy slot tables of every directed pair ([sender][receiver]), 64-byte aligned.
struct SlotTables {
    words: Vec<AtomicU64>,
    n: usize,
}

impl SlotTables {
    const WORDS: usize = COPY_SLOTS * COPY_SLOT_BYTES / 8;

    fn new(n: usize) -> SlotTables {
        // 8 spare words so that every table can start on a 64-byte boundary.
        let words = (0..n * n * Self::WORDS + 8)
            .map(|_| AtomicU64::new(0))
            .collect();
        SlotTables { words, n }
    }

    fn table(&self, sender: usize, receiver: usize) -> usize {
        let base = (self.words.as_ptr() as usize).next_multiple_of(64);
        base + (sender * self.n + receiver) * Self::WORDS * 8
    }
}

pub struct InprocTransport {
    rank: usize,
    inboxes: Inboxes,
    cap_msgs: usize,
    max_payload: usize,
    cma: bool,
    next_sender: usize,
    slots: Arc<SlotTables>,
}

impl InprocTransport {
    /// A connected group of `n` transports (index = world rank). Each pair channel holds at most
    /// `cap_msgs` messages of at most `max_payload` bytes; `cma` enables `read_remote`.
    pub fn group(n: usize, cap_msgs: usize, max_payload: usize, cma: bool) -> Vec<InprocTransport> {
        let inboxes: Inboxes = Arc::new(
            (0..n)
                .map(|_| (0..n).map(|_| Mutex::new(VecDeque::new())).collect())
                .collect(),
        );
        let slots = Arc::new(SlotTables::new(n));
        (0..n)
            .map(|rank| InprocTransport {
                slots: slots.clone(),
                rank,
                inboxes: inboxes.clone(),
                cap_msgs: cap_msgs.max(1),
                max_payload,
                cma,
                next_sender: 0,
            })
            .collect()
    }
}

impl Transport for InprocTransport {
    fn max_payload(&self) -> usize {
        self.max_payload
    }

    fn try_send(&mut self, dst: usize, hdr: &Header, payload: &[u8]) -> bool {
        assert!(
            payload.len() <= self.max_payload,
            "payload larger than max_payload"
        );
        let mut q = self.inboxes[dst][self.rank].lock().unwrap();
        if q.len() >= self.cap_msgs {
            return false;
        }
        q.push_back(Msg {
            src: self.rank,
            hdr: *hdr,
            payload: payload.to_vec(),
        });
        true
    }

    fn poll(&mut self, f: &mut dyn FnMut(usize, &Header, &[u8])) -> usize {
        let n = self.inboxes.len();
        let mut delivered = 0;
        for i in 0..n {
            let s = (self.next_sender + i) % n;
            for _ in 0..16 {
                // Pop under the lock, call back without it.
                let m = self.inboxes[self.rank][s].lock().unwrap().pop_front();
                match m {
                    Some(m) => {
                        f(m.src, &m.hdr, &m.payload);
                        delivered += 1;
                    }
                    None => break,
                }
            }
        }
        self.next_sender = (self.next_sender + 1) % n.max(1);
        delivered
    }

    fn can_read_remote(&self, _src: usize) -> bool {
        self.cma
    }

    unsafe fn read_remote(&mut self, _src: usize, addr: u64, dst: &mut [u8]) -> bool {
        if !self.cma {
            return false;
        }
        // SAFETY: all ranks of this transport live in one address space, and the caller
        // guarantees that `addr..addr+len` is a live buffer of the peer (see the trait).
        unsafe {
            std::ptr::copy_nonoverlapping(addr as usize as *const u8, dst.as_mut_ptr(), dst.len())
        };
        true
    }

    unsafe fn write_remote(&mut self, _dst: usize, addr: u64, src: &[u8]) -> bool {
        if !self.cma {
            return false;
        }
        // SAFETY: as in read_remote: one address space, and the caller guarantees that
        // `addr..addr+len` is a live buffer the peer handed over for writing.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), addr as usize as *mut u8, src.len()) };
        true
    }

    fn copy_slots(&self, peer: usize) -> Option<(usize, usize)> {
        (self.cma && peer != self.rank).then(|| {
            (
                self.slots.table(self.rank, peer),
                self.slots.table(peer, self.rank),
            )
        })
    }
}
