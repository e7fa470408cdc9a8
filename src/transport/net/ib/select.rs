//! The ibverbs backend's choices, as pure functions over what the devices report (unit-tested
//! here without a device): which devices and ports (`GPUMPI_IB_HCA`), which GID
//! (`GPUMPI_IB_GID_INDEX`), which path MTU (`GPUMPI_IB_MTU`), whether to ask for relaxed
//! ordering (`GPUMPI_IB_RELAXED_ORDERING`) and how to register device memory (`GPUMPI_IB_GDR`).

use crate::sys::ibverbs::{GID_TYPE_IB, GID_TYPE_ROCE_V2};

/// A parsed `GPUMPI_IB_HCA` (the syntax of `NCCL_IB_HCA`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct HcaSpec {
    /// `^`: the listed devices are excluded.
    pub exclude: bool,
    /// `=`: names match exactly (else as prefixes).
    pub exact: bool,
    /// Device name and optional port.
    pub items: Vec<(String, Option<u8>)>,
}

impl HcaSpec {
    pub fn parse(s: &str) -> Result<HcaSpec, String> {
        let mut rest = s.trim();
        let mut spec = HcaSpec::default();
        if let Some(r) = rest.strip_prefix('^') {
            spec.exclude = true;
            rest = r;
        }
        if let Some(r) = rest.strip_prefix('=') {
            spec.exact = true;
            rest = r;
        }
        for item in rest.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, port) = match item.split_once(':') {
                Some((n, p)) => {
                    let port =
                        p.parse::<u8>().ok().filter(|&p| p > 0).ok_or_else(|| {
                            format!("GPUMPI_IB_HCA={s}: bad port `{p}` in `{item}`")
                        })?;
                    (n, Some(port))
                }
                None => (item, None),
            };
            spec.items.push((name.to_string(), port));
        }
        Ok(spec)
    }

    /// Whether `dev:port` is selected.
    pub fn selects(&self, dev: &str, port: u8) -> bool {
        let hit = self.items.iter().any(|(n, p)| {
            let name_ok = if self.exact {
                dev == n
            } else {
                dev.starts_with(n.as_str())
            };
            name_ok && p.is_none_or(|p| p == port)
        });
        if self.items.is_empty() {
            return true;
        }
        hit != self.exclude
    }

    /// Whether the user named ports explicitly (a named port that is down is an error, not a
    /// skip).
    pub fn names_devices(&self) -> bool {
        !self.exclude && !self.items.is_empty()
    }
}

/// One entry of a port's GID table as the device reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidInfo {
    pub index: i32,
    pub gid: [u8; 16],
    /// `GID_TYPE_*`, `None` when the library and sysfs do not say.
    pub gid_type: Option<u32>,
}

fn is_empty(g: &[u8; 16]) -> bool {
    g.iter().all(|&b| b == 0)
}

fn is_v4_mapped(g: &[u8; 16]) -> bool {
    g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff
}

fn is_link_local(g: &[u8; 16]) -> bool {
    g[0] == 0xfe && (g[1] & 0xc0) == 0x80
}

/// The GID index to use. `want`: `GPUMPI_IB_GID_INDEX` (`None` = auto). On InfiniBand auto is
/// index 0; on RoCE (`roce`) the first RoCE v2 GID with an IPv4-mapped address, else the first
/// RoCE v2 GID with a global IPv6 address, else the first RoCE v2 GID, else the first non-empty
/// GID. `table_len` is the port's GID table size; `gids` its non-empty entries as read.
pub fn choose_gid(
    port: &str,
    roce: bool,
    table_len: i32,
    gids: &[GidInfo],
    want: Option<i32>,
) -> Result<i32, String> {
    if let Some(w) = want {
        if w < 0 || w >= table_len {
            return Err(format!(
                "ib: GPUMPI_IB_GID_INDEX={w} is outside the GID table of {port} ({table_len} \
                 entries)"
            ));
        }
        return match gids.iter().find(|g| g.index == w) {
            Some(g) if !is_empty(&g.gid) => Ok(w),
            _ => Err(format!(
                "ib: GPUMPI_IB_GID_INDEX={w}: the GID at that index of {port} is empty (no \
                 address assigned to it); valid indices: {:?}",
                gids.iter()
                    .filter(|g| !is_empty(&g.gid))
                    .map(|g| g.index)
                    .collect::<Vec<_>>()
            )),
        };
    }
    let valid: Vec<&GidInfo> = gids.iter().filter(|g| !is_empty(&g.gid)).collect();
    if !roce {
        return Ok(0);
    }
    let v2 = |g: &&&GidInfo| g.gid_type == Some(GID_TYPE_ROCE_V2);
    valid
        .iter()
        .filter(v2)
        .find(|g| is_v4_mapped(&g.gid))
        .or_else(|| {
            valid
                .iter()
                .filter(v2)
                .find(|g| !is_v4_mapped(&g.gid) && !is_link_local(&g.gid))
        })
        .or_else(|| valid.iter().find(v2))
        .or_else(|| valid.iter().find(|g| g.gid_type != Some(GID_TYPE_IB)))
        .or_else(|| valid.first())
        .map(|g| g.index)
        .ok_or_else(|| format!("ib: {port} (RoCE) has no GID: no IP address on its interface?"))
}

/// Bytes of an `IBV_MTU_*` value (1..=5).
pub fn mtu_bytes(e: u32) -> u32 {
    128 << e.clamp(1, 5)
}

/// The `IBV_MTU_*` value of `bytes`, or `None` if it is not one of 256..4096.
pub fn mtu_enum(bytes: u32) -> Option<u32> {
    (1..=5).find(|&e| mtu_bytes(e) == bytes)
}

/// The path MTU (`IBV_MTU_*`) of a connection between two ports whose active MTUs are `mine`
/// and `theirs`, with `GPUMPI_IB_MTU` set to `want_mine` here and `want_theirs` at the peer (0 =
/// unset): unset on both sides, the smaller active MTU; set, that MTU, which both ports must
/// support and both sides must agree on.
pub fn path_mtu(
    mine: u32,
    theirs: u32,
    want_mine: u32,
    want_theirs: u32,
    peer: &str,
) -> Result<u32, String> {
    if want_mine != want_theirs {
        let show = |w: u32| {
            if w == 0 {
                "unset".to_string()
            } else {
                mtu_bytes(w).to_string()
            }
        };
        return Err(format!(
            "ib: MTU mismatch with {peer}: GPUMPI_IB_MTU is {} here and {} there (set the same \
             value on every node)",
            show(want_mine),
            show(want_theirs)
        ));
    }
    if want_mine == 0 {
        return Ok(mine.min(theirs));
    }
    if mine < want_mine || theirs < want_mine {
        return Err(format!(
            "ib: MTU mismatch with {peer}: GPUMPI_IB_MTU={} but the active MTU is {} here and \
             {} there (raise the ports' MTU or lower GPUMPI_IB_MTU)",
            mtu_bytes(want_mine),
            mtu_bytes(mine),
            mtu_bytes(theirs)
        ));
    }
    Ok(want_mine)
}

/// Whether to register with relaxed ordering: `setting` is `GPUMPI_IB_RELAXED_ORDERING`
/// (`auto`, `0`, `1`), `has_iova2` whether libibverbs has `ibv_reg_mr_iova2`.
pub fn relaxed_ordering(setting: &str, has_iova2: bool) -> Result<bool, String> {
    match setting.trim().to_ascii_lowercase().as_str() {
        "" | "auto" => Ok(has_iova2),
        "0" | "off" | "no" | "false" => Ok(false),
        "1" | "on" | "yes" | "true" if has_iova2 => Ok(true),
        "1" | "on" | "yes" | "true" => Err(
            "ib: GPUMPI_IB_RELAXED_ORDERING=1 but this libibverbs has no ibv_reg_mr_iova2 \
             (rdma-core 22 or later is needed for relaxed ordering)"
                .into(),
        ),
        v => Err(format!(
            "ib: GPUMPI_IB_RELAXED_ORDERING={v}: expected auto, 0 or 1"
        )),
    }
}

/// How device memory is registered with the NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GdrPath {
    /// `cuMemGetHandleForAddressRange` (dma-buf fd) then `ibv_reg_dmabuf_mr`.
    DmaBuf,
    /// `ibv_reg_mr` on the device pointer (nvidia-peermem translates it).
    PeerMem,
    /// Not registered: device data is staged through host memory by the caller.
    Staging,
}

/// What decides the registration path of device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdrFacts {
    /// libibverbs exports `ibv_reg_dmabuf_mr`.
    pub ib_dmabuf: bool,
    /// The CUDA driver has `cuMemGetHandleForAddressRange` and the device reports
    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`.
    pub cuda_dmabuf: bool,
    /// nvidia-peermem (or the older nv_peer_mem) is loaded.
    pub peermem: bool,
}

/// The registration path for device memory and why (`setting`: `GPUMPI_IB_GDR`, `auto`, `0`,
/// `dmabuf`, `peermem`): dma-buf first, peer memory next, staging otherwise.
pub fn gdr_path(setting: &str, f: GdrFacts) -> Result<(GdrPath, String), String> {
    let dmabuf_why = || match (f.ib_dmabuf, f.cuda_dmabuf) {
        (true, true) => String::new(),
        (false, true) => "libibverbs has no ibv_reg_dmabuf_mr (rdma-core 34+)".into(),
        (true, false) => "the CUDA driver or device does not export dma-bufs".into(),
        (false, false) => {
            "neither libibverbs (ibv_reg_dmabuf_mr) nor CUDA (dma-buf export) supports it".into()
        }
    };
    match setting.trim().to_ascii_lowercase().as_str() {
        "0" | "off" | "no" | "false" => Ok((
            GdrPath::Staging,
            "GPUMPI_IB_GDR=0: device memory is staged through host memory".into(),
        )),
        "dmabuf" if f.ib_dmabuf && f.cuda_dmabuf => {
            Ok((GdrPath::DmaBuf, "dma-buf (GPUMPI_IB_GDR=dmabuf)".into()))
        }
        "dmabuf" => Err(format!("ib: GPUMPI_IB_GDR=dmabuf: {}", dmabuf_why())),
        "peermem" if f.peermem => Ok((
            GdrPath::PeerMem,
            "peer memory (GPUMPI_IB_GDR=peermem)".into(),
        )),
        "peermem" => Err(
            "ib: GPUMPI_IB_GDR=peermem: the nvidia-peermem kernel module is not loaded \
             (modprobe nvidia-peermem)"
                .into(),
        ),
        "" | "auto" | "1" => Ok(if f.ib_dmabuf && f.cuda_dmabuf {
            (
                GdrPath::DmaBuf,
                "dma-buf: cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr".into(),
            )
        } else if f.peermem {
            (
                GdrPath::PeerMem,
                format!(
                    "peer memory: ibv_reg_mr on device pointers through nvidia-peermem (no \
                     dma-buf: {})",
                    dmabuf_why()
                ),
            )
        } else {
            (
                GdrPath::Staging,
                format!(
                    "staging through host memory (no dma-buf: {}; nvidia-peermem not loaded)",
                    dmabuf_why()
                ),
            )
        }),
        v => Err(format!(
            "ib: GPUMPI_IB_GDR={v}: expected auto, 0, dmabuf or peermem"
        )),
    }
}

/// Whether data received by RDMA into device memory is flushed before the receive completes
/// (`setting`: `GPUMPI_IB_GDR_FLUSH`, `auto`, `0`, `1`): an RDMA read of the received buffer
/// on a loopback queue pair (as NCCL's GPUDirect flush), which makes the NIC's writes visible
/// to the GPU on generations before Hopper. `auto`: on where device memory is registered
/// (`gdr` not staging) and the oldest visible GPU (`min_cc`, its compute capability; `None`:
/// unknown) is older than 9.0.
pub fn gdr_flush(setting: &str, gdr: GdrPath, min_cc: Option<(i32, i32)>) -> Result<bool, String> {
    match setting.trim().to_ascii_lowercase().as_str() {
        "" | "auto" => Ok(gdr != GdrPath::Staging && min_cc.is_none_or(|(major, _)| major < 9)),
        "1" | "on" | "yes" | "true" => Ok(true),
        "0" | "off" | "no" | "false" => Ok(false),
        v => Err(format!(
            "ib: GPUMPI_IB_GDR_FLUSH={v}: expected auto, 0 or 1"
        )),
    }
}

/// Whether nvidia-peermem (or nv_peer_mem) is loaded, as NCCL checks it.
pub fn peermem_loaded() -> bool {
    [
        "/sys/kernel/mm/memory_peers/nv_mem/version",
        "/sys/kernel/mm/memory_peers/nvidia-peermem/version",
        "/sys/module/nvidia_peermem/version",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::ibverbs::GID_TYPE_ROCE_V1;

    #[test]
    fn hca_spec_follows_nccl_ib_hca() {
        let all = HcaSpec::parse("").unwrap();
        assert!(all.selects("mlx5_0", 1) && !all.names_devices());
        let p = HcaSpec::parse("mlx5").unwrap();
        assert!(p.selects("mlx5_0", 1) && p.selects("mlx5_10", 2) && !p.selects("bnxt_0", 1));
        let e = HcaSpec::parse("=mlx5_1").unwrap();
        assert!(e.selects("mlx5_1", 1) && !e.selects("mlx5_10", 1));
        let port = HcaSpec::parse("mlx5_0:2,mlx5_1").unwrap();
        assert!(!port.selects("mlx5_0", 1) && port.selects("mlx5_0", 2));
        assert!(port.selects("mlx5_1", 1));
        let x = HcaSpec::parse("^=mlx5_2").unwrap();
        assert!(x.selects("mlx5_0", 1) && !x.selects("mlx5_2", 1) && x.selects("mlx5_20", 1));
        assert!(!x.names_devices());
        assert!(HcaSpec::parse("mlx5_0:x").unwrap_err().contains("bad port"));
    }

    fn gid(index: i32, bytes: [u8; 16], t: u32) -> GidInfo {
        GidInfo {
            index,
            gid: bytes,
            gid_type: Some(t),
        }
    }

    const LL: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1];
    const V4: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 1];
    const G6: [u8; 16] = [0x20, 0x01, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];

    #[test]
    fn gid_auto_prefers_roce_v2_ipv4_then_global_ipv6() {
        let t = [
            gid(0, LL, GID_TYPE_ROCE_V1),
            gid(1, LL, GID_TYPE_ROCE_V2),
            gid(2, G6, GID_TYPE_ROCE_V1),
            gid(3, G6, GID_TYPE_ROCE_V2),
            gid(4, V4, GID_TYPE_ROCE_V1),
            gid(5, V4, GID_TYPE_ROCE_V2),
        ];
        assert_eq!(choose_gid("d:1", true, 8, &t, None), Ok(5));
        assert_eq!(choose_gid("d:1", true, 8, &t[..5], None), Ok(3));
        assert_eq!(choose_gid("d:1", true, 8, &t[..3], None), Ok(1));
        assert_eq!(choose_gid("d:1", true, 8, &t[..1], None), Ok(0));
        // InfiniBand: index 0 whatever the table holds.
        assert_eq!(choose_gid("d:1", false, 8, &t[1..], None), Ok(0));
        assert!(choose_gid("d:1", true, 8, &[], None).is_err());
    }

    #[test]
    fn gid_index_setting_is_checked() {
        let t = [
            gid(0, LL, GID_TYPE_ROCE_V1),
            gid(1, [0; 16], GID_TYPE_ROCE_V2),
        ];
        assert_eq!(choose_gid("d:1", true, 4, &t, Some(0)), Ok(0));
        let e = choose_gid("mlx5_0:1", true, 4, &t, Some(9)).unwrap_err();
        assert!(
            e.contains("GPUMPI_IB_GID_INDEX=9")
                && e.contains("mlx5_0:1")
                && e.contains("4 entries"),
            "{e}"
        );
        let e = choose_gid("d:1", true, 4, &t, Some(1)).unwrap_err();
        assert!(e.contains("empty") && e.contains("[0]"), "{e}");
        assert!(choose_gid("d:1", true, 4, &t, Some(-1)).is_err());
    }

    #[test]
    fn path_mtu_is_the_smaller_or_the_agreed_setting() {
        assert_eq!(path_mtu(5, 3, 0, 0, "p"), Ok(3));
        assert_eq!(path_mtu(5, 5, 4, 4, "p"), Ok(4));
        let e = path_mtu(5, 3, 5, 5, "peer-x").unwrap_err();
        assert!(
            e.contains("MTU mismatch with peer-x") && e.contains("4096") && e.contains("1024"),
            "{e}"
        );
        let e = path_mtu(5, 5, 5, 0, "p").unwrap_err();
        assert!(e.contains("4096 here and unset there"), "{e}");
        assert_eq!(mtu_enum(2048), Some(4));
        assert_eq!(mtu_enum(1500), None);
        assert_eq!(mtu_bytes(1), 256);
    }

    #[test]
    fn relaxed_ordering_setting() {
        assert_eq!(relaxed_ordering("auto", true), Ok(true));
        assert_eq!(relaxed_ordering("auto", false), Ok(false));
        assert_eq!(relaxed_ordering("0", true), Ok(false));
        assert_eq!(relaxed_ordering("1", true), Ok(true));
        assert!(relaxed_ordering("1", false)
            .unwrap_err()
            .contains("ibv_reg_mr_iova2"));
        assert!(relaxed_ordering("maybe", true).is_err());
    }

    #[test]
    fn gdr_flush_is_on_before_hopper_where_device_memory_is_registered() {
        let (d, s) = (GdrPath::DmaBuf, GdrPath::Staging);
        assert!(gdr_flush("auto", d, Some((8, 0))).unwrap());
        assert!(gdr_flush("", GdrPath::PeerMem, Some((7, 5))).unwrap());
        assert!(!gdr_flush("auto", d, Some((9, 0))).unwrap());
        assert!(!gdr_flush("auto", d, Some((10, 0))).unwrap());
        // Unknown generation: flushed (a flush costs a read; a missing one corrupts data).
        assert!(gdr_flush("auto", d, None).unwrap());
        assert!(!gdr_flush("auto", s, Some((8, 0))).unwrap());
        assert!(gdr_flush("1", d, Some((9, 0))).unwrap());
        assert!(!gdr_flush("0", d, Some((8, 0))).unwrap());
        let e = gdr_flush("sometimes", d, None).unwrap_err();
        assert!(e.contains("GPUMPI_IB_GDR_FLUSH=sometimes"), "{e}");
    }

    #[test]
    fn gdr_path_prefers_dmabuf_then_peermem_then_staging() {
        let f = |a, b, c| GdrFacts {
            ib_dmabuf: a,
            cuda_dmabuf: b,
            peermem: c,
        };
        assert_eq!(
            gdr_path("auto", f(true, true, true)).unwrap().0,
            GdrPath::DmaBuf
        );
        let (p, why) = gdr_path("auto", f(false, true, true)).unwrap();
        assert_eq!(p, GdrPath::PeerMem);
        assert!(why.contains("ibv_reg_dmabuf_mr"), "{why}");
        let (p, why) = gdr_path("auto", f(true, false, false)).unwrap();
        assert_eq!(p, GdrPath::Staging);
        assert!(
            why.contains("CUDA") && why.contains("nvidia-peermem"),
            "{why}"
        );
        assert_eq!(
            gdr_path("0", f(true, true, true)).unwrap().0,
            GdrPath::Staging
        );
        assert_eq!(
            gdr_path("peermem", f(true, true, true)).unwrap().0,
            GdrPath::PeerMem
        );
        assert!(gdr_path("peermem", f(true, true, false))
            .unwrap_err()
            .contains("modprobe"));
        assert!(gdr_path("dmabuf", f(false, true, true))
            .unwrap_err()
            .contains("rdma-core 34"));
        assert!(gdr_path("sometimes", f(true, true, true)).is_err());
    }
}
