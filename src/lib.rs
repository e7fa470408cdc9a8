//! gpumpi: a CUDA-aware MPI library with the MPI-5.0 standard ABI.
//!
//! A call flows down one way:
//! `abi` (C ABI: validate, convert handles, catch panics, map errors) ->
//! `mpi` (communicators, groups, datatypes, ops, requests; no transport code) ->
//! `dispatch` (a collective call's description and the ordered list of paths that run it) ->
//! `coll` (collective algorithms as pure schedules, selection table as data) ->
//! `engine` (executes schedules, matching, progress, request completion) ->
//! `transport` (shared memory; each transport behind one narrow trait) ->
//! hardware. `bootstrap` wires a job up (own mpirun, singleton, later PMIx/PMI-1).
//! `gpu` is the safe CUDA layer (contexts, streams, pointer classification, staging, kernels).
//! `sys` is the only place with unsafe FFI to foreign libraries.
//! `config` is the one registry of environment variables; `standard` holds the standard ABI's
//! generated C types and constants. `tests/layering.rs` checks which module uses which.
//!
//! Progress model: there is no hidden thread. Progress is made by whichever
//! application thread is inside an MPI call, under one process-wide lock
//! (see `engine`). Waiting threads spin briefly, then yield, then sleep with
//! a bounded back-off so oversubscribed ranks still make progress.

#![allow(clippy::missing_safety_doc)]

pub mod abi;
pub mod bootstrap;
pub mod coll;
pub mod config;
pub mod dispatch;
pub mod engine;
pub mod gpu;
pub mod info;
pub mod mpi;
pub mod runtime;
pub mod standard;
pub mod sys;
pub mod topo;
pub mod transport;

/// Skip records for the unit tests that need a GPU (shared with the integration tests).
#[cfg(test)]
#[path = "../tests/support/skip.rs"]
pub(crate) mod test_skip;

#[cfg(test)]
#[path = "../tests/support/rng.rs"]
pub(crate) mod test_rng;
