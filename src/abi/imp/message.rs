//! Matched-message handles (MPI_Message) from MPI_Mprobe/Improbe.

use crate::engine::MsgId;
use crate::mpi::handles::{Kind, Slab};
use std::sync::Mutex;

static MESSAGES: Mutex<Slab<MsgId>> = Mutex::new(Slab::new(Kind::Message));

pub fn insert(m: MsgId) -> usize {
    MESSAGES.lock().unwrap().insert(m)
}

pub fn take(h: usize) -> Option<MsgId> {
    MESSAGES.lock().unwrap().remove(h)
}

/// The message handle whose C int form is `i` (MPI_Message_f2c, MPI_Message_fromint).
pub fn from_int(i: i32) -> usize {
    MESSAGES.lock().unwrap().from_int(i)
}
