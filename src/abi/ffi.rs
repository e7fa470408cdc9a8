//! TEMPORARY hand-written subset of the ABI types; replaced by the file generated from mpi-abi/.
#![allow(non_camel_case_types, non_snake_case, dead_code)]
use std::os::raw::c_int;

macro_rules! handle {
    ($($abi:ident => $name:ident),* $(,)?) => {$(
        #[repr(C)]
        pub struct $abi { _private: [u8; 0] }
        pub type $name = *mut $abi;
    )*};
}
handle!(
    MPI_ABI_Comm => MPI_Comm, MPI_ABI_Datatype => MPI_Datatype, MPI_ABI_Errhandler => MPI_Errhandler,
    MPI_ABI_File => MPI_File, MPI_ABI_Group => MPI_Group, MPI_ABI_Info => MPI_Info,
    MPI_ABI_Message => MPI_Message, MPI_ABI_Op => MPI_Op, MPI_ABI_Request => MPI_Request,
    MPI_ABI_Session => MPI_Session, MPI_ABI_Win => MPI_Win,
);
pub type MPI_Aint = isize;
pub type MPI_Offset = i64;
pub type MPI_Count = i64;
pub type MPI_Fint = c_int;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MPI_Status {
    pub MPI_SOURCE: c_int,
    pub MPI_TAG: c_int,
    pub MPI_ERROR: c_int,
    pub MPI_internal: [c_int; 5],
}
