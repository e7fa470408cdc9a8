//! Environment queries: version, library version, processor name, Wtime, threading.
use mpi::traits::*;

fn main() {
    let (universe, threading) =
        mpi::initialize_with_threading(mpi::Threading::Funneled).expect("MPI init failed");
    let world = universe.world();
    let (major, minor) = mpi::environment::version();
    assert!(major >= 3, "MPI_Get_version returned {major}.{minor}");
    let lib = mpi::environment::library_version().expect("MPI_Get_library_version");
    assert!(!lib.is_empty());
    let name = mpi::environment::processor_name().expect("MPI_Get_processor_name");
    assert!(!name.is_empty());
    let t0 = mpi::time();
    let tick = mpi::time_resolution();
    assert!(tick > 0.0 && tick < 1.0, "bad MPI_Wtick {tick}");
    assert!(mpi::time() >= t0);
    assert!(mpi::environment::is_initialized());
    assert!(!mpi::environment::is_finalized());
    if world.rank() == 0 {
        println!("MPI {major}.{minor} threading={threading:?} lib={}", lib.lines().next().unwrap_or(""));
    }
    world.barrier();
    println!("rank {} of {} on {name}: OK", world.rank(), world.size());
}
