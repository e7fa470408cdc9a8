//! Implementations of the MPI functions, one file per chapter of the standard.
//! Each is `pub unsafe fn MPI_Xxx(<the C parameters>) -> MpiResult<()>` (or the C return type for the
//! few functions that do not return int); build.rs finds them by that pattern and generates the
//! exported `MPI_Xxx` / `PMPI_Xxx` wrappers around them.
#![allow(non_snake_case, clippy::too_many_arguments)]

pub mod attr;
pub mod bsend;
pub mod coll;
pub mod comm;
pub mod datatype;
pub mod errhandler;
pub mod ext;
pub mod group;
pub mod handles;
pub mod info;
pub mod init;
pub mod message;
pub mod p2p;
pub mod request;
pub mod stream;
pub mod topo;
pub mod util;

pub use attr::*;
pub use bsend::*;
pub use coll::*;
pub use comm::*;
pub use datatype::*;
pub use errhandler::*;
pub use ext::*;
pub use group::*;
pub use handles::*;
pub use info::*;
pub use init::*;
pub use p2p::*;
pub use request::*;
pub use stream::*;
pub use topo::*;
