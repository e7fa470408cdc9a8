//! Large-count (`_c`) variants of the datatype, packing and local-reduction functions
//! (MPI 5.0 §5.2.3). They share the bodies of the `int` versions; mpi4py calls these.

use super::datatype::new_type;
use super::util::*;
use crate::abi::ffi::*;
use crate::abi::objects::nonnull;
use crate::abi::types::{dtype, DtypeObj};
use crate::mpi::datatype::TypeDesc;
use crate::mpi::error::MpiResult;
use crate::mpi_bail;
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

fn count_c(n: MPI_Count) -> MpiResult<usize> {
    if n < 0 {
        mpi_bail!(MPI_ERR_COUNT, "count {n} is negative");
    }
    Ok(n as usize)
}

fn addrs(v: Vec<i64>) -> Vec<isize> {
    v.into_iter().map(|x| x as isize).collect()
}

unsafe fn large(newtype: *mut MPI_Datatype, d: MpiResult<TypeDesc>) -> MpiResult<()> {
    new_type(newtype, d.map(TypeDesc::with_large_counts))
}

pub unsafe fn MPI_Type_contiguous_c(
    count: MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let old = dtype(oldtype)?;
    large(newtype, TypeDesc::contiguous(count, &old.desc))
}

pub unsafe fn MPI_Type_vector_c(
    count: MPI_Count,
    blocklength: MPI_Count,
    stride: MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let old = dtype(oldtype)?;
    large(
        newtype,
        TypeDesc::vector(count, blocklength, stride, &old.desc),
    )
}

pub unsafe fn MPI_Type_create_hvector_c(
    count: MPI_Count,
    blocklength: MPI_Count,
    stride: MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let old = dtype(oldtype)?;
    large(
        newtype,
        TypeDesc::hvector(count, blocklength, stride as isize, &old.desc),
    )
}

pub unsafe fn MPI_Type_indexed_c(
    count: MPI_Count,
    blocklens: *const MPI_Count,
    disps: *const MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let n = count_c(count)?;
    let old = dtype(oldtype)?;
    large(
        newtype,
        TypeDesc::indexed(
            &i64s(blocklens, n, "array_of_blocklengths")?,
            &i64s(disps, n, "array_of_displacements")?,
            &old.desc,
        ),
    )
}

pub unsafe fn MPI_Type_create_hindexed_c(
    count: MPI_Count,
    blocklens: *const MPI_Count,
    disps: *const MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let n = count_c(count)?;
    let old = dtype(oldtype)?;
    large(
        newtype,
        TypeDesc::hindexed(
            &i64s(blocklens, n, "array_of_blocklengths")?,
            &addrs(i64s(disps, n, "array_of_displacements")?),
            &old.desc,
        ),
    )
}

pub unsafe fn MPI_Type_create_indexed_block_c(
    count: MPI_Count,
    blocklength: MPI_Count,
    disps: *const MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let n = count_c(count)?;
    let old = dtype(oldtype)?;
    large(
        newtype,
        TypeDesc::indexed_block(
            blocklength,
            &i64s(disps, n, "array_of_displacements")?,
            &old.desc,
        ),
    )
}

pub unsafe fn MPI_Type_create_hindexed_block_c(
    count: MPI_Count,
    blocklength: MPI_Count,
    disps: *const MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let n = count_c(count)?;
    let old = dtype(oldtype)?;
    large(
        newtype,
        TypeDesc::hindexed_block(
            blocklength,
            &addrs(i64s(disps, n, "array_of_displacements")?),
            &old.desc,
        ),
    )
}

pub unsafe fn MPI_Type_create_struct_c(
    count: MPI_Count,
    blocklens: *const MPI_Count,
    disps: *const MPI_Count,
    types_: *const MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let n = count_c(count)?;
    let ts: Vec<Arc<DtypeObj>> = slice(types_, n, "array_of_types")?
        .iter()
        .map(|&t| dtype(t))
        .collect::<MpiResult<_>>()?;
    let descs: Vec<&Arc<TypeDesc>> = ts.iter().map(|t| &t.desc).collect();
    large(
        newtype,
        TypeDesc::create_struct(
            &i64s(blocklens, n, "array_of_blocklengths")?,
            &addrs(i64s(disps, n, "array_of_displacements")?),
            &descs,
        ),
    )
}

pub unsafe fn MPI_Type_create_resized_c(
    oldtype: MPI_Datatype,
    lb: MPI_Count,
    extent: MPI_Count,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let old = dtype(oldtype)?;
    large(
        newtype,
        TypeDesc::resized(&old.desc, lb as isize, extent as isize),
    )
}

pub unsafe fn MPI_Type_create_subarray_c(
    ndims: c_int,
    sizes: *const MPI_Count,
    subsizes: *const MPI_Count,
    starts: *const MPI_Count,
    order: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    large(
        newtype,
        super::datatype::subarray(ndims, sizes, subsizes, starts, order, oldtype),
    )
}

pub unsafe fn MPI_Type_get_envelope_c(
    datatype: MPI_Datatype,
    num_integers: *mut MPI_Count,
    num_addresses: *mut MPI_Count,
    num_large_counts: *mut MPI_Count,
    num_datatypes: *mut MPI_Count,
    combiner: *mut c_int,
) -> MpiResult<()> {
    let d = dtype(datatype)?;
    let (ni, na, nl, nd) = d.desc.envelope();
    out(num_integers, "num_integers", ni as MPI_Count)?;
    out(num_addresses, "num_addresses", na as MPI_Count)?;
    out(num_large_counts, "num_large_counts", nl as MPI_Count)?;
    out(num_datatypes, "num_datatypes", nd as MPI_Count)?;
    out(
        combiner,
        "combiner",
        super::datatype::combiner_value(d.desc.kind()),
    )
}

pub unsafe fn MPI_Type_get_contents_c(
    datatype: MPI_Datatype,
    max_integers: MPI_Count,
    max_addresses: MPI_Count,
    max_large_counts: MPI_Count,
    max_datatypes: MPI_Count,
    integers: *mut c_int,
    addresses: *mut MPI_Aint,
    large_counts: *mut MPI_Count,
    datatypes: *mut MPI_Datatype,
) -> MpiResult<()> {
    let ct = super::datatype::contents(&*dtype(datatype)?)?;
    super::datatype::write_contents(
        &ct,
        [max_integers, max_addresses, max_large_counts, max_datatypes],
        integers,
        addresses,
        large_counts,
        datatypes,
    )
}

pub unsafe fn MPI_Pack_size_c(
    incount: MPI_Count,
    datatype: MPI_Datatype,
    cm: MPI_Comm,
    size: *mut MPI_Count,
) -> MpiResult<()> {
    crate::abi::objects::comm(cm)?;
    let n = count_c(incount)?;
    out(
        size,
        "size",
        dtype(datatype)?.desc.packed_size(n) as MPI_Count,
    )
}

pub unsafe fn MPI_Pack_c(
    inbuf: *const c_void,
    incount: MPI_Count,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: MPI_Count,
    position: *mut MPI_Count,
    cm: MPI_Comm,
) -> MpiResult<()> {
    nonnull(position, "position")?;
    let mut pos = *position;
    super::datatype::pack(
        inbuf,
        count_c(incount)?,
        datatype,
        outbuf,
        outsize,
        &mut pos,
        cm,
    )?;
    *position = pos;
    Ok(())
}

pub unsafe fn MPI_Unpack_c(
    inbuf: *const c_void,
    insize: MPI_Count,
    position: *mut MPI_Count,
    outbuf: *mut c_void,
    outcount: MPI_Count,
    datatype: MPI_Datatype,
    cm: MPI_Comm,
) -> MpiResult<()> {
    nonnull(position, "position")?;
    let mut pos = *position;
    super::datatype::unpack(
        inbuf,
        insize,
        &mut pos,
        outbuf,
        count_c(outcount)?,
        datatype,
        cm,
    )?;
    *position = pos;
    Ok(())
}

pub unsafe fn MPI_Reduce_local_c(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    op: MPI_Op,
) -> MpiResult<()> {
    super::coll::reduce_local(inbuf, inoutbuf, count_c(count)?, datatype, op)
}
