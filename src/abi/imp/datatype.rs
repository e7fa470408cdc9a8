//! Derived datatypes, packing, addresses (MPI 5.0 chapter 5).

use super::util::*;
use crate::abi::consts as c;
use crate::abi::ffi::*;
use crate::abi::objects::nonnull;
use crate::abi::types::{self, dtype, DtypeObj};
use crate::mpi::datatype::{CombinerKind, Distrib, F90Class, Order, TypeDesc};
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
            &i64s(blocklens, n, "array_of_blocklengths")?,
            &i64s(disps, n, "array_of_displacements")?,
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
            &i64s(blocklens, n, "array_of_blocklengths")?,
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
            &i64s(disps, n, "array_of_displacements")?,
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
            &i64s(blocklens, n, "array_of_blocklengths")?,
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
    // Attributes go through their keyvals' copy callbacks (MPI_TYPE_NULL_COPY_FN drops them).
    let attrs = old.attrs.lock().unwrap().clone();
    *d.attrs.lock().unwrap() = super::attr::copy_attrs(oldtype as usize, &attrs)?;
    *newtype = types::insert(d);
    Ok(())
}

/// MPI_Type_create_subarray and its large-count variant: one body for both count widths.
pub(super) unsafe fn subarray<T: AsI64>(
    ndims: c_int,
    sizes: *const T,
    subsizes: *const T,
    starts: *const T,
    order: c_int,
    oldtype: MPI_Datatype,
) -> MpiResult<TypeDesc> {
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
    TypeDesc::subarray(
        &i64s(sizes, n, "sizes")?,
        &i64s(subsizes, n, "subsizes")?,
        &i64s(starts, n, "starts")?,
        order,
        &old.desc,
    )
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
    new_type(
        newtype,
        subarray(ndims, sizes, subsizes, starts, order, oldtype),
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

/// Predefined Fortran types chosen by MPI_Type_create_f90_*, one handle per (class, p, r)
/// (the standard makes them predefined: the same arguments give the same type, never freed).
static F90_TYPES: std::sync::Mutex<Vec<((F90Class, Option<i64>, i64), usize)>> =
    std::sync::Mutex::new(Vec::new());

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

unsafe fn darray_args(
    ndims: c_int,
    distribs: *const c_int,
    dargs: *const c_int,
    order: c_int,
) -> MpiResult<(usize, Vec<Distrib>, Vec<Option<i64>>, Order)> {
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

pub unsafe fn MPI_Type_create_darray(
    size: c_int,
    rank: c_int,
    ndims: c_int,
    array_of_gsizes: *const c_int,
    array_of_distribs: *const c_int,
    array_of_dargs: *const c_int,
    array_of_psizes: *const c_int,
    order: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let (n, ds, da, order) = darray_args(ndims, array_of_distribs, array_of_dargs, order)?;
    let old = dtype(oldtype)?;
    new_type(
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

pub unsafe fn MPI_Type_create_darray_c(
    size: c_int,
    rank: c_int,
    ndims: c_int,
    array_of_gsizes: *const MPI_Count,
    array_of_distribs: *const c_int,
    array_of_dargs: *const c_int,
    array_of_psizes: *const c_int,
    order: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let (n, ds, da, order) = darray_args(ndims, array_of_distribs, array_of_dargs, order)?;
    let old = dtype(oldtype)?;
    let gs: Vec<i64> = slice(array_of_gsizes, n, "array_of_gsizes")?.to_vec();
    new_type(
        newtype,
        TypeDesc::darray(
            size as i64,
            rank as i64,
            &gs,
            &ds,
            &da,
            &i64s(array_of_psizes, n, "array_of_psizes")?,
            order,
            &old.desc,
        )
        .map(|t| t.with_large_counts()),
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

pub unsafe fn MPI_Pack_external_size(
    datarep: *const c_char,
    incount: c_int,
    datatype: MPI_Datatype,
    size: *mut MPI_Aint,
) -> MpiResult<()> {
    check_datarep(datarep)?;
    let n = count_arg(incount)?;
    out(
        size,
        "size",
        dtype(datatype)?.desc.packed_size(n) as MPI_Aint,
    )
}

pub unsafe fn MPI_Pack_external_size_c(
    datarep: *const c_char,
    incount: MPI_Count,
    datatype: MPI_Datatype,
    size: *mut MPI_Count,
) -> MpiResult<()> {
    check_datarep(datarep)?;
    if incount < 0 {
        mpi_bail!(MPI_ERR_COUNT, "incount {incount} is negative");
    }
    let s = dtype(datatype)?.desc.packed_size(incount as usize);
    out(size, "size", s as MPI_Count)
}

pub unsafe fn MPI_Pack_external(
    datarep: *const c_char,
    inbuf: *const c_void,
    incount: c_int,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: MPI_Aint,
    position: *mut MPI_Aint,
) -> MpiResult<()> {
    nonnull(position, "position")?;
    let mut pos = *position as i64;
    let n = count_arg(incount)?;
    pack_external(
        datarep,
        inbuf,
        n,
        datatype,
        outbuf,
        outsize as i64,
        &mut pos,
    )?;
    *position = pos as MPI_Aint;
    Ok(())
}

pub unsafe fn MPI_Pack_external_c(
    datarep: *const c_char,
    inbuf: *const c_void,
    incount: MPI_Count,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: MPI_Count,
    position: *mut MPI_Count,
) -> MpiResult<()> {
    nonnull(position, "position")?;
    if incount < 0 {
        mpi_bail!(MPI_ERR_COUNT, "incount {incount} is negative");
    }
    let mut pos = *position;
    pack_external(
        datarep,
        inbuf,
        incount as usize,
        datatype,
        outbuf,
        outsize,
        &mut pos,
    )?;
    *position = pos;
    Ok(())
}

pub unsafe fn MPI_Unpack_external(
    datarep: *const c_char,
    inbuf: *const c_void,
    insize: MPI_Aint,
    position: *mut MPI_Aint,
    outbuf: *mut c_void,
    outcount: c_int,
    datatype: MPI_Datatype,
) -> MpiResult<()> {
    nonnull(position, "position")?;
    let mut pos = *position as i64;
    let n = count_arg(outcount)?;
    unpack_external(datarep, inbuf, insize as i64, &mut pos, outbuf, n, datatype)?;
    *position = pos as MPI_Aint;
    Ok(())
}

pub unsafe fn MPI_Unpack_external_c(
    datarep: *const c_char,
    inbuf: *const c_void,
    insize: MPI_Count,
    position: *mut MPI_Count,
    outbuf: *mut c_void,
    outcount: MPI_Count,
    datatype: MPI_Datatype,
) -> MpiResult<()> {
    nonnull(position, "position")?;
    if outcount < 0 {
        mpi_bail!(MPI_ERR_COUNT, "outcount {outcount} is negative");
    }
    let mut pos = *position;
    unpack_external(
        datarep,
        inbuf,
        insize,
        &mut pos,
        outbuf,
        outcount as usize,
        datatype,
    )?;
    *position = pos;
    Ok(())
}
