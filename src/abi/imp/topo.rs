//! Cartesian topologies and MPI_Dims_create (MPI 5.0 chapter 8).

use super::comm::{alloc_ctx, make_comm, release_ctx};
use super::util::*;
use crate::abi::consts as c;
use crate::abi::ffi::*;
use crate::mpi::error::MpiResult;
use crate::mpi::group::Group;
use crate::mpi_bail;
use crate::runtime::objects::{comm, nonnull, Cart, CommObj, Topo};
use std::os::raw::c_int;

/// Balanced factorization of `nnodes` into the zero entries of `dims` (non-increasing order).
pub fn dims_create(nnodes: i64, dims: &mut [i32]) -> MpiResult<()> {
    if nnodes <= 0 {
        mpi_bail!(MPI_ERR_ARG, "nnodes {nnodes} must be positive");
    }
    let mut fixed: i64 = 1;
    for &d in dims.iter() {
        if d < 0 {
            mpi_bail!(MPI_ERR_DIMS, "dimension {d} is negative");
        }
        if d > 0 {
            fixed *= d as i64;
        }
    }
    if nnodes % fixed != 0 {
        mpi_bail!(
            MPI_ERR_DIMS,
            "nnodes {nnodes} is not a multiple of the product {fixed} of the fixed dimensions"
        );
    }
    let free: Vec<usize> = (0..dims.len()).filter(|&i| dims[i] == 0).collect();
    if free.is_empty() {
        if fixed != nnodes {
            mpi_bail!(
                MPI_ERR_DIMS,
                "the product of dims {fixed} differs from nnodes {nnodes}"
            );
        }
        return Ok(());
    }
    // Prime factors, largest first, each given to the currently smallest free dimension.
    let mut n = nnodes / fixed;
    let mut factors = Vec::new();
    let mut p = 2;
    while p * p <= n {
        while n % p == 0 {
            factors.push(p);
            n /= p;
        }
        p += 1;
    }
    if n > 1 {
        factors.push(n);
    }
    factors.sort_unstable_by(|a, b| b.cmp(a));
    let mut vals = vec![1i64; free.len()];
    for f in factors {
        let i = (0..vals.len()).min_by_key(|&i| vals[i]).unwrap();
        vals[i] *= f;
    }
    vals.sort_unstable_by(|a, b| b.cmp(a));
    for (k, &i) in free.iter().enumerate() {
        dims[i] = vals[k] as i32;
    }
    Ok(())
}

pub unsafe fn MPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) -> MpiResult<()> {
    let n = nonneg(ndims, "ndims")?;
    if n > 0 {
        nonnull(dims, "dims")?;
    }
    let d = std::slice::from_raw_parts_mut(dims, n);
    dims_create(nnodes as i64, d)
}

fn cart(cm: &CommObj) -> MpiResult<&Cart> {
    match &cm.topo {
        Some(Topo::Cart(c)) => Ok(c),
        _ => mpi_bail!(
            MPI_ERR_TOPOLOGY,
            "the communicator has no Cartesian topology"
        ),
    }
}

fn coords_of(c: &Cart, mut rank: usize) -> Vec<i32> {
    let mut out = vec![0; c.dims.len()];
    for i in (0..c.dims.len()).rev() {
        let d = c.dims[i] as usize;
        out[i] = (rank % d) as i32;
        rank /= d;
    }
    out
}

fn rank_of(c: &Cart, coords: &[i32]) -> MpiResult<Option<usize>> {
    let mut r = 0usize;
    for (i, &x) in coords.iter().enumerate() {
        let d = c.dims[i];
        let x = if c.periods[i] {
            x.rem_euclid(d)
        } else if x < 0 || x >= d {
            return Ok(None);
        } else {
            x
        };
        r = r * d as usize + x as usize;
    }
    Ok(Some(r))
}

pub unsafe fn MPI_Cart_create(
    old: MPI_Comm,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
    _reorder: c_int,
    comm_cart: *mut MPI_Comm,
) -> MpiResult<()> {
    nonnull(comm_cart, "comm_cart")?;
    let parent = comm(old)?;
    let n = nonneg(ndims, "ndims")?;
    let dims = slice(dims, n, "dims")?.to_vec();
    let periods: Vec<bool> = slice(periods, n, "periods")?
        .iter()
        .map(|&p| p != 0)
        .collect();
    if dims.iter().any(|&d| d <= 0) {
        mpi_bail!(MPI_ERR_DIMS, "every dimension must be positive: {dims:?}");
    }
    let total: i64 = dims.iter().map(|&d| d as i64).product();
    if total > parent.size() as i64 {
        mpi_bail!(
            MPI_ERR_TOPOLOGY,
            "the grid of {total} processes is larger than the communicator ({})",
            parent.size()
        );
    }
    let g = Group::new(parent.group.ranks[..total as usize].to_vec());
    let ctx = alloc_ctx(&parent)?;
    let h = make_comm(ctx, g, Some(Topo::Cart(Cart { dims, periods })), &parent)?;
    if h == c::MPI_COMM_NULL {
        release_ctx(ctx);
    }
    *comm_cart = h;
    Ok(())
}

pub unsafe fn MPI_Topo_test(cm: MPI_Comm, status: *mut c_int) -> MpiResult<()> {
    let o = comm(cm)?;
    let t = match &o.topo {
        Some(Topo::Cart(_)) => c::MPI_CART,
        Some(Topo::Graph { .. }) => c::MPI_GRAPH,
        None => c::MPI_UNDEFINED,
    };
    out(status, "status", t)
}

pub unsafe fn MPI_Cartdim_get(cm: MPI_Comm, ndims: *mut c_int) -> MpiResult<()> {
    let o = comm(cm)?;
    out(ndims, "ndims", cart(&o)?.dims.len() as c_int)
}

pub unsafe fn MPI_Cart_get(
    cm: MPI_Comm,
    maxdims: c_int,
    dims: *mut c_int,
    periods: *mut c_int,
    coords: *mut c_int,
) -> MpiResult<()> {
    let o = comm(cm)?;
    let ct = cart(&o)?;
    let n = ct.dims.len();
    if (maxdims as usize) < n {
        mpi_bail!(
            MPI_ERR_ARG,
            "maxdims {maxdims} is smaller than the topology's {n} dimensions"
        );
    }
    let co = coords_of(ct, o.rank);
    for (i, ((&d, &p), &c)) in ct.dims.iter().zip(&ct.periods).zip(&co).enumerate().take(n) {
        *dims.add(i) = d;
        *periods.add(i) = p as c_int;
        *coords.add(i) = c;
    }
    Ok(())
}

pub unsafe fn MPI_Cart_rank(cm: MPI_Comm, coords: *const c_int, rank: *mut c_int) -> MpiResult<()> {
    let o = comm(cm)?;
    let ct = cart(&o)?;
    let co = slice(coords, ct.dims.len(), "coords")?;
    match rank_of(ct, co)? {
        Some(r) => out(rank, "rank", r as c_int),
        None => mpi_bail!(
            MPI_ERR_ARG,
            "coordinates {co:?} are outside the non-periodic grid {:?}",
            ct.dims
        ),
    }
}

pub unsafe fn MPI_Cart_coords(
    cm: MPI_Comm,
    rank: c_int,
    maxdims: c_int,
    coords: *mut c_int,
) -> MpiResult<()> {
    let o = comm(cm)?;
    let ct = cart(&o)?;
    if rank < 0 || rank as usize >= o.size() {
        mpi_bail!(
            MPI_ERR_RANK,
            "rank {rank} is not in a communicator of size {}",
            o.size()
        );
    }
    if (maxdims as usize) < ct.dims.len() {
        mpi_bail!(
            MPI_ERR_ARG,
            "maxdims {maxdims} is smaller than the topology's {} dimensions",
            ct.dims.len()
        );
    }
    for (i, v) in coords_of(ct, rank as usize).into_iter().enumerate() {
        *coords.add(i) = v;
    }
    Ok(())
}

pub unsafe fn MPI_Cart_shift(
    cm: MPI_Comm,
    direction: c_int,
    disp: c_int,
    rank_source: *mut c_int,
    rank_dest: *mut c_int,
) -> MpiResult<()> {
    let o = comm(cm)?;
    let ct = cart(&o)?;
    if direction < 0 || direction as usize >= ct.dims.len() {
        mpi_bail!(
            MPI_ERR_ARG,
            "direction {direction} is not a dimension of the {}-dimensional grid",
            ct.dims.len()
        );
    }
    let me = coords_of(ct, o.rank);
    let shifted = |d: i32| -> MpiResult<c_int> {
        let mut co = me.clone();
        co[direction as usize] += d;
        Ok(rank_of(ct, &co)?
            .map(|r| r as c_int)
            .unwrap_or(c::MPI_PROC_NULL))
    };
    out(rank_source, "rank_source", shifted(-disp)?)?;
    out(rank_dest, "rank_dest", shifted(disp)?)
}

pub unsafe fn MPI_Cart_sub(
    cm: MPI_Comm,
    remain_dims: *const c_int,
    newcomm: *mut MPI_Comm,
) -> MpiResult<()> {
    nonnull(newcomm, "newcomm")?;
    let o = comm(cm)?;
    let ct = cart(&o)?.clone();
    let remain: Vec<bool> = slice(remain_dims, ct.dims.len(), "remain_dims")?
        .iter()
        .map(|&r| r != 0)
        .collect();
    let me = coords_of(&ct, o.rank);
    // Color: my coordinates in the dropped dimensions; key: rank within the kept ones.
    let members: Vec<usize> = (0..o.size())
        .filter(|&r| {
            let co = coords_of(&ct, r);
            (0..ct.dims.len()).all(|i| remain[i] || co[i] == me[i])
        })
        .map(|r| o.world_rank(r))
        .collect();
    let sub = Cart {
        dims: (0..ct.dims.len())
            .filter(|&i| remain[i])
            .map(|i| ct.dims[i])
            .collect(),
        periods: (0..ct.dims.len())
            .filter(|&i| remain[i])
            .map(|i| ct.periods[i])
            .collect(),
    };
    let ctx = alloc_ctx(&o)?;
    *newcomm = make_comm(ctx, Group::new(members), Some(Topo::Cart(sub)), &o)?;
    Ok(())
}

pub unsafe fn MPI_Cart_map(
    cm: MPI_Comm,
    ndims: c_int,
    dims: *const c_int,
    _periods: *const c_int,
    newrank: *mut c_int,
) -> MpiResult<()> {
    let o = comm(cm)?;
    let n = nonneg(ndims, "ndims")?;
    let total: i64 = slice(dims, n, "dims")?.iter().map(|&d| d as i64).product();
    out(
        newrank,
        "newrank",
        if (o.rank as i64) < total {
            o.rank as c_int
        } else {
            c::MPI_UNDEFINED
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_create_balances() {
        let mut d = [0, 0];
        dims_create(6, &mut d).unwrap();
        assert_eq!(d, [3, 2]);
        let mut d = [0, 0, 0];
        dims_create(8, &mut d).unwrap();
        assert_eq!(d, [2, 2, 2]);
        let mut d = [0, 3, 0];
        dims_create(12, &mut d).unwrap();
        assert_eq!(d, [2, 3, 2]);
        let mut d = [0, 0];
        dims_create(7, &mut d).unwrap();
        assert_eq!(d, [7, 1]);
        let mut d = [5, 0];
        assert!(dims_create(12, &mut d).is_err());
    }
}
