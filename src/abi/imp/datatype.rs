//! Derived datatypes, packing, addresses (MPI 5.0 chapter 5).

use super::util::*;
use crate::abi::consts as c;
use crate::abi::ffi::*;
use crate::abi::width::{CInt, Width};
use crate::mpi::datatype::{CombinerKind, Distrib, F90Class, Order, TypeDesc};
use crate::mpi::error::MpiResult;
use crate::mpi_bail;
use crate::runtime::objects::nonnull;
use crate::runtime::types::{self, dtype, DtypeObj};
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;

unsafe fn new_type(newtype: *mut MPI_Datatype, d: MpiResult<TypeDesc>) -> MpiResult<()> {
    nonnull(newtype, "newtype")?;
    let d = d?;
    *newtype = types::insert(DtypeObj::new(d));
    Ok(())
}

/// A new type from a constructor; the large-count forms mark it, so that
/// MPI_Type_get_contents_c reports its counts as large counts.
unsafe fn new_type_of<W: Width>(
    newtype: *mut MPI_Datatype,
    d: MpiResult<TypeDesc>,
) -> MpiResult<()> {
    new_type(
        newtype,
        if W::LARGE {
            d.map(TypeDesc::with_large_counts)
        } else {
            d
        },
    )
}

fn count_arg(n: impl AsI64) -> MpiResult<usize> {
    let n = n.as_i64();
    if n < 0 {
        mpi_bail!(MPI_ERR_COUNT, "count {n} is negative");
    }
    Ok(n as usize)
}

/// Byte displacements as addresses.
unsafe fn addrs<T: AsI64>(p: *const T, n: usize, what: &str) -> MpiResult<Vec<isize>> {
    Ok(i64s(p, n, what)?.into_iter().map(|x| x as isize).collect())
}

pub unsafe fn MPI_Type_contiguous<W: Width>(
    count: W::Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let old = dtype(oldtype)?;
    new_type_of::<W>(newtype, TypeDesc::contiguous(count.as_i64(), &old.desc))
}

pub unsafe fn MPI_Type_vector<W: Width>(
    count: W::Count,
    blocklength: W::Count,
    stride: W::Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let old = dtype(oldtype)?;
    new_type_of::<W>(
        newtype,
        TypeDesc::vector(
            count.as_i64(),
            blocklength.as_i64(),
            stride.as_i64(),
            &old.desc,
        ),
    )
}

pub unsafe fn MPI_Type_create_hvector<W: Width>(
    count: W::Count,
    blocklength: W::Count,
    stride: W::Aint,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let old = dtype(oldtype)?;
    new_type_of::<W>(
        newtype,
        TypeDesc::hvector(
            count.as_i64(),
            blocklength.as_i64(),
            stride.as_i64() as isize,
            &old.desc,
        ),
    )
}

pub unsafe fn MPI_Type_indexed<W: Width>(
    count: W::Count,
    blocklens: *const W::Count,
    disps: *const W::Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let n = count_arg(count)?;
    let old = dtype(oldtype)?;
    new_type_of::<W>(
        newtype,
        TypeDesc::indexed(
            &i64s(blocklens, n, "array_of_blocklengths")?,
            &i64s(disps, n, "array_of_displacements")?,
            &old.desc,
        ),
    )
}

pub unsafe fn MPI_Type_create_hindexed<W: Width>(
    count: W::Count,
    blocklens: *const W::Count,
    disps: *const W::Aint,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let n = count_arg(count)?;
    let old = dtype(oldtype)?;
    new_type_of::<W>(
        newtype,
        TypeDesc::hindexed(
            &i64s(blocklens, n, "array_of_blocklengths")?,
            &addrs(disps, n, "array_of_displacements")?,
            &old.desc,
        ),
    )
}

pub unsafe fn MPI_Type_create_indexed_block<W: Width>(
    count: W::Count,
    blocklength: W::Count,
    disps: *const W::Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let n = count_arg(count)?;
    let old = dtype(oldtype)?;
    new_type_of::<W>(
        newtype,
        TypeDesc::indexed_block(
            blocklength.as_i64(),
            &i64s(disps, n, "array_of_displacements")?,
            &old.desc,
        ),
    )
}

pub unsafe fn MPI_Type_create_hindexed_block<W: Width>(
    count: W::Count,
    blocklength: W::Count,
    disps: *const W::Aint,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let n = count_arg(count)?;
    let old = dtype(oldtype)?;
    new_type_of::<W>(
        newtype,
        TypeDesc::hindexed_block(
            blocklength.as_i64(),
            &addrs(disps, n, "array_of_displacements")?,
            &old.desc,
        ),
    )
}

pub unsafe fn MPI_Type_create_struct<W: Width>(
    count: W::Count,
    blocklens: *const W::Count,
    disps: *const W::Aint,
    types_: *const MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let n = count_arg(count)?;
    let ts: Vec<Arc<DtypeObj>> = slice(types_, n, "array_of_types")?
        .iter()
        .map(|&t| dtype(t))
        .collect::<MpiResult<_>>()?;
    let descs: Vec<&Arc<TypeDesc>> = ts.iter().map(|t| &t.desc).collect();
    new_type_of::<W>(
        newtype,
        TypeDesc::create_struct(
            &i64s(blocklens, n, "array_of_blocklengths")?,
            &addrs(disps, n, "array_of_displacements")?,
            &descs,
        ),
    )
}

pub unsafe fn MPI_Type_create_resized<W: Width>(
    oldtype: MPI_Datatype,
    lb: W::Aint,
    extent: W::Aint,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let old = dtype(oldtype)?;
    new_type_of::<W>(
        newtype,
        TypeDesc::resized(&old.desc, lb.as_i64() as isize, extent.as_i64() as isize),
    )
}

pub unsafe fn MPI_Type_dup(oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> MpiResult<()> {
    let old = dtype(oldtype)?;
    nonnull(newtype, "newtype")?;
    let d = DtypeObj::new(TypeDesc::dup(&old.desc));
    d.committed
        .store(old.committed.load(Ordering::Acquire), Ordering::Release);
    // Attributes go through their keyvals' copy callbacks (MPI_TYPE_NULL_COPY_FN drops them).
    let attrs = old.attrs.lock().unwrap().clone();
    *d.attrs.lock().unwrap() = super::attr::copy_attrs(oldtype as usize, &attrs)?;
    *newtype = types::insert(d);
    Ok(())
}

pub unsafe fn MPI_Type_create_subarray<W: Width>(
    ndims: c_int,
    sizes: *const W::Count,
    subsizes: *const W::Count,
    starts: *const W::Count,
    order: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    if ndims <= 0 {
        mpi_bail!(MPI_ERR_DIMS, "ndims {ndims} must be positive");
    }
    let n = ndims as usize;
    let order = order_arg(order)?;
    let old = dtype(oldtype)?;
    new_type_of::<W>(
        newtype,
        TypeDesc::subarray(
            &i64s(sizes, n, "sizes")?,
            &i64s(subsizes, n, "subsizes")?,
            &i64s(starts, n, "starts")?,
            order,
            &old.desc,
        ),
    )
}

fn order_arg(order: c_int) -> MpiResult<Order> {
    match order {
        o if o == c::MPI_ORDER_C => Ok(Order::C),
        o if o == c::MPI_ORDER_FORTRAN => Ok(Order::Fortran),
        o => mpi_bail!(
            MPI_ERR_ARG,
            "order {o} is neither MPI_ORDER_C nor MPI_ORDER_FORTRAN"
        ),
    }
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
    if dtype(*datatype)?.predefined != 0 {
        mpi_bail!(
            MPI_ERR_TYPE,
            "datatype {h:#x} (from MPI_Type_create_f90_*) is predefined and cannot be freed"
        );
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

pub unsafe fn MPI_Type_size<W: Width>(
    datatype: MPI_Datatype,
    size: *mut W::Count,
) -> MpiResult<()> {
    let s = dtype(datatype)?.size() as i64;
    out(size, "size", W::Count::or_undefined(s))
}

pub unsafe fn MPI_Type_get_extent<W: Width>(
    datatype: MPI_Datatype,
    lb: *mut W::Aint,
    extent: *mut W::Aint,
) -> MpiResult<()> {
    let d = dtype(datatype)?;
    out(lb, "lb", W::Aint::or_undefined(d.desc.lb() as i64))?;
    out(
        extent,
        "extent",
        W::Aint::or_undefined(d.desc.extent() as i64),
    )
}

pub unsafe fn MPI_Type_get_true_extent<W: Width>(
    datatype: MPI_Datatype,
    true_lb: *mut W::Aint,
    true_extent: *mut W::Aint,
) -> MpiResult<()> {
    let d = dtype(datatype)?;
    out(
        true_lb,
        "true_lb",
        W::Aint::or_undefined(d.desc.true_lb() as i64),
    )?;
    out(
        true_extent,
        "true_extent",
        W::Aint::or_undefined(d.desc.true_extent() as i64),
    )
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
    if datatype == c::MPI_DATATYPE_NULL {
        mpi_bail!(MPI_ERR_TYPE, "cannot name MPI_DATATYPE_NULL");
    }
    *dtype(datatype)?.name.lock().unwrap() = n.chars().take(127).collect();
    Ok(())
}

pub unsafe fn MPI_Type_get_name(
    datatype: MPI_Datatype,
    name: *mut c_char,
    resultlen: *mut c_int,
) -> MpiResult<()> {
    let n = if datatype == c::MPI_DATATYPE_NULL {
        "MPI_DATATYPE_NULL".to_string()
    } else {
        dtype(datatype)?.name.lock().unwrap().clone()
    };
    write_cstr(&n, name, 128, resultlen)
}

fn combiner_value(k: CombinerKind) -> c_int {
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
        CombinerKind::F90(F90Class::Integer) => c::MPI_COMBINER_F90_INTEGER,
        CombinerKind::F90(F90Class::Real) => c::MPI_COMBINER_F90_REAL,
        CombinerKind::F90(F90Class::Complex) => c::MPI_COMBINER_F90_COMPLEX,
    }
}

pub unsafe fn MPI_Type_get_envelope(
    datatype: MPI_Datatype,
    num_integers: *mut c_int,
    num_addresses: *mut c_int,
    num_datatypes: *mut c_int,
    combiner: *mut c_int,
) -> MpiResult<()> {
    let nums = [
        Some(num_integers),
        Some(num_addresses),
        None,
        Some(num_datatypes),
    ];
    envelope(datatype, nums, combiner)
}

pub unsafe fn MPI_Type_get_envelope_c(
    datatype: MPI_Datatype,
    num_integers: *mut MPI_Count,
    num_addresses: *mut MPI_Count,
    num_large_counts: *mut MPI_Count,
    num_datatypes: *mut MPI_Count,
    combiner: *mut c_int,
) -> MpiResult<()> {
    let nums = [num_integers, num_addresses, num_large_counts, num_datatypes].map(Some);
    envelope(datatype, nums, combiner)
}

/// Both forms of MPI_Type_get_envelope: the numbers of integers, addresses, large counts (the
/// `int` form has no such argument: None) and datatypes.
unsafe fn envelope<T: CInt>(
    datatype: MPI_Datatype,
    nums: [Option<*mut T>; 4],
    combiner: *mut c_int,
) -> MpiResult<()> {
    let d = dtype(datatype)?;
    let (ni, na, nl, nd) = d.desc.envelope();
    let what = [
        "num_integers",
        "num_addresses",
        "num_large_counts",
        "num_datatypes",
    ];
    for ((p, what), n) in nums.into_iter().zip(what).zip([ni, na, nl, nd]) {
        if let Some(p) = p {
            out(p, what, T::or_undefined(n as i64))?;
        }
    }
    out(combiner, "combiner", combiner_value(d.desc.kind()))
}

/// The constructor arguments of a derived type, with enums mapped to the ABI's values.
fn contents(d: &DtypeObj) -> MpiResult<crate::mpi::datatype::Contents> {
    if d.desc.kind() == CombinerKind::Named {
        mpi_bail!(
            MPI_ERR_ARG,
            "MPI_Type_get_contents is erroneous for a predefined datatype"
        );
    }
    let mut ct = d.desc.contents();
    if d.desc.kind() == CombinerKind::Darray && ct.ints.len() >= 3 {
        // [size, rank, ndims, gsizes (unless in large counts), distribs, dargs, psizes, order]:
        // distributions and default dargs as the ABI's MPI_DISTRIBUTE_* values.
        let nd = ct.ints[2] as usize;
        let at = if ct.large.is_empty() { 3 + nd } else { 3 };
        if ct.ints.len() >= at + 2 * nd {
            for v in &mut ct.ints[at..at + nd] {
                *v = match *v {
                    0 => c::MPI_DISTRIBUTE_BLOCK,
                    1 => c::MPI_DISTRIBUTE_CYCLIC,
                    _ => c::MPI_DISTRIBUTE_NONE,
                } as i64;
            }
            for v in &mut ct.ints[at + nd..at + 2 * nd] {
                if *v == -1 {
                    *v = c::MPI_DISTRIBUTE_DFLT_DARG as i64;
                }
            }
        }
    }
    if d.desc.kind() == CombinerKind::Subarray || d.desc.kind() == CombinerKind::Darray {
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
    let ct = contents(&*dtype(datatype)?)?;
    write_contents(
        &ct,
        [max_integers, max_addresses, max_large_counts, max_datatypes],
        integers,
        addresses,
        large_counts,
        datatypes,
    )
}

/// Store a type's constructor arguments into the caller's arrays (both get_contents variants).
unsafe fn write_contents(
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

pub unsafe fn MPI_Pack_size<W: Width>(
    incount: W::Count,
    datatype: MPI_Datatype,
    cm: MPI_Comm,
    size: *mut W::Count,
) -> MpiResult<()> {
    crate::runtime::objects::comm(cm)?;
    let n = count_arg(incount)?;
    let d = dtype(datatype)?;
    out(
        size,
        "size",
        W::Count::or_undefined(d.desc.packed_size(n) as i64),
    )
}

/// MPI_Pack: pack `n` elements at `*pos` of a buffer of `outsize` bytes.
unsafe fn pack(
    inbuf: *const c_void,
    n: usize,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: i64,
    pos: &mut i64,
    cm: MPI_Comm,
) -> MpiResult<()> {
    crate::runtime::objects::comm(cm)?;
    let d = types::committed(datatype)?;
    let need = d.desc.packed_size(n) as i64;
    types::check_buf(inbuf, n, &d, "inbuf")?;
    types::check_buf(outbuf, need as usize, &types::BYTE, "outbuf")?;
    if *pos < 0 || *pos + need > outsize.max(0) {
        mpi_bail!(
            MPI_ERR_TRUNCATE,
            "packing {need} bytes at position {} overflows the output buffer of {outsize} bytes",
            *pos
        );
    }
    if need > 0 {
        let dst_ptr = (outbuf as *mut u8).add(*pos as usize);
        // Either side may be device memory: both on one device are packed there by the GPU
        // pack kernel; otherwise stage through the host (gpu::stage).
        if crate::gpu::stage::pack_device_to_device(inbuf as *const u8, n, &d.desc, dst_ptr)? {
            // Packed on the device.
        } else if let Some(info) = crate::gpu::stage::device_info(dst_ptr) {
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

/// MPI_Unpack: unpack `n` elements from `*pos` of a buffer of `insize` bytes.
unsafe fn unpack(
    inbuf: *const c_void,
    insize: i64,
    pos: &mut i64,
    outbuf: *mut c_void,
    n: usize,
    datatype: MPI_Datatype,
    cm: MPI_Comm,
) -> MpiResult<()> {
    crate::runtime::objects::comm(cm)?;
    let d = types::committed(datatype)?;
    let need = d.desc.packed_size(n) as i64;
    types::check_buf(inbuf, need as usize, &types::BYTE, "inbuf")?;
    types::check_buf(outbuf, n, &d, "outbuf")?;
    if *pos < 0 || *pos + need > insize.max(0) {
        mpi_bail!(
            MPI_ERR_TRUNCATE,
            "unpacking {need} bytes at position {} reads past the input buffer of {insize} bytes",
            *pos
        );
    }
    if need > 0 {
        let src_ptr = (inbuf as *const u8).add(*pos as usize);
        if crate::gpu::stage::unpack_device_to_device(
            src_ptr,
            need as usize,
            outbuf as *mut u8,
            n,
            &d.desc,
        )? {
            // Unpacked on the device.
        } else if let Some(info) = crate::gpu::stage::device_info(src_ptr) {
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

/// Read `*position`, run `f` on it, store it back.
unsafe fn at_position<T: CInt>(
    position: *mut T,
    f: impl FnOnce(&mut i64) -> MpiResult<()>,
) -> MpiResult<()> {
    nonnull(position, "position")?;
    let mut pos = (*position).as_i64();
    f(&mut pos)?;
    *position = T::or_undefined(pos);
    Ok(())
}

pub unsafe fn MPI_Pack<W: Width>(
    inbuf: *const c_void,
    incount: W::Count,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: W::Count,
    position: *mut W::Count,
    cm: MPI_Comm,
) -> MpiResult<()> {
    at_position(position, |pos| {
        let n = count_arg(incount)?;
        pack(inbuf, n, datatype, outbuf, outsize.as_i64(), pos, cm)
    })
}

pub unsafe fn MPI_Unpack<W: Width>(
    inbuf: *const c_void,
    insize: W::Count,
    position: *mut W::Count,
    outbuf: *mut c_void,
    outcount: W::Count,
    datatype: MPI_Datatype,
    cm: MPI_Comm,
) -> MpiResult<()> {
    at_position(position, |pos| {
        let n = count_arg(outcount)?;
        unpack(inbuf, insize.as_i64(), pos, outbuf, n, datatype, cm)
    })
}

/// Predefined Fortran types chosen by MPI_Type_create_f90_*, one handle per (class, p, r)
/// (the standard makes them predefined: the same arguments give the same type, never freed).
type F90Key = (F90Class, Option<i64>, i64);
static F90_TYPES: std::sync::Mutex<Vec<(F90Key, usize)>> = std::sync::Mutex::new(Vec::new());

unsafe fn f90_type(
    class: F90Class,
    p: Option<i64>,
    r: i64,
    base: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    nonnull(newtype, "newtype")?;
    let mut cache = F90_TYPES.lock().unwrap();
    if let Some(&(_, h)) = cache.iter().find(|e| e.0 == (class, p, r)) {
        *newtype = h as MPI_Datatype;
        return Ok(());
    }
    let old = dtype(base)?;
    let mut o = DtypeObj::new(TypeDesc::f90(class, p, r, &old.desc));
    o.committed.store(true, Ordering::Release);
    o.predefined = base as usize;
    let h = types::insert(o);
    cache.push(((class, p, r), h as usize));
    *newtype = h;
    Ok(())
}

/// A precision or range argument: MPI_UNDEFINED means "not given" (0).
fn f90_arg(v: c_int, what: &str) -> MpiResult<i64> {
    if v == c::MPI_UNDEFINED {
        return Ok(0);
    }
    if v < 0 {
        mpi_bail!(MPI_ERR_ARG, "{what} {v} is negative");
    }
    Ok(v as i64)
}

/// The kind SELECTED_REAL_KIND(p, r) gives (gfortran): REAL*4 or REAL*8 (wider ones are
/// not supported by gpumpi).
fn f90_real_kind(p: c_int, r: c_int) -> MpiResult<usize> {
    if p == c::MPI_UNDEFINED && r == c::MPI_UNDEFINED {
        mpi_bail!(MPI_ERR_ARG, "p and r are both MPI_UNDEFINED");
    }
    let (pp, rr) = (f90_arg(p, "p")?, f90_arg(r, "r")?);
    if pp <= 6 && rr <= 37 {
        Ok(4)
    } else if pp <= 15 && rr <= 307 {
        Ok(8)
    } else {
        mpi_bail!(
            MPI_ERR_ARG,
            "no supported Fortran real kind has precision {p} and range {r} (REAL*4 and REAL*8 only)"
        )
    }
}

pub unsafe fn MPI_Type_create_f90_integer(r: c_int, newtype: *mut MPI_Datatype) -> MpiResult<()> {
    let rr = f90_arg(r, "r")?;
    let base = match rr {
        0..=2 => c::MPI_INTEGER1,
        3..=4 => c::MPI_INTEGER2,
        5..=9 => c::MPI_INTEGER4,
        10..=18 => c::MPI_INTEGER8,
        _ => mpi_bail!(
            MPI_ERR_ARG,
            "no supported Fortran integer kind has range {r} (up to 18 digits)"
        ),
    };
    f90_type(F90Class::Integer, None, rr, base, newtype)
}

pub unsafe fn MPI_Type_create_f90_real(
    p: c_int,
    r: c_int,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let base = if f90_real_kind(p, r)? == 4 {
        c::MPI_REAL4
    } else {
        c::MPI_REAL8
    };
    let pr = (p as i64, r as i64);
    f90_type(F90Class::Real, Some(pr.0), pr.1, base, newtype)
}

pub unsafe fn MPI_Type_create_f90_complex(
    p: c_int,
    r: c_int,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let base = if f90_real_kind(p, r)? == 4 {
        c::MPI_COMPLEX8
    } else {
        c::MPI_COMPLEX16
    };
    f90_type(F90Class::Complex, Some(p as i64), r as i64, base, newtype)
}

pub unsafe fn MPI_Type_match_size(
    typeclass: c_int,
    size: c_int,
    datatype: *mut MPI_Datatype,
) -> MpiResult<()> {
    nonnull(datatype, "datatype")?;
    let table: &[(c_int, MPI_Datatype)] = match typeclass {
        x if x == c::MPI_TYPECLASS_INTEGER => &[
            (1, c::MPI_INTEGER1),
            (2, c::MPI_INTEGER2),
            (4, c::MPI_INTEGER4),
            (8, c::MPI_INTEGER8),
        ],
        x if x == c::MPI_TYPECLASS_REAL => &[(4, c::MPI_REAL4), (8, c::MPI_REAL8)],
        x if x == c::MPI_TYPECLASS_COMPLEX => &[(8, c::MPI_COMPLEX8), (16, c::MPI_COMPLEX16)],
        x => mpi_bail!(
            MPI_ERR_ARG,
            "typeclass {x} is not MPI_TYPECLASS_INTEGER, _REAL or _COMPLEX"
        ),
    };
    match table.iter().find(|e| e.0 == size) {
        Some(&(_, t)) => out(datatype, "datatype", t),
        None => mpi_bail!(
            MPI_ERR_ARG,
            "no supported type of typeclass {typeclass} has size {size}"
        ),
    }
}

pub unsafe fn MPI_Type_get_value_index(
    value_type: MPI_Datatype,
    index_type: MPI_Datatype,
    pair_type: *mut MPI_Datatype,
) -> MpiResult<()> {
    nonnull(pair_type, "pair_type")?;
    use crate::mpi::datatype::{Combiner, Elem};
    let basic = |h: MPI_Datatype, what: &str| -> MpiResult<Option<crate::mpi::datatype::Basic>> {
        if h == c::MPI_DATATYPE_NULL {
            mpi_bail!(MPI_ERR_TYPE, "{what} is MPI_DATATYPE_NULL");
        }
        let d = dtype(h)?;
        Ok(match d.desc.combiner() {
            Combiner::Named(Elem::Basic(b)) if d.predefined == h as usize => Some(*b),
            _ => None,
        })
    };
    let (v, i) = (
        basic(value_type, "value_type")?,
        basic(index_type, "index_type")?,
    );
    // Only the predefined pair types exist in gpumpi; any other combination has none.
    let pair = match (v, i) {
        (Some(v), Some(i)) => types::predefined_handle(Elem::Pair(v, i)),
        _ => None,
    };
    *pair_type = pair.map_or(c::MPI_DATATYPE_NULL, |h| h as MPI_Datatype);
    Ok(())
}

/// ndims, the distribution and argument of each dimension, and the storage order.
type DarrayArgs = (usize, Vec<Distrib>, Vec<Option<i64>>, Order);

unsafe fn darray_args(
    ndims: c_int,
    distribs: *const c_int,
    dargs: *const c_int,
    order: c_int,
) -> MpiResult<DarrayArgs> {
    if ndims <= 0 {
        mpi_bail!(MPI_ERR_DIMS, "ndims {ndims} must be positive");
    }
    let n = ndims as usize;
    let order = order_arg(order)?;
    let ds = i64s(distribs, n, "array_of_distribs")?
        .into_iter()
        .map(|d| match d as c_int {
            x if x == c::MPI_DISTRIBUTE_BLOCK => Ok(Distrib::Block),
            x if x == c::MPI_DISTRIBUTE_CYCLIC => Ok(Distrib::Cyclic),
            x if x == c::MPI_DISTRIBUTE_NONE => Ok(Distrib::None),
            x => mpi_bail!(
                MPI_ERR_ARG,
                "array_of_distribs holds {x}, not an MPI_DISTRIBUTE_* value"
            ),
        })
        .collect::<MpiResult<Vec<_>>>()?;
    let da = i64s(dargs, n, "array_of_dargs")?
        .into_iter()
        .map(|d| (d as c_int != c::MPI_DISTRIBUTE_DFLT_DARG).then_some(d))
        .collect();
    Ok((n, ds, da, order))
}

pub unsafe fn MPI_Type_create_darray<W: Width>(
    size: c_int,
    rank: c_int,
    ndims: c_int,
    array_of_gsizes: *const W::Count,
    array_of_distribs: *const c_int,
    array_of_dargs: *const c_int,
    array_of_psizes: *const c_int,
    order: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let (n, ds, da, order) = darray_args(ndims, array_of_distribs, array_of_dargs, order)?;
    let old = dtype(oldtype)?;
    new_type_of::<W>(
        newtype,
        TypeDesc::darray(
            size as i64,
            rank as i64,
            &i64s(array_of_gsizes, n, "array_of_gsizes")?,
            &ds,
            &da,
            &i64s(array_of_psizes, n, "array_of_psizes")?,
            order,
            &old.desc,
        ),
    )
}

// ---- MPI_Pack_external ("external32", MPI 5.0 §5.2.?): big-endian, IEEE formats ----
//
// gpumpi's packed stream already has every value at its native size; external32 keeps those
// sizes (long double: 16 bytes, x87 extended precision <-> IEEE binary128) and stores each
// value big-endian, complex values as two big-endian reals. So converting is in place.

fn check_datarep(datarep: *const c_char) -> MpiResult<()> {
    let r = unsafe { read_cstr(datarep, "datarep")? };
    if r != "external32" {
        mpi_bail!(
            MPI_ERR_ARG,
            "datarep {r:?} is not \"external32\" (the only one MPI defines)"
        );
    }
    Ok(())
}

/// x87 80-bit extended (little-endian, in 16 bytes) -> IEEE binary128 (big-endian).
fn x87_to_quad(v: &mut [u8]) {
    let mant = u64::from_le_bytes(v[..8].try_into().unwrap());
    let se = u16::from_le_bytes([v[8], v[9]]) as u128;
    // Drop the explicit integer bit: the 63 fraction bits are the top of the 112-bit fraction.
    let frac = ((mant & !(1u64 << 63)) as u128) << 49;
    v.copy_from_slice(&((se << 112) | frac).to_be_bytes());
}

/// IEEE binary128 (big-endian) -> x87 80-bit extended (little-endian, zero-padded to 16 bytes).
fn quad_to_x87(v: &mut [u8]) {
    let q = u128::from_be_bytes(v[..16].try_into().unwrap());
    let se = (q >> 112) as u16;
    let frac = ((q >> 49) as u64) & !(1u64 << 63);
    let int_bit = if se & 0x7fff != 0 { 1u64 << 63 } else { 0 };
    v.fill(0);
    v[..8].copy_from_slice(&(frac | int_bit).to_le_bytes());
    v[8..10].copy_from_slice(&se.to_le_bytes());
}

/// Convert `n` packed elements of `d` between native and external32 representation, in place.
fn convert_external32(d: &TypeDesc, n: usize, buf: &mut [u8], to_external: bool) {
    use crate::mpi::datatype::Basic;
    let mut off = 0;
    for _ in 0..n {
        for b in d.blocks() {
            // The unit reversed is the value (or each half of a complex), i.e. its alignment.
            let unit = b.basic.align().max(1);
            let bytes = b.count * b.basic.size();
            let Some(chunk) = buf.get_mut(off..off + bytes) else {
                return;
            };
            for v in chunk.chunks_mut(unit) {
                match b.basic {
                    Basic::LongDouble | Basic::LongDoubleComplex if to_external => x87_to_quad(v),
                    Basic::LongDouble | Basic::LongDoubleComplex => quad_to_x87(v),
                    _ => v.reverse(),
                }
            }
            off += bytes;
        }
    }
}

unsafe fn pack_external(
    datarep: *const c_char,
    inbuf: *const c_void,
    n: usize,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: i64,
    pos: &mut i64,
) -> MpiResult<()> {
    check_datarep(datarep)?;
    let d = types::committed(datatype)?;
    let need = d.desc.packed_size(n) as i64;
    types::check_buf(inbuf, n, &d, "inbuf")?;
    types::check_buf(outbuf, need as usize, &types::BYTE, "outbuf")?;
    if *pos < 0 || *pos + need > outsize.max(0) {
        mpi_bail!(
            MPI_ERR_TRUNCATE,
            "packing {need} bytes at position {} overflows the output buffer of {outsize} bytes",
            *pos
        );
    }
    if need > 0 {
        let dst =
            std::slice::from_raw_parts_mut((outbuf as *mut u8).add(*pos as usize), need as usize);
        d.desc.pack(n, inbuf as *const u8, dst);
        convert_external32(&d.desc, n, dst, true);
    }
    *pos += need;
    Ok(())
}

unsafe fn unpack_external(
    datarep: *const c_char,
    inbuf: *const c_void,
    insize: i64,
    pos: &mut i64,
    outbuf: *mut c_void,
    n: usize,
    datatype: MPI_Datatype,
) -> MpiResult<()> {
    check_datarep(datarep)?;
    let d = types::committed(datatype)?;
    let need = d.desc.packed_size(n) as i64;
    types::check_buf(inbuf, need as usize, &types::BYTE, "inbuf")?;
    types::check_buf(outbuf, n, &d, "outbuf")?;
    if *pos < 0 || *pos + need > insize.max(0) {
        mpi_bail!(
            MPI_ERR_TRUNCATE,
            "unpacking {need} bytes at position {} reads past the input buffer of {insize} bytes",
            *pos
        );
    }
    if need > 0 {
        let mut tmp =
            std::slice::from_raw_parts((inbuf as *const u8).add(*pos as usize), need as usize)
                .to_vec();
        convert_external32(&d.desc, n, &mut tmp, false);
        d.desc.unpack(n, &tmp, outbuf as *mut u8);
    }
    *pos += need;
    Ok(())
}

pub unsafe fn MPI_Pack_external_size<W: Width>(
    datarep: *const c_char,
    incount: W::Count,
    datatype: MPI_Datatype,
    size: *mut W::Aint,
) -> MpiResult<()> {
    check_datarep(datarep)?;
    let n = count_arg(incount)?;
    let s = dtype(datatype)?.desc.packed_size(n) as i64;
    out(size, "size", W::Aint::or_undefined(s))
}

pub unsafe fn MPI_Pack_external<W: Width>(
    datarep: *const c_char,
    inbuf: *const c_void,
    incount: W::Count,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: W::Aint,
    position: *mut W::Aint,
) -> MpiResult<()> {
    at_position(position, |pos| {
        let n = count_arg(incount)?;
        pack_external(datarep, inbuf, n, datatype, outbuf, outsize.as_i64(), pos)
    })
}

pub unsafe fn MPI_Unpack_external<W: Width>(
    datarep: *const c_char,
    inbuf: *const c_void,
    insize: W::Aint,
    position: *mut W::Aint,
    outbuf: *mut c_void,
    outcount: W::Count,
    datatype: MPI_Datatype,
) -> MpiResult<()> {
    at_position(position, |pos| {
        let n = count_arg(outcount)?;
        unpack_external(datarep, inbuf, insize.as_i64(), pos, outbuf, n, datatype)
    })
}
