//! Derived datatypes, packing, addresses (MPI 5.0 chapter 5).

use super::util::*;
use crate::abi::consts as c;
use crate::abi::ffi::*;
use crate::abi::objects::nonnull;
use crate::abi::types::{self, dtype, DtypeObj};
use crate::mpi::datatype::{CombinerKind, Order, TypeDesc};
use crate::mpi::error::MpiResult;
use crate::mpi_bail;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(super) unsafe fn new_type(newtype: *mut MPI_Datatype, d: MpiResult<TypeDesc>) -> MpiResult<()> {
    nonnull(newtype, "newtype")?;
    let d = d?;
    *newtype = types::insert(DtypeObj::new(d));
    Ok(())
}

fn ints(p: *const c_int, n: usize, what: &str) -> MpiResult<Vec<i64>> {
    // SAFETY: the caller passes an array of n ints.
    Ok(unsafe { slice(p, n, what)? }
        .iter()
        .map(|&x| x as i64)
        .collect())
}

fn count_arg(n: c_int) -> MpiResult<usize> {
    if n < 0 {
        mpi_bail!(MPI_ERR_COUNT, "count {n} is negative");
    }
    Ok(n as usize)
}

pub unsafe fn MPI_Type_contiguous(
    count: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let old = dtype(oldtype)?;
    new_type(newtype, TypeDesc::contiguous(count as i64, &old.desc))
}

pub unsafe fn MPI_Type_vector(
    count: c_int,
    blocklength: c_int,
    stride: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let old = dtype(oldtype)?;
    new_type(
        newtype,
        TypeDesc::vector(count as i64, blocklength as i64, stride as i64, &old.desc),
    )
}

pub unsafe fn MPI_Type_create_hvector(
    count: c_int,
    blocklength: c_int,
    stride: MPI_Aint,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let old = dtype(oldtype)?;
    new_type(
        newtype,
        TypeDesc::hvector(count as i64, blocklength as i64, stride, &old.desc),
    )
}

pub unsafe fn MPI_Type_indexed(
    count: c_int,
    blocklens: *const c_int,
    disps: *const c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let n = count_arg(count)?;
    let old = dtype(oldtype)?;
    new_type(
        newtype,
        TypeDesc::indexed(
            &ints(blocklens, n, "array_of_blocklengths")?,
            &ints(disps, n, "array_of_displacements")?,
            &old.desc,
        ),
    )
}

pub unsafe fn MPI_Type_create_hindexed(
    count: c_int,
    blocklens: *const c_int,
    disps: *const MPI_Aint,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let n = count_arg(count)?;
    let old = dtype(oldtype)?;
    new_type(
        newtype,
        TypeDesc::hindexed(
            &ints(blocklens, n, "array_of_blocklengths")?,
            slice(disps, n, "array_of_displacements")?,
            &old.desc,
        ),
    )
}

pub unsafe fn MPI_Type_create_indexed_block(
    count: c_int,
    blocklength: c_int,
    disps: *const c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let n = count_arg(count)?;
    let old = dtype(oldtype)?;
    new_type(
        newtype,
        TypeDesc::indexed_block(
            blocklength as i64,
            &ints(disps, n, "array_of_displacements")?,
            &old.desc,
        ),
    )
}

pub unsafe fn MPI_Type_create_hindexed_block(
    count: c_int,
    blocklength: c_int,
    disps: *const MPI_Aint,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let n = count_arg(count)?;
    let old = dtype(oldtype)?;
    new_type(
        newtype,
        TypeDesc::hindexed_block(
            blocklength as i64,
            slice(disps, n, "array_of_displacements")?,
            &old.desc,
        ),
    )
}

pub unsafe fn MPI_Type_create_struct(
    count: c_int,
    blocklens: *const c_int,
    disps: *const MPI_Aint,
    types_: *const MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let n = count_arg(count)?;
    let ts: Vec<Arc<DtypeObj>> = slice(types_, n, "array_of_types")?
        .iter()
        .map(|&t| dtype(t))
        .collect::<MpiResult<_>>()?;
    let descs: Vec<&Arc<TypeDesc>> = ts.iter().map(|t| &t.desc).collect();
    new_type(
        newtype,
        TypeDesc::create_struct(
            &ints(blocklens, n, "array_of_blocklengths")?,
            slice(disps, n, "array_of_displacements")?,
            &descs,
        ),
    )
}

pub unsafe fn MPI_Type_create_resized(
    oldtype: MPI_Datatype,
    lb: MPI_Aint,
    extent: MPI_Aint,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let old = dtype(oldtype)?;
    new_type(newtype, TypeDesc::resized(&old.desc, lb, extent))
}

pub unsafe fn MPI_Type_dup(oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> MpiResult<()> {
    let old = dtype(oldtype)?;
    nonnull(newtype, "newtype")?;
    let d = DtypeObj::new(TypeDesc::dup(&old.desc));
    d.committed
        .store(old.committed.load(Ordering::Acquire), Ordering::Release);
    *d.attrs.lock().unwrap() = old.attrs.lock().unwrap().clone();
    *newtype = types::insert(d);
    Ok(())
}

pub unsafe fn MPI_Type_create_subarray(
    ndims: c_int,
    sizes: *const c_int,
    subsizes: *const c_int,
    starts: *const c_int,
    order: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    if ndims <= 0 {
        mpi_bail!(MPI_ERR_DIMS, "ndims {ndims} must be positive");
    }
    let n = ndims as usize;
    let order = match order {
        o if o == c::MPI_ORDER_C => Order::C,
        o if o == c::MPI_ORDER_FORTRAN => Order::Fortran,
        o => mpi_bail!(
            MPI_ERR_ARG,
            "order {o} is neither MPI_ORDER_C nor MPI_ORDER_FORTRAN"
        ),
    };
    let old = dtype(oldtype)?;
    new_type(
        newtype,
        TypeDesc::subarray(
            &ints(sizes, n, "sizes")?,
            &ints(subsizes, n, "subsizes")?,
            &ints(starts, n, "starts")?,
            order,
            &old.desc,
        ),
    )
}

pub unsafe fn MPI_Type_commit(datatype: *mut MPI_Datatype) -> MpiResult<()> {
    nonnull(datatype, "datatype")?;
    dtype(*datatype)?.committed.store(true, Ordering::Release);
    Ok(())
}

pub unsafe fn MPI_Type_free(datatype: *mut MPI_Datatype) -> MpiResult<()> {
    nonnull(datatype, "datatype")?;
    let h = *datatype as usize;
    if h < 0x1000 {
        dtype(*datatype)?;
        mpi_bail!(MPI_ERR_TYPE, "predefined datatype {h:#x} cannot be freed");
    }
    let Some(obj) = types::TYPES.lock().unwrap().remove(h) else {
        mpi_bail!(
            MPI_ERR_TYPE,
            "invalid datatype handle {h:#x} (freed, or not a datatype)"
        )
    };
    super::attr::delete_all_type_attrs(*datatype, &obj)?;
    *datatype = c::MPI_DATATYPE_NULL;
    Ok(())
}

pub unsafe fn MPI_Type_size(datatype: MPI_Datatype, size: *mut c_int) -> MpiResult<()> {
    let s = dtype(datatype)?.size();
    out(
        size,
        "size",
        if s > i32::MAX as usize {
            c::MPI_UNDEFINED
        } else {
            s as c_int
        },
    )
}
pub unsafe fn MPI_Type_size_x(datatype: MPI_Datatype, size: *mut MPI_Count) -> MpiResult<()> {
    out(size, "size", dtype(datatype)?.size() as MPI_Count)
}
pub unsafe fn MPI_Type_size_c(datatype: MPI_Datatype, size: *mut MPI_Count) -> MpiResult<()> {
    MPI_Type_size_x(datatype, size)
}

pub unsafe fn MPI_Type_get_extent(
    datatype: MPI_Datatype,
    lb: *mut MPI_Aint,
    extent: *mut MPI_Aint,
) -> MpiResult<()> {
    let d = dtype(datatype)?;
    out(lb, "lb", d.desc.lb())?;
    out(extent, "extent", d.desc.extent())
}
pub unsafe fn MPI_Type_get_extent_x(
    datatype: MPI_Datatype,
    lb: *mut MPI_Count,
    extent: *mut MPI_Count,
) -> MpiResult<()> {
    let d = dtype(datatype)?;
    out(lb, "lb", d.desc.lb() as MPI_Count)?;
    out(extent, "extent", d.desc.extent() as MPI_Count)
}
pub unsafe fn MPI_Type_get_extent_c(
    datatype: MPI_Datatype,
    lb: *mut MPI_Count,
    extent: *mut MPI_Count,
) -> MpiResult<()> {
    MPI_Type_get_extent_x(datatype, lb, extent)
}
pub unsafe fn MPI_Type_get_true_extent(
    datatype: MPI_Datatype,
    true_lb: *mut MPI_Aint,
    true_extent: *mut MPI_Aint,
) -> MpiResult<()> {
    let d = dtype(datatype)?;
    out(true_lb, "true_lb", d.desc.true_lb())?;
    out(true_extent, "true_extent", d.desc.true_extent())
}
pub unsafe fn MPI_Type_get_true_extent_x(
    datatype: MPI_Datatype,
    true_lb: *mut MPI_Count,
    true_extent: *mut MPI_Count,
) -> MpiResult<()> {
    let d = dtype(datatype)?;
    out(true_lb, "true_lb", d.desc.true_lb() as MPI_Count)?;
    out(
        true_extent,
        "true_extent",
        d.desc.true_extent() as MPI_Count,
    )
}
pub unsafe fn MPI_Type_get_true_extent_c(
    datatype: MPI_Datatype,
    true_lb: *mut MPI_Count,
    true_extent: *mut MPI_Count,
) -> MpiResult<()> {
    MPI_Type_get_true_extent_x(datatype, true_lb, true_extent)
}

pub unsafe fn MPI_Get_address(location: *const c_void, address: *mut MPI_Aint) -> MpiResult<()> {
    out(address, "address", location as MPI_Aint)
}

pub unsafe fn MPI_Aint_add(base: MPI_Aint, disp: MPI_Aint) -> MPI_Aint {
    base.wrapping_add(disp)
}

pub unsafe fn MPI_Aint_diff(addr1: MPI_Aint, addr2: MPI_Aint) -> MPI_Aint {
    addr1.wrapping_sub(addr2)
}

pub unsafe fn MPI_Type_set_name(datatype: MPI_Datatype, name: *const c_char) -> MpiResult<()> {
    let n = read_cstr(name, "type_name")?;
    *dtype(datatype)?.name.lock().unwrap() = n.chars().take(127).collect();
    Ok(())
}

pub unsafe fn MPI_Type_get_name(
    datatype: MPI_Datatype,
    name: *mut c_char,
    resultlen: *mut c_int,
) -> MpiResult<()> {
    let n = dtype(datatype)?.name.lock().unwrap().clone();
    write_cstr(&n, name, 128, resultlen)
}

pub(super) fn combiner_value(k: CombinerKind) -> c_int {
    match k {
        CombinerKind::Named => c::MPI_COMBINER_NAMED,
        CombinerKind::Dup => c::MPI_COMBINER_DUP,
        CombinerKind::Contiguous => c::MPI_COMBINER_CONTIGUOUS,
        CombinerKind::Vector => c::MPI_COMBINER_VECTOR,
        CombinerKind::Hvector => c::MPI_COMBINER_HVECTOR,
        CombinerKind::Indexed => c::MPI_COMBINER_INDEXED,
        CombinerKind::Hindexed => c::MPI_COMBINER_HINDEXED,
        CombinerKind::IndexedBlock => c::MPI_COMBINER_INDEXED_BLOCK,
        CombinerKind::HindexedBlock => c::MPI_COMBINER_HINDEXED_BLOCK,
        CombinerKind::Struct => c::MPI_COMBINER_STRUCT,
        CombinerKind::Subarray => c::MPI_COMBINER_SUBARRAY,
        CombinerKind::Resized => c::MPI_COMBINER_RESIZED,
        CombinerKind::Darray => c::MPI_COMBINER_DARRAY,
    }
}

pub unsafe fn MPI_Type_get_envelope(
    datatype: MPI_Datatype,
    num_integers: *mut c_int,
    num_addresses: *mut c_int,
    num_datatypes: *mut c_int,
    combiner: *mut c_int,
) -> MpiResult<()> {
    let d = dtype(datatype)?;
    let (ni, na, _nl, nd) = d.desc.envelope();
    out(num_integers, "num_integers", ni as c_int)?;
    out(num_addresses, "num_addresses", na as c_int)?;
    out(num_datatypes, "num_datatypes", nd as c_int)?;
    out(combiner, "combiner", combiner_value(d.desc.kind()))
}

/// The constructor arguments of a derived type, with enums mapped to the ABI's values.
pub(super) fn contents(d: &DtypeObj) -> MpiResult<crate::mpi::datatype::Contents> {
    if d.desc.kind() == CombinerKind::Named {
        mpi_bail!(
            MPI_ERR_ARG,
            "MPI_Type_get_contents is erroneous for a predefined datatype"
        );
    }
    let mut ct = d.desc.contents();
    if d.desc.kind() == CombinerKind::Subarray {
        if let Some(last) = ct.ints.last_mut() {
            *last = if *last == 0 {
                c::MPI_ORDER_C as i64
            } else {
                c::MPI_ORDER_FORTRAN as i64
            };
        }
    }
    Ok(ct)
}

pub unsafe fn MPI_Type_get_contents(
    datatype: MPI_Datatype,
    max_integers: c_int,
    max_addresses: c_int,
    max_datatypes: c_int,
    integers: *mut c_int,
    addresses: *mut MPI_Aint,
    datatypes: *mut MPI_Datatype,
) -> MpiResult<()> {
    let ct = contents(&*dtype(datatype)?)?;
    if !ct.large.is_empty() {
        mpi_bail!(
            MPI_ERR_TYPE,
            "the datatype was made with large counts: use MPI_Type_get_contents_c"
        );
    }
    write_contents(
        &ct,
        [
            max_integers as i64,
            max_addresses as i64,
            0,
            max_datatypes as i64,
        ],
        integers,
        addresses,
        std::ptr::null_mut(),
        datatypes,
    )
}

/// Store a type's constructor arguments into the caller's arrays (both get_contents variants).
pub(super) unsafe fn write_contents(
    ct: &crate::mpi::datatype::Contents,
    max: [i64; 4],
    integers: *mut c_int,
    addresses: *mut MPI_Aint,
    large_counts: *mut MPI_Count,
    datatypes: *mut MPI_Datatype,
) -> MpiResult<()> {
    let need = [
        ct.ints.len(),
        ct.addrs.len(),
        ct.large.len(),
        ct.types.len(),
    ];
    if need.iter().zip(max).any(|(&n, m)| n as i64 > m) {
        mpi_bail!(MPI_ERR_ARG, "the output arrays are too small for the type's contents (need {need:?} integers, addresses, large counts, datatypes)");
    }
    for (i, v) in ct.ints.iter().enumerate() {
        *integers.add(i) = *v as c_int;
    }
    for (i, v) in ct.addrs.iter().enumerate() {
        *addresses.add(i) = *v;
    }
    for (i, v) in ct.large.iter().enumerate() {
        *large_counts.add(i) = *v;
    }
    for (i, t) in ct.types.iter().enumerate() {
        *datatypes.add(i) = types::handle_for(t);
    }
    Ok(())
}

pub unsafe fn MPI_Pack_size(
    incount: c_int,
    datatype: MPI_Datatype,
    cm: MPI_Comm,
    size: *mut c_int,
) -> MpiResult<()> {
    crate::abi::objects::comm(cm)?;
    let n = count_arg(incount)?;
    let d = dtype(datatype)?;
    out(size, "size", d.desc.packed_size(n) as c_int)
}

/// MPI_Pack / MPI_Pack_c: pack `n` elements at `*pos` of a buffer of `outsize` bytes.
pub(super) unsafe fn pack(
    inbuf: *const c_void,
    n: usize,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: i64,
    pos: &mut i64,
    cm: MPI_Comm,
) -> MpiResult<()> {
    crate::abi::objects::comm(cm)?;
    let d = types::committed(datatype)?;
    let need = d.desc.packed_size(n) as i64;
    if *pos < 0 || *pos + need > outsize.max(0) {
        mpi_bail!(
            MPI_ERR_TRUNCATE,
            "packing {need} bytes at position {} overflows the output buffer of {outsize} bytes",
            *pos
        );
    }
    if need > 0 {
        let dst_ptr = (outbuf as *mut u8).add(*pos as usize);
        // Either side may be device memory: stage through the host (gpu::stage).
        if let Some(info) = crate::gpu::stage::device_info(dst_ptr) {
            let packed = types::pack_all(inbuf, n, &d)?;
            crate::gpu::stage::copy_to_device(&info, dst_ptr as usize, &packed)?;
        } else {
            let dst = std::slice::from_raw_parts_mut(dst_ptr, need as usize);
            match crate::gpu::stage::packed_from_device(inbuf as *const u8, n, &d.desc)? {
                Some(v) => dst.copy_from_slice(&v),
                None => {
                    d.desc.pack(n, inbuf as *const u8, dst);
                }
            }
        }
    }
    *pos += need;
    Ok(())
}

/// MPI_Unpack / MPI_Unpack_c.
pub(super) unsafe fn unpack(
    inbuf: *const c_void,
    insize: i64,
    pos: &mut i64,
    outbuf: *mut c_void,
    n: usize,
    datatype: MPI_Datatype,
    cm: MPI_Comm,
) -> MpiResult<()> {
    crate::abi::objects::comm(cm)?;
    let d = types::committed(datatype)?;
    let need = d.desc.packed_size(n) as i64;
    if *pos < 0 || *pos + need > insize.max(0) {
        mpi_bail!(
            MPI_ERR_TRUNCATE,
            "unpacking {need} bytes at position {} reads past the input buffer of {insize} bytes",
            *pos
        );
    }
    if need > 0 {
        let src_ptr = (inbuf as *const u8).add(*pos as usize);
        if let Some(info) = crate::gpu::stage::device_info(src_ptr) {
            let mut v = vec![0u8; need as usize];
            crate::gpu::stage::copy_to_host(&info, src_ptr as usize, &mut v)?;
            types::unpack_all(&v, outbuf, n, &d)?;
        } else {
            let src = std::slice::from_raw_parts(src_ptr, need as usize);
            types::unpack_all(src, outbuf, n, &d)?;
        }
    }
    *pos += need;
    Ok(())
}

pub unsafe fn MPI_Pack(
    inbuf: *const c_void,
    incount: c_int,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: c_int,
    position: *mut c_int,
    cm: MPI_Comm,
) -> MpiResult<()> {
    nonnull(position, "position")?;
    let mut pos = *position as i64;
    pack(
        inbuf,
        count_arg(incount)?,
        datatype,
        outbuf,
        outsize as i64,
        &mut pos,
        cm,
    )?;
    *position = pos as c_int;
    Ok(())
}

pub unsafe fn MPI_Unpack(
    inbuf: *const c_void,
    insize: c_int,
    position: *mut c_int,
    outbuf: *mut c_void,
    outcount: c_int,
    datatype: MPI_Datatype,
    cm: MPI_Comm,
) -> MpiResult<()> {
    nonnull(position, "position")?;
    let mut pos = *position as i64;
    unpack(
        inbuf,
        insize as i64,
        &mut pos,
        outbuf,
        count_arg(outcount)?,
        datatype,
        cm,
    )?;
    *position = pos as c_int;
    Ok(())
}
