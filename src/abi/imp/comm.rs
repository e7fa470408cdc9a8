//! Communicator management (MPI 5.0 §7.4): dup, split, create, free, compare,
//! names. New communicators agree on a context id with one allreduce of the
//! members' free-id bitmaps over the parent (the lowest id free everywhere).

use super::util::*;
use crate::abi::consts as c;
use crate::abi::ffi::*;
use crate::dispatch::{allgather_bytes, allreduce_band_u64};
use crate::mpi::error::MpiResult;
use crate::mpi::group::Group;
use crate::mpi_bail;
use crate::runtime::objects::{comm, group, new_comm, nonnull, objects, CommObj, Topo};
use crate::runtime::{self, CTX_WORDS};
use std::os::raw::{c_char, c_int};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Agree on a new context id with every rank of `parent` (collective over `parent`).
///
/// Each round, every rank offers ids it has free and ANDs the offers over the parent; the
/// lowest id in the result is taken. Threads of one rank may allocate at once (for different
/// parents), so an id offered by one allocation is not offered by another until the first
/// ends, and on each rank only the allocation in flight whose parent has the lowest context id
/// offers anything: two allocations can then never agree on one id, and the one with the
/// lowest parent offers everywhere once it is in flight everywhere, so it wins. A round in
/// which some rank held its offer back ends with nothing agreed and is repeated (the last word
/// of the offer says whether the rank offered all it has free, so that every rank tells an
/// exhausted id space from a held-back offer alike).
pub fn alloc_ctx(parent: &Arc<CommObj>) -> MpiResult<u32> {
    let key = parent.ctx;
    runtime::with(|rt| {
        rt.ctx_allocating.push(key);
        Ok(())
    })?;
    let out = agree_ctx(parent, key);
    let _ = runtime::with(|rt| {
        if let Some(i) = rt.ctx_allocating.iter().position(|&k| k == key) {
            rt.ctx_allocating.swap_remove(i);
        }
        Ok(())
    });
    out
}

/// The rounds of [`alloc_ctx`].
fn agree_ctx(parent: &Arc<CommObj>, key: u32) -> MpiResult<u32> {
    loop {
        let offer: Vec<u64> = runtime::with(|rt| {
            let first = rt.ctx_allocating.iter().all(|&k| k >= key);
            let mut offer = vec![0u64; CTX_WORDS + 1];
            if first {
                for (w, o) in offer.iter_mut().take(CTX_WORDS).enumerate() {
                    *o = !(rt.ctx_used[w] | rt.ctx_offered[w]);
                    rt.ctx_offered[w] |= *o;
                }
                let all = (0..CTX_WORDS).all(|w| rt.ctx_offered[w] == offer[w]);
                offer[CTX_WORDS] = if all { !0 } else { 0 };
            }
            Ok(offer)
        })?;
        let mut agreed = offer.clone();
        let res = allreduce_band_u64(parent, &mut agreed);
        let taken = runtime::with(|rt| {
            for (w, o) in offer.iter().take(CTX_WORDS).enumerate() {
                rt.ctx_offered[w] &= !o;
            }
            if res.is_err() {
                return Ok(None);
            }
            let Some(w) = agreed[..CTX_WORDS].iter().position(|&b| b != 0) else {
                return Ok(None);
            };
            let b = agreed[w].trailing_zeros() as usize;
            rt.ctx_used[w] |= 1 << b;
            Ok(Some((w * 64 + b) as u32))
        })?;
        res?;
        if let Some(id) = taken {
            return Ok(id);
        }
        if agreed[CTX_WORDS] != 0 {
            mpi_bail!(
                MPI_ERR_INTERN,
                "out of communicator context ids ({} in use): free some communicators",
                CTX_WORDS * 64
            )
        }
        std::thread::yield_now();
    }
}

pub fn release_ctx(id: u32) {
    // collcheck hook: this rank's collective records of the id go with it (a communicator that
    // gets the id next counts its collectives from 0 again).
    if let Some(rings) = runtime::rings() {
        rings.forget(id);
    }
    let _ = runtime::with(|rt| {
        // The collective calls given up on the id (engine::refuse) go too.
        rt.engine
            .forget_refused(id | crate::runtime::objects::COLL_CTX_BIT);
        let (w, b) = (id as usize / 64, id as usize % 64);
        if w < CTX_WORDS && id > 1 {
            rt.ctx_used[w] &= !(1 << b);
        }
        Ok(())
    });
}

/// Build the communicator object for `group` if this process is in it.
pub fn make_comm(
    ctx: u32,
    group: Group,
    topo: Option<Topo>,
    parent: &CommObj,
) -> MpiResult<MPI_Comm> {
    let me = parent.world_rank(parent.rank);
    let Some(rank) = group.rank_of(me) else {
        return Ok(c::MPI_COMM_NULL);
    };
    let mut cm = CommObj::new(ctx, Arc::new(group), rank, "");
    cm.topo = topo;
    *cm.errh.get_mut().unwrap() = *parent.errh.lock().unwrap();
    Ok(new_comm(cm))
}

pub unsafe fn MPI_Comm_dup(cm: MPI_Comm, newcomm: *mut MPI_Comm) -> MpiResult<()> {
    nonnull(newcomm, "newcomm")?;
    let parent = comm(cm)?;
    let ctx = alloc_ctx(&parent)?;
    let attrs = parent.attrs.lock().unwrap().clone();
    let copied = super::attr::copy_attrs(cm as usize, &attrs)?;
    let h = make_comm(ctx, (*parent.group).clone(), parent.topo.clone(), &parent)?;
    *comm(h)?.attrs.lock().unwrap() = copied;
    *comm(h)?.info.lock().unwrap() = parent.info.lock().unwrap().clone();
    *newcomm = h;
    Ok(())
}

pub unsafe fn MPI_Comm_dup_with_info(
    cm: MPI_Comm,
    info: MPI_Info,
    newcomm: *mut MPI_Comm,
) -> MpiResult<()> {
    crate::runtime::objects::check_info(info)?;
    MPI_Comm_dup(cm, newcomm)
}

pub unsafe fn MPI_Comm_idup(
    cm: MPI_Comm,
    newcomm: *mut MPI_Comm,
    request: *mut MPI_Request,
) -> MpiResult<()> {
    nonnull(request, "request")?;
    MPI_Comm_dup(cm, newcomm)?;
    // The duplicate exists already: the request is complete from the start.
    super::p2p::submit(request, |_| {
        Ok(crate::runtime::request::ReqKind::Done(
            crate::runtime::request::Status::EMPTY,
        ))
    })
}

pub unsafe fn MPI_Comm_idup_with_info(
    cm: MPI_Comm,
    info: MPI_Info,
    newcomm: *mut MPI_Comm,
    request: *mut MPI_Request,
) -> MpiResult<()> {
    crate::runtime::objects::check_info(info)?;
    MPI_Comm_idup(cm, newcomm, request)
}

/// The new group of each color from everyone's (color, key).
fn split_group(parent: &Arc<CommObj>, color: c_int, key: c_int) -> MpiResult<Option<Group>> {
    if color < 0 && color != c::MPI_UNDEFINED {
        mpi_bail!(
            MPI_ERR_ARG,
            "color {color} is negative (and not MPI_UNDEFINED)"
        );
    }
    let mut mine = [0u8; 8];
    mine[..4].copy_from_slice(&color.to_le_bytes());
    mine[4..].copy_from_slice(&key.to_le_bytes());
    let all = allgather_bytes(parent, &mine)?;
    if color == c::MPI_UNDEFINED {
        return Ok(None);
    }
    let entries: Vec<(i32, i32, usize)> = (0..parent.size())
        .map(|r| {
            let c = i32::from_le_bytes(all[r * 8..r * 8 + 4].try_into().unwrap());
            let k = i32::from_le_bytes(all[r * 8 + 4..r * 8 + 8].try_into().unwrap());
            (c, k, parent.world_rank(r))
        })
        .collect();
    Ok(Some(Group::new(Group::split_order(&entries, color))))
}

pub unsafe fn MPI_Comm_split(
    cm: MPI_Comm,
    color: c_int,
    key: c_int,
    newcomm: *mut MPI_Comm,
) -> MpiResult<()> {
    nonnull(newcomm, "newcomm")?;
    let parent = comm(cm)?;
    let g = split_group(&parent, color, key)?;
    let ctx = alloc_ctx(&parent)?;
    *newcomm = match g {
        Some(g) => make_comm(ctx, g, None, &parent)?,
        None => {
            release_ctx(ctx);
            c::MPI_COMM_NULL
        }
    };
    Ok(())
}

/// The info key naming a hardware resource type (MPI 4.0 §7.4.2).
const HW_RESOURCE_TYPE: &str = "mpi_hw_resource_type";
/// The one resource type gpumpi knows: the processes of one node.
const SHARED_MEMORY: &str = "mpi_shared_memory";

/// MPI_Comm_split_type. One node = one shared-memory domain, the only hardware level
/// gpumpi knows: MPI_COMM_TYPE_SHARED and the guided types with `mpi_hw_resource_type` =
/// `mpi_shared_memory` split by node; a guided split naming any other (or no) resource
/// type gives MPI_COMM_NULL. MPI_COMM_TYPE_HW_UNGUIDED must give a strict subset of the
/// parent: the node, where the parent spans several nodes (its type is then stored in
/// `info`), else MPI_COMM_NULL.
pub unsafe fn MPI_Comm_split_type(
    cm: MPI_Comm,
    split_type: c_int,
    key: c_int,
    info: MPI_Info,
    newcomm: *mut MPI_Comm,
) -> MpiResult<()> {
    crate::runtime::objects::check_info(info)?;
    let parent = comm(cm)?;
    // The node as MPI_Init mapped it (GPUMPI_NODE_ID or the host name), else the launcher's.
    let node = runtime::with(|rt| {
        Ok(crate::bootstrap::node::ranks_with(rt.boot.rank())
            .unwrap_or_else(|| rt.boot.node_ranks()))
    })?;
    let node_color = node.iter().copied().min().unwrap_or(0) as c_int;
    let info_value = || -> MpiResult<Option<String>> {
        if info == c::MPI_INFO_NULL {
            return Ok(None);
        }
        let l = crate::runtime::objects::info_obj(info)?;
        let v = l.lock().unwrap();
        Ok(v.iter()
            .find(|e| e.0 == HW_RESOURCE_TYPE)
            .map(|e| e.1.clone()))
    };
    let mut unguided_found = false;
    let color = match split_type {
        t if t == c::MPI_UNDEFINED => c::MPI_UNDEFINED,
        t if t == c::MPI_COMM_TYPE_SHARED => node_color,
        t if t == c::MPI_COMM_TYPE_HW_GUIDED || t == c::MPI_COMM_TYPE_RESOURCE_GUIDED => {
            if info_value()?.as_deref() == Some(SHARED_MEMORY) {
                node_color
            } else {
                c::MPI_UNDEFINED
            }
        }
        t if t == c::MPI_COMM_TYPE_HW_UNGUIDED => {
            // Every member sees the same answer: whether all of the parent is on its node.
            let all_here = (0..parent.size()).all(|r| node.contains(&parent.world_rank(r)));
            if all_here {
                c::MPI_UNDEFINED
            } else {
                unguided_found = true;
                node_color
            }
        }
        t => mpi_bail!(MPI_ERR_ARG, "split_type {t} is not a known MPI_COMM_TYPE_*"),
    };
    MPI_Comm_split(cm, color, key, newcomm)?;
    if unguided_found && info != c::MPI_INFO_NULL {
        let l = crate::runtime::objects::info_obj(info)?;
        let mut v = l.lock().unwrap();
        v.retain(|e| e.0 != HW_RESOURCE_TYPE);
        v.push((HW_RESOURCE_TYPE.to_string(), SHARED_MEMORY.to_string()));
    }
    Ok(())
}

pub unsafe fn MPI_Comm_create(cm: MPI_Comm, g: MPI_Group, newcomm: *mut MPI_Comm) -> MpiResult<()> {
    nonnull(newcomm, "newcomm")?;
    let parent = comm(cm)?;
    let g = group(g)?;
    if g.ranks.iter().any(|w| parent.group.rank_of(*w).is_none()) {
        mpi_bail!(
            MPI_ERR_GROUP,
            "the group is not a subset of the communicator's group"
        );
    }
    let ctx = alloc_ctx(&parent)?;
    let h = make_comm(ctx, (*g).clone(), None, &parent)?;
    if h == c::MPI_COMM_NULL {
        release_ctx(ctx);
    }
    *newcomm = h;
    Ok(())
}

pub unsafe fn MPI_Comm_create_group(
    cm: MPI_Comm,
    g: MPI_Group,
    tag: c_int,
    newcomm: *mut MPI_Comm,
) -> MpiResult<()> {
    nonnull(newcomm, "newcomm")?;
    let parent = comm(cm)?;
    let g = group(g)?;
    super::p2p::check_send_tag(tag)?;
    let me = parent.world_rank(parent.rank);
    let Some(my) = g.rank_of(me) else {
        mpi_bail!(MPI_ERR_GROUP, "the calling process is not in the group")
    };
    if g.ranks.iter().any(|w| parent.group.rank_of(*w).is_none()) {
        mpi_bail!(
            MPI_ERR_GROUP,
            "the group is not a subset of the communicator's group"
        );
    }
    // Only the group's members take part: agree on a context id over a temporary communicator
    // made of the group, in a context derived from the parent's and the user's tag.
    let mut tmp = CommObj::new(parent.ctx | (1 << 30), Arc::new((*g).clone()), my, "");
    tmp.coll_seq = AtomicU64::new(((tag as u32) << 8) as u64);
    let tmp = Arc::new(tmp);
    let ctx = alloc_ctx(&tmp)?;
    *newcomm = make_comm(ctx, (*g).clone(), None, &parent)?;
    Ok(())
}

/// MPI_Comm_create_from_group (MPI 4.0 §7.4.2): collective over the group's members only.
/// Without sessions the group comes from a communicator; the members agree on a context id
/// over a temporary communicator in a context kept for this call, its collectives tagged by
/// a hash of `stringtag` (as MPI_Comm_create_group uses the user's tag).
pub unsafe fn MPI_Comm_create_from_group(
    g: MPI_Group,
    stringtag: *const c_char,
    info: MPI_Info,
    errhandler: MPI_Errhandler,
    newcomm: *mut MPI_Comm,
) -> MpiResult<()> {
    nonnull(newcomm, "newcomm")?;
    let tag = read_cstr(stringtag, "stringtag")?;
    crate::runtime::objects::check_info(info)?;
    let g = group(g)?;
    let me = runtime::with(|rt| Ok(rt.boot.rank()))?;
    let Some(my) = g.rank_of(me) else {
        mpi_bail!(MPI_ERR_GROUP, "the calling process is not in the group")
    };
    // FNV-1a of the tag, folded into the collective-sequence bits.
    let hash = tag.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    });
    let mut tmp = CommObj::new((1 << 30) | (1 << 29), Arc::new((*g).clone()), my, "");
    tmp.coll_seq = AtomicU64::new(((hash & 0x3f_ffff) << 8) as u64);
    let tmp = Arc::new(tmp);
    let ctx = alloc_ctx(&tmp)?;
    let h = new_comm(CommObj::new(ctx, Arc::new((*g).clone()), my, ""));
    if let Err(e) = super::errhandler::MPI_Comm_set_errhandler(h, errhandler) {
        let mut h = h;
        let _ = MPI_Comm_free(&mut h);
        return Err(e);
    }
    *newcomm = h;
    Ok(())
}

pub unsafe fn MPI_Comm_free(cm: *mut MPI_Comm) -> MpiResult<()> {
    nonnull(cm, "comm")?;
    let h = *cm;
    if h == c::MPI_COMM_WORLD || h == c::MPI_COMM_SELF {
        mpi_bail!(MPI_ERR_COMM, "a predefined communicator cannot be freed");
    }
    let o = comm(h)?;
    super::attr::delete_all_comm_attrs(h, &o)?;
    if let Some(sc) = o.stream.get() {
        // The stream's enqueued work must finish before its staging and the stream kernel's
        // scratch (held by the private duplicate's GPU state) are freed.
        if let Err(e) = sc.release() {
            mpi_bail!(MPI_ERR_OTHER, "the communicator's CUDA stream: {e}");
        }
        if let Ok(k) = &sc.kernel {
            let null = c::MPI_COMM_NULL as usize;
            let mut d = k.setup_comm.swap(null, std::sync::atomic::Ordering::AcqRel) as MPI_Comm;
            if d != c::MPI_COMM_NULL {
                MPI_Comm_free(&mut d)?;
            }
        }
    }
    crate::dispatch::release_gpu(&o)?;
    crate::runtime::objects::remove_comm(h);
    super::bsend::forget_comm(o.ctx);
    release_ctx(o.ctx);
    *cm = c::MPI_COMM_NULL;
    Ok(())
}

pub unsafe fn MPI_Comm_disconnect(cm: *mut MPI_Comm) -> MpiResult<()> {
    MPI_Comm_free(cm)
}

pub unsafe fn MPI_Comm_compare(a: MPI_Comm, b: MPI_Comm, result: *mut c_int) -> MpiResult<()> {
    let (ca, cb) = (comm(a)?, comm(b)?);
    let r = if a == b {
        c::MPI_IDENT
    } else {
        match ca.group.compare(&cb.group) {
            x if x == c::MPI_IDENT => c::MPI_CONGRUENT,
            x => x,
        }
    };
    out(result, "result", r)
}

pub unsafe fn MPI_Comm_set_name(cm: MPI_Comm, name: *const c_char) -> MpiResult<()> {
    let n = read_cstr(name, "comm_name")?;
    *comm(cm)?.name.lock().unwrap() = n.chars().take(127).collect();
    Ok(())
}

pub unsafe fn MPI_Comm_get_name(
    cm: MPI_Comm,
    name: *mut c_char,
    resultlen: *mut c_int,
) -> MpiResult<()> {
    let n = if cm == c::MPI_COMM_NULL {
        "MPI_COMM_NULL".to_string()
    } else {
        comm(cm)?.name.lock().unwrap().clone()
    };
    write_cstr(&n, name, 128, resultlen)
}

pub unsafe fn MPI_Comm_test_inter(cm: MPI_Comm, flag: *mut c_int) -> MpiResult<()> {
    comm(cm)?;
    out(flag, "flag", 0)
}

pub unsafe fn MPI_Comm_remote_size(cm: MPI_Comm, _size: *mut c_int) -> MpiResult<()> {
    comm(cm)?;
    mpi_bail!(MPI_ERR_COMM, "the communicator is not an intercommunicator")
}

pub unsafe fn MPI_Comm_get_parent(parent: *mut MPI_Comm) -> MpiResult<()> {
    runtime::with(|_| Ok(()))?;
    out(parent, "parent", c::MPI_COMM_NULL)
}

pub unsafe fn MPI_Comm_set_info(cm: MPI_Comm, info: MPI_Info) -> MpiResult<()> {
    let o = comm(cm)?;
    let v = crate::runtime::objects::info_obj(info)?
        .lock()
        .unwrap()
        .clone();
    *o.info.lock().unwrap() = v;
    Ok(())
}

pub unsafe fn MPI_Comm_get_info(cm: MPI_Comm, info_used: *mut MPI_Info) -> MpiResult<()> {
    let v = comm(cm)?.info.lock().unwrap().clone();
    let h = objects().infos.insert(Arc::new(std::sync::Mutex::new(v)));
    out(info_used, "info_used", h as MPI_Info)
}
