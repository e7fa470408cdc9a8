//! `gpumpi-info`: version, ABI, CUDA kernels, GPUs and links, usable bootstraps and transports,
//! and every GPUMPI_* variable. The logic lives in `mpi_abi::info`; see README.md.

fn main() {
    let code = mpi_abi::info::main(std::env::args().skip(1).collect());
    std::process::exit(code);
}
