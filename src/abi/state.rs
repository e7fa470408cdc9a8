//! Process lifecycle: whether MPI is initialized/finalized, and ending the job.

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

/// A fatal error: print it and end the whole job with `code`.
pub fn fatal(text: &str, code: i32) -> ! {
    abort_job(code.clamp(1, 255), &format!("gpumpi: fatal error: {text}"))
}

/// End the whole job (MPI_Abort semantics): through the launcher when there is one.
pub fn abort_job(code: i32, msg: &str) -> ! {
    super::runtime::abort(code, msg)
}
