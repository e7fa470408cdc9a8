//! `mpirun`: starts the ranks of a job on this machine. The logic lives in
//! `mpi_abi::bootstrap::launcher` (testable as a library); see `docs/MPIRUN.md`.

fn main() {
    if mpi_abi::config::get_usize("GPUMPI_DEBUG") > 0 {
        let _ = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .try_init();
    }
    let code = mpi_abi::bootstrap::launcher::main(std::env::args().skip(1).collect());
    std::process::exit(code);
}
