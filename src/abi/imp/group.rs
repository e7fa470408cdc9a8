//! Groups (MPI 5.0 §7.3).

use super::util::*;
use crate::abi::consts as c;
use crate::abi::ffi::*;
use crate::mpi::error::MpiResult;
use crate::mpi_bail;
use crate::runtime::objects::{comm, group, new_group, nonnull, objects};
use std::os::raw::c_int;

pub unsafe fn MPI_Group_size(g: MPI_Group, size: *mut c_int) -> MpiResult<()> {
    out(size, "size", group(g)?.size() as c_int)
}

pub unsafe fn MPI_Group_rank(g: MPI_Group, rank: *mut c_int) -> MpiResult<()> {
    let g = group(g)?;
    let me = crate::runtime::world_rank()?;
    out(
        rank,
        "rank",
        g.rank_of(me)
            .map(|r| r as c_int)
            .unwrap_or(c::MPI_UNDEFINED),
    )
}

pub unsafe fn MPI_Comm_group(cm: MPI_Comm, g: *mut MPI_Group) -> MpiResult<()> {
    let cm = comm(cm)?;
    out(g, "group", new_group((*cm.group).clone()))
}

unsafe fn ranks_arg<'a>(n: c_int, ranks: *const c_int) -> MpiResult<&'a [c_int]> {
    let n = nonneg(n, "n")?;
    slice(ranks, n, "ranks")
}

pub unsafe fn MPI_Group_incl(
    g: MPI_Group,
    n: c_int,
    ranks: *const c_int,
    newgroup: *mut MPI_Group,
) -> MpiResult<()> {
    let r = group(g)?.incl(ranks_arg(n, ranks)?)?;
    out(newgroup, "newgroup", new_group(r))
}

pub unsafe fn MPI_Group_excl(
    g: MPI_Group,
    n: c_int,
    ranks: *const c_int,
    newgroup: *mut MPI_Group,
) -> MpiResult<()> {
    let r = group(g)?.excl(ranks_arg(n, ranks)?)?;
    out(newgroup, "newgroup", new_group(r))
}

unsafe fn ranges_arg(n: c_int, ranges: *const [c_int; 3]) -> MpiResult<&'static [[c_int; 3]]> {
    let n = nonneg(n, "n")?;
    slice(ranges, n, "ranges")
}

pub unsafe fn MPI_Group_range_incl(
    g: MPI_Group,
    n: c_int,
    ranges: *mut [c_int; 3],
    newgroup: *mut MPI_Group,
) -> MpiResult<()> {
    let g = group(g)?;
    let ranks = g.expand_ranges(ranges_arg(n, ranges)?)?;
    out(newgroup, "newgroup", new_group(g.incl(&ranks)?))
}

pub unsafe fn MPI_Group_range_excl(
    g: MPI_Group,
    n: c_int,
    ranges: *mut [c_int; 3],
    newgroup: *mut MPI_Group,
) -> MpiResult<()> {
    let g = group(g)?;
    let ranks = g.expand_ranges(ranges_arg(n, ranges)?)?;
    out(newgroup, "newgroup", new_group(g.excl(&ranks)?))
}

pub unsafe fn MPI_Group_union(
    a: MPI_Group,
    b: MPI_Group,
    newgroup: *mut MPI_Group,
) -> MpiResult<()> {
    out(
        newgroup,
        "newgroup",
        new_group(group(a)?.union(&*group(b)?)),
    )
}

pub unsafe fn MPI_Group_intersection(
    a: MPI_Group,
    b: MPI_Group,
    newgroup: *mut MPI_Group,
) -> MpiResult<()> {
    out(
        newgroup,
        "newgroup",
        new_group(group(a)?.intersection(&*group(b)?)),
    )
}

pub unsafe fn MPI_Group_difference(
    a: MPI_Group,
    b: MPI_Group,
    newgroup: *mut MPI_Group,
) -> MpiResult<()> {
    out(
        newgroup,
        "newgroup",
        new_group(group(a)?.difference(&*group(b)?)),
    )
}

pub unsafe fn MPI_Group_translate_ranks(
    a: MPI_Group,
    n: c_int,
    ranks1: *const c_int,
    b: MPI_Group,
    ranks2: *mut c_int,
) -> MpiResult<()> {
    let r = group(a)?.translate(ranks_arg(n, ranks1)?, &*group(b)?)?;
    if !r.is_empty() {
        nonnull(ranks2, "ranks2")?;
        std::ptr::copy_nonoverlapping(r.as_ptr(), ranks2, r.len());
    }
    Ok(())
}

pub unsafe fn MPI_Group_compare(a: MPI_Group, b: MPI_Group, result: *mut c_int) -> MpiResult<()> {
    out(result, "result", group(a)?.compare(&*group(b)?))
}

pub unsafe fn MPI_Group_free(g: *mut MPI_Group) -> MpiResult<()> {
    nonnull(g, "group")?;
    let h = *g as usize;
    if h != c::MPI_GROUP_EMPTY as usize && objects().groups.remove(h).is_none() {
        mpi_bail!(
            MPI_ERR_GROUP,
            "invalid group handle {h:#x} (freed, predefined, or not a group)"
        );
    }
    *g = c::MPI_GROUP_NULL;
    Ok(())
}
