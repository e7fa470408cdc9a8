//! Handle conversions: MPI_*_c2f / MPI_*_f2c (Fortran integers, used by
//! rsmpi and mpi4py) and the MPI-5 ABI's MPI_*_toint / MPI_*_fromint.

use crate::abi::ffi::*;
use crate::mpi::error::MpiResult;
use crate::mpi::handles::{from_int, to_int, Kind};
use crate::runtime::objects::nonnull;

/// The handle of `kind` whose C int form is `i`, restored from its table (the int form carries
/// only part of the generation; see `mpi::handles`).
fn handle_of(kind: Kind, i: c_int) -> usize {
    use crate::runtime::objects::objects;
    match kind {
        Kind::Comm => objects().comms.from_int(i),
        Kind::Group => objects().groups.from_int(i),
        Kind::Errhandler => objects().errhs.from_int(i),
        Kind::Info => objects().infos.from_int(i),
        Kind::Op => objects().ops.from_int(i),
        Kind::Datatype => crate::runtime::types::TYPES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .from_int(i),
        Kind::Message => super::message::from_int(i),
        Kind::Request => {
            crate::runtime::with(|rt| Ok(rt.reqs.from_int(i))).unwrap_or_else(|_| from_int(kind, i))
        }
        Kind::Session | Kind::Win | Kind::File | Kind::Stream | Kind::EnqueueRequest => {
            from_int(kind, i)
        }
    }
}
use std::os::raw::c_int;

macro_rules! conversions {
    ($($ty:ident, $kind:ident, $c2f:ident, $f2c:ident, $toint:ident, $fromint:ident;)*) => {$(
        pub unsafe fn $c2f(h: $ty) -> MPI_Fint { to_int(h as usize) }
        pub unsafe fn $f2c(i: MPI_Fint) -> $ty { handle_of(Kind::$kind, i) as $ty }
        pub unsafe fn $toint(h: $ty) -> c_int { to_int(h as usize) }
        pub unsafe fn $fromint(i: c_int) -> $ty { handle_of(Kind::$kind, i) as $ty }
    )*};
}

// Parenthesised, so build.rs's scanner sees the rows' function names (as with other macros).
conversions!(
    MPI_Comm, Comm, MPI_Comm_c2f, MPI_Comm_f2c, MPI_Comm_toint, MPI_Comm_fromint;
    MPI_Errhandler, Errhandler, MPI_Errhandler_c2f, MPI_Errhandler_f2c, MPI_Errhandler_toint, MPI_Errhandler_fromint;
    MPI_File, File, MPI_File_c2f, MPI_File_f2c, MPI_File_toint, MPI_File_fromint;
    MPI_Group, Group, MPI_Group_c2f, MPI_Group_f2c, MPI_Group_toint, MPI_Group_fromint;
    MPI_Info, Info, MPI_Info_c2f, MPI_Info_f2c, MPI_Info_toint, MPI_Info_fromint;
    MPI_Message, Message, MPI_Message_c2f, MPI_Message_f2c, MPI_Message_toint, MPI_Message_fromint;
    MPI_Op, Op, MPI_Op_c2f, MPI_Op_f2c, MPI_Op_toint, MPI_Op_fromint;
    MPI_Request, Request, MPI_Request_c2f, MPI_Request_f2c, MPI_Request_toint, MPI_Request_fromint;
    MPI_Session, Session, MPI_Session_c2f, MPI_Session_f2c, MPI_Session_toint, MPI_Session_fromint;
    MPI_Datatype, Datatype, MPI_Type_c2f, MPI_Type_f2c, MPI_Type_toint, MPI_Type_fromint;
    MPI_Win, Win, MPI_Win_c2f, MPI_Win_f2c, MPI_Win_toint, MPI_Win_fromint;
);

pub unsafe fn MPI_Status_c2f(
    c_status: *const MPI_Status,
    f_status: *mut MPI_Fint,
) -> MpiResult<()> {
    nonnull(c_status, "c_status")?;
    nonnull(f_status, "f_status")?;
    // SAFETY: MPI_Status is 8 ints; a Fortran status is MPI_F_STATUS_SIZE (8) integers.
    std::ptr::copy_nonoverlapping(c_status as *const MPI_Fint, f_status, 8);
    Ok(())
}

pub unsafe fn MPI_Status_f2c(
    f_status: *const MPI_Fint,
    c_status: *mut MPI_Status,
) -> MpiResult<()> {
    nonnull(c_status, "c_status")?;
    nonnull(f_status, "f_status")?;
    // SAFETY: as above.
    std::ptr::copy_nonoverlapping(f_status, c_status as *mut MPI_Fint, 8);
    Ok(())
}
