//! Count widths: one implementation serves an MPI function and its large-count (`_c`) form.
//!
//! The C ABI has `int` counts in `MPI_X` and `MPI_Count`/`MPI_Aint` ones in `MPI_X_c` (MPI 5.0
//! §2.5.8). An implementation generic over [`Width`] (`pub unsafe fn MPI_X<W: Width>(..)` in
//! src/abi/imp) takes its count-like parameters as `W::Count`, `W::Disp` and `W::Aint`, widens
//! them to `i64` at once and runs one body; the generated wrappers (mpi-abi's `emit_wrappers`)
//! call it as `MPI_X::<IntCounts>` and `MPI_X::<LargeCounts>`.

use super::ffi::*;
use crate::abi::imp::util::AsI64;
use crate::runtime::objects::UserOpFn;
use std::os::raw::c_int;

/// An integer parameter type of the C ABI, read as `i64` and stored back from one.
pub trait CInt: AsI64 {
    /// `v` converted, or MPI_UNDEFINED where it does not fit (the standard's answer for a count
    /// too large for an `int` output argument).
    fn or_undefined(v: i64) -> Self;
}
impl CInt for c_int {
    fn or_undefined(v: i64) -> Self {
        c_int::try_from(v).unwrap_or(super::consts::MPI_UNDEFINED)
    }
}
impl CInt for i64 {
    fn or_undefined(v: i64) -> Self {
        v
    }
}
impl CInt for isize {
    fn or_undefined(v: i64) -> Self {
        v as isize
    }
}

/// A user reduction function pointer (`MPI_User_function` or `MPI_User_function_c`).
pub trait UserFn: Copy {
    fn user_op(self) -> UserOpFn;
}
impl UserFn for MPI_User_function {
    fn user_op(self) -> UserOpFn {
        UserOpFn::Int(self)
    }
}
impl UserFn for MPI_User_function_c {
    fn user_op(self) -> UserOpFn {
        UserOpFn::Large(self)
    }
}

/// The parameter types that differ between `MPI_X` and `MPI_X_c`.
pub trait Width {
    /// True for the `_c` forms.
    const LARGE: bool;
    /// `int` | `MPI_Count`: element counts, buffer sizes, `MPI_Pack` positions.
    type Count: CInt;
    /// `int` | `MPI_Aint`: the displacement arrays of the v/w collectives.
    type Disp: CInt;
    /// `MPI_Aint` | `MPI_Count`: byte displacements, extents, external32 sizes and positions.
    type Aint: CInt;
    /// `MPI_User_function` | `MPI_User_function_c`.
    type UserFn: UserFn;
}

/// The `int`-count forms (`MPI_X`).
pub enum IntCounts {}
/// The large-count forms (`MPI_X_c`, and the deprecated `MPI_X_x` with their parameters).
pub enum LargeCounts {}

impl Width for IntCounts {
    const LARGE: bool = false;
    type Count = c_int;
    type Disp = c_int;
    type Aint = MPI_Aint;
    type UserFn = MPI_User_function;
}
impl Width for LargeCounts {
    const LARGE: bool = true;
    type Count = MPI_Count;
    type Disp = MPI_Aint;
    type Aint = MPI_Count;
    type UserFn = MPI_User_function_c;
}
