//! Process lifecycle: whether MPI is initialized/finalized.

use std::sync::atomic::{AtomicU8, Ordering};

const NOT_INITIALIZED: u8 = 0;
const INITIALIZED: u8 = 1;
const FINALIZED: u8 = 2;

static PHASE: AtomicU8 = AtomicU8::new(NOT_INITIALIZED);

pub fn is_initialized() -> bool {
    PHASE.load(Ordering::Acquire) != NOT_INITIALIZED
}
pub fn is_finalized() -> bool {
    PHASE.load(Ordering::Acquire) == FINALIZED
}
pub fn set_initialized() {
    PHASE.store(INITIALIZED, Ordering::Release);
}
pub fn set_finalized() {
    PHASE.store(FINALIZED, Ordering::Release);
}
