//! Topology as data: which network rail each rank sits on ([`rail`]) and how messages between
//! nodes are routed over the rails ([`pxn`]). Pure functions over plain tables (the only input
//! read from the system is the sysfs PCI tree, through a root path tests replace with a fake
//! tree); the runtime feeds them the node map and the network devices at `MPI_Init`.

pub mod pxn;
pub mod rail;
