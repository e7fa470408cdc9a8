//! The structs and constants shared with the CUDA kernels, held against kernels/*.cuh.
//!
//! Each Rust mirror of a kernel struct carries `const` assertions of its size and field offsets
//! next to its definition (compile-time: a field moved on the Rust side fails the build). The
//! test (`kabi/tests.rs`, which gathers the mirrors of every module, so this file stays a leaf)
//! checks the same numbers against the C side: it extracts the struct definitions and
//! `#define`s from the kernel headers (their host-compilable part: plain C structs), writes a
//! small C program printing `sizeof`/`offsetof` of every field, builds it with the host C
//! compiler (no nvcc needed) and compares with `size_of`/`offset_of!` of the mirrors.

/// Layout facts of one shared struct: C name, Rust size, (C field, Rust offset) pairs.
#[cfg(test)]
pub(crate) type Layout = (&'static str, usize, Vec<(&'static str, usize)>);

/// The [`Layout`] of Rust struct `$t` mirroring C struct `$c`:
/// `layout!("ResCmd", ResCmd, "seq" => seq, "type" => ty)`.
#[cfg(test)]
macro_rules! layout {
    ($c:literal, $t:ty, $($cf:literal => $f:ident),* $(,)?) => {
        (
            $c,
            std::mem::size_of::<$t>(),
            vec![$(($cf, std::mem::offset_of!($t, $f))),*],
        )
    };
}
#[cfg(test)]
pub(crate) use layout;

#[cfg(test)]
mod tests;
