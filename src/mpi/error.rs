//! The one error type of the library: an MPI error class plus a message.
//!
//! Every layer returns `MpiResult<T>`. The C ABI layer (`abi`) prefixes the
//! message with the name of the MPI function and hands it to the error
//! handler of the object the call was made on.

use crate::standard::consts as c;
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MpiError {
    /// An MPI error class (`MPI_ERR_*`) or a user error code from `MPI_Add_error_code`.
    pub class: i32,
    /// Human readable detail, without the function name: "rank 7 is not in a communicator of size 4".
    pub msg: String,
}

pub type MpiResult<T> = Result<T, MpiError>;

impl MpiError {
    pub fn new(class: i32, msg: impl Into<String>) -> Self {
        MpiError {
            class,
            msg: msg.into(),
        }
    }
    pub fn intern(msg: impl Into<String>) -> Self {
        Self::new(c::MPI_ERR_INTERN, msg)
    }
    pub fn other(msg: impl Into<String>) -> Self {
        Self::new(c::MPI_ERR_OTHER, msg)
    }
}

impl fmt::Display for MpiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}",
            crate::mpi::error::class_name(self.class),
            self.msg
        )
    }
}

impl std::error::Error for MpiError {}

impl From<std::io::Error> for MpiError {
    fn from(e: std::io::Error) -> Self {
        MpiError::other(format!("I/O error: {e}"))
    }
}

/// `mpi_err!(MPI_ERR_RANK, "rank {} is not in a communicator of size {}", r, n)`
#[macro_export]
macro_rules! mpi_err {
    ($class:ident, $($arg:tt)*) => {
        $crate::mpi::error::MpiError::new($crate::standard::consts::$class, format!($($arg)*))
    };
}

/// Return early with an MPI error: `mpi_bail!(MPI_ERR_COUNT, "count {} is negative", n)`.
#[macro_export]
macro_rules! mpi_bail {
    ($class:ident, $($arg:tt)*) => {
        return Err($crate::mpi_err!($class, $($arg)*))
    };
}

/// The symbolic name of an error class ("MPI_ERR_RANK"), or "error code N".
pub fn class_name(class: i32) -> String {
    match crate::standard::consts::error_class_name(class) {
        Some(n) => n.to_string(),
        None => format!("error code {class}"),
    }
}
