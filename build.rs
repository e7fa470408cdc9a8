fn main() {
    // The installed library is libmpi_abi.so.1 (soname), with a libmpi_abi.so link.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpi_abi.so.1");
    println!("cargo:rerun-if-changed=build.rs");
}
