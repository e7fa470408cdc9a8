//! Rails: the network device (NIC) each rank sends through.
//!
//! Rail-optimized clusters wire NIC `k` of every node to leaf switch `k`; traffic between
//! different rails crosses the spine. A rank's rail is the index of its NIC among the job's
//! network devices (`GPUMPI_NET_IFNAME`'s selection, in the backend's order), decided in this
//! order ([`decide`]), first match wins:
//!
//! 1. `GPUMPI_RAIL=<r>` in the rank's environment;
//! 2. the topology file `GPUMPI_TOPO_FILE` ([`TopoFile`]): a line for this node (or for every
//!    node) and this local rank;
//! 3. the PCI topology: the NIC that shares the deepest PCI bridge (a PCIe switch, not only the
//!    root complex) with the rank's GPU, read from sysfs ([`pci_rail`]);
//! 4. local rank modulo the number of rails (NCCL's round-robin when nothing is known).
//!
//! A rail at or beyond the number of devices is kept as the rank's rail (routing and counters
//! use it), and the rank sends through device `rail mod devices`: one loopback device can
//! carry emulated rails, and a file can describe a machine with more NICs than a test has.
//!
//! Topology file format (one statement per line, `#` starts a comment):
//!
//! ```text
//! rails 4                 # optional: how many rails the file assumes (checked, not used)
//! local 0 rail 0          # local rank 0 of every node is on rail 0
//! local 1 rail 0
//! node gpu-b local 1 rail 3   # overrides the line above on node "gpu-b" only
//! ```
//!
//! `node NAME` is the rank's node name (`GPUMPI_NODE_ID`, else the host name). A local rank with
//! no line falls through to the PCI topology and then to round-robin.

use std::path::{Path, PathBuf};

/// How a rank's rail was decided (shown by `GPUMPI_DEBUG` and `gpumpi-info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `GPUMPI_RAIL`.
    Env,
    /// `GPUMPI_TOPO_FILE`.
    File,
    /// The NIC under the same PCIe switch as the GPU (sysfs).
    Pci,
    /// Local rank modulo the number of rails.
    RoundRobin,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Env => "GPUMPI_RAIL",
            Source::File => "topology file",
            Source::Pci => "PCI topology",
            Source::RoundRobin => "local rank round-robin",
        }
    }
}

/// A parsed topology file. See the module documentation for the format.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopoFile {
    /// `rails N`, when given.
    pub rails: Option<usize>,
    /// `(node or None for every node, local rank, rail)`, in file order.
    pub entries: Vec<(Option<String>, usize, usize)>,
}

impl TopoFile {
    /// Parse the text of a topology file; the error names the line and what is wrong.
    pub fn parse(text: &str) -> Result<TopoFile, String> {
        let mut t = TopoFile::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = |what: &str| format!("line {}: {what}: {line:?}", i + 1);
            let w: Vec<&str> = line.split_whitespace().collect();
            let num = |s: &str| s.parse::<usize>().map_err(|_| bad("not a number"));
            match w.as_slice() {
                ["rails", n] => {
                    let n = num(n)?;
                    if n == 0 {
                        return Err(bad("rails must be at least 1"));
                    }
                    t.rails = Some(n);
                }
                ["local", l, "rail", r] => t.entries.push((None, num(l)?, num(r)?)),
                ["node", name, "local", l, "rail", r] => {
                    t.entries.push((Some(name.to_string()), num(l)?, num(r)?))
                }
                _ => {
                    return Err(bad(
                        "expected `rails N`, `local L rail R` or `node NAME local L rail R`",
                    ))
                }
            }
        }
        if let Some(n) = t.rails {
            if let Some(e) = t.entries.iter().find(|e| e.2 >= n) {
                return Err(format!("rail {} is not below `rails {n}`", e.2));
            }
        }
        Ok(t)
    }

    /// The rail of local rank `local` on node `node`: a line naming the node wins over a line
    /// for every node.
    pub fn rail(&self, node: &str, local: usize) -> Option<usize> {
        let named = self
            .entries
            .iter()
            .find(|e| e.0.as_deref() == Some(node) && e.1 == local);
        let any = || self.entries.iter().find(|e| e.0.is_none() && e.1 == local);
        named.or_else(any).map(|e| e.2)
    }
}

/// The PCI path of a device: the chain of bus ids from the root complex down to it, read from
/// the canonical sysfs path (`/sys/devices/pci0000:00/0000:00:01.0/0000:02:00.0` gives
/// `["pci0000:00", "0000:00:01.0", "0000:02:00.0"]`).
pub fn pci_path(canonical: &Path) -> Vec<String> {
    let s = canonical.to_string_lossy();
    let at = match s.find("/pci") {
        Some(i) => i + 1,
        None => return Vec::new(),
    };
    s[at..]
        .split('/')
        .take_while(|c| c.starts_with("pci") || is_bdf(c))
        .map(str::to_string)
        .collect()
}

/// `dddd:bb:dd.f`.
fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.'
}

/// Among `nics` (PCI paths), the one nearest to `gpu`: the deepest common ancestor, which must
/// be below the root complex (a shared PCIe switch or bridge); `None` when no NIC shares more
/// than the root complex with the GPU. A tie goes to the lower index.
pub fn nearest(gpu: &[String], nics: &[Vec<String>]) -> Option<usize> {
    let common = |n: &Vec<String>| gpu.iter().zip(n).take_while(|(a, b)| a == b).count();
    let mut best: Option<(usize, usize)> = None;
    for (i, n) in nics.iter().enumerate() {
        let c = common(n);
        // Two elements: the root complex and one port below it, the least a PCIe switch needs.
        if c >= 2 && best.is_none_or(|(_, b)| c > b) {
            best = Some((i, c));
        }
    }
    best.map(|b| b.0)
}

/// Canonical sysfs path of a network interface's PCI device (`<root>/class/net/<if>/device`),
/// or of an RDMA device (`<root>/class/infiniband/<dev>/device`); `None` for a virtual one.
pub fn nic_device(root: &Path, name: &str) -> Option<PathBuf> {
    ["class/net", "class/infiniband"]
        .iter()
        .find_map(|c| std::fs::canonicalize(root.join(c).join(name).join("device")).ok())
}

/// Canonical sysfs path of the PCI device with bus id `bdf` (`<root>/bus/pci/devices/<bdf>`).
pub fn pci_device(root: &Path, bdf: &str) -> Option<PathBuf> {
    std::fs::canonicalize(root.join("bus/pci/devices").join(bdf.to_ascii_lowercase())).ok()
}

/// The rail of the GPU with PCI bus id `gpu_bdf` among the network devices named `nics`
/// (in rail order), read from the sysfs tree at `root` (`/sys` on a real machine).
pub fn pci_rail(root: &Path, gpu_bdf: &str, nics: &[String]) -> Option<usize> {
    let gpu = pci_path(&pci_device(root, gpu_bdf)?);
    let paths: Vec<Vec<String>> = nics
        .iter()
        .map(|n| {
            nic_device(root, n)
                .map(|p| pci_path(&p))
                .unwrap_or_default()
        })
        .collect();
    nearest(&gpu, &paths)
}

/// What a rank knows when its rail is decided.
#[derive(Clone, Debug, Default)]
pub struct Inputs<'a> {
    /// `GPUMPI_RAIL`, when set.
    pub env: Option<usize>,
    /// The topology file, parsed.
    pub file: Option<&'a TopoFile>,
    /// This rank's node name and local rank.
    pub node: &'a str,
    pub local: usize,
    /// The rail the PCI topology gives, when a GPU and the NICs were found in sysfs.
    pub pci: Option<usize>,
    /// Number of rails (network devices); at least 1.
    pub rails: usize,
}

/// This rank's rail and how it was decided: `GPUMPI_RAIL`, the topology file, the PCI topology,
/// round-robin over the rails, in that order.
pub fn decide(i: &Inputs) -> (usize, Source) {
    let n = i.rails.max(1);
    if let Some(r) = i.env {
        return (r, Source::Env);
    }
    if let Some(r) = i.file.and_then(|f| f.rail(i.node, i.local)) {
        return (r, Source::File);
    }
    if let Some(r) = i.pci {
        return (r, Source::Pci);
    }
    (i.local % n, Source::RoundRobin)
}

/// This rank's rail from its environment (`GPUMPI_RAIL`, `GPUMPI_TOPO_FILE`), the PCI topology
/// under `/sys` when the GPU's bus id is known, else round-robin; `nics` are the network
/// devices' names in rail order. Errors name the variable or file: a `GPUMPI_RAIL` that is not a
/// number (from the configuration snapshot), a topology file that cannot be read or parsed.
pub fn from_config(
    node: &str,
    local: usize,
    nics: &[String],
    gpu_bdf: Option<&str>,
) -> Result<(usize, Source), String> {
    let cfg = &crate::config::snapshot().net;
    let env = cfg.rail.clone()?;
    let file = match &cfg.topo_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("GPUMPI_TOPO_FILE={path}: {e}"))?;
            Some(TopoFile::parse(&text).map_err(|e| format!("GPUMPI_TOPO_FILE={path}: {e}"))?)
        }
        None => None,
    };
    let pci = gpu_bdf.and_then(|b| pci_rail(Path::new("/sys"), b, nics));
    Ok(decide(&Inputs {
        env,
        file: file.as_ref(),
        node,
        local,
        pci,
        rails: nics.len(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_file_parses_and_node_lines_win() {
        let t = TopoFile::parse(
            "# two rails\nrails 2\nlocal 0 rail 0\nlocal 1 rail 1 # gpu1\n\nnode b local 1 rail 0\n",
        )
        .unwrap();
        assert_eq!(t.rails, Some(2));
        assert_eq!(t.rail("a", 0), Some(0));
        assert_eq!(t.rail("a", 1), Some(1));
        assert_eq!(t.rail("b", 1), Some(0));
        assert_eq!(t.rail("b", 0), Some(0));
        assert_eq!(t.rail("a", 2), None);
    }

    #[test]
    fn topology_file_errors_name_the_line() {
        let e = TopoFile::parse("local 0 rail 0\nlocal x rail 1\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("not a number"), "{e}");
        let e = TopoFile::parse("gpu 0 nic 1").unwrap_err();
        assert!(e.contains("line 1") && e.contains("expected"), "{e}");
        let e = TopoFile::parse("rails 2\nlocal 0 rail 2").unwrap_err();
        assert!(e.contains("rail 2 is not below"), "{e}");
        assert!(TopoFile::parse("rails 0").is_err());
    }

    #[test]
    fn decision_order_env_file_pci_round_robin() {
        let f = TopoFile::parse("local 1 rail 3").unwrap();
        let base = Inputs {
            node: "n",
            local: 1,
            rails: 4,
            ..Default::default()
        };
        assert_eq!(decide(&base), (1, Source::RoundRobin));
        let pci = Inputs {
            pci: Some(2),
            ..base.clone()
        };
        assert_eq!(decide(&pci), (2, Source::Pci));
        let file = Inputs {
            file: Some(&f),
            ..pci.clone()
        };
        assert_eq!(decide(&file), (3, Source::File));
        let env = Inputs {
            env: Some(6),
            ..file.clone()
        };
        // Beyond the devices: kept (the device is 6 mod 4).
        assert_eq!(decide(&env), (6, Source::Env));
        let one = Inputs {
            local: 5,
            rails: 0,
            ..base
        };
        assert_eq!(decide(&one), (0, Source::RoundRobin));
    }

    #[test]
    fn nearest_needs_a_shared_switch() {
        let p = |s: &str| pci_path(Path::new(s));
        let gpu = p("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0");
        assert_eq!(gpu.len(), 5);
        let same_root = p("/sys/devices/pci0000:00/0000:00:02.0/0000:05:00.0");
        let same_switch =
            p("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0");
        let other_root = p("/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0");
        assert_eq!(
            nearest(&gpu, &[same_root.clone(), same_switch.clone()]),
            Some(1)
        );
        assert_eq!(nearest(&gpu, &[same_root, other_root.clone()]), None);
        assert_eq!(nearest(&gpu, &[other_root, Vec::new()]), None);
        assert_eq!(
            pci_path(Path::new("/sys/devices/virtual/net/lo")),
            Vec::<String>::new()
        );
    }

    /// A fake sysfs tree: two PCIe switches under one root complex, a GPU and a NIC under each,
    /// the NICs named as network interfaces and one as an RDMA device; a virtual interface.
    #[test]
    fn sysfs_reader_on_a_fake_tree() {
        use std::os::unix::fs::symlink;
        let root = std::env::temp_dir().join(format!("gpumpi-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dev = root.join("devices/pci0000:00");
        let sw = |s: &str| dev.join("0000:00:01.0").join(s);
        let gpu0 = sw("0000:01:00.0/0000:02:00.0/0000:03:00.0");
        let nic0 = sw("0000:01:00.0/0000:02:01.0/0000:04:00.0");
        let gpu1 = sw("0000:11:00.0/0000:12:00.0/0000:13:00.0");
        let nic1 = sw("0000:11:00.0/0000:12:01.0/0000:14:00.0");
        let virt = root.join("devices/virtual/net/veth0");
        for d in [&gpu0, &nic0, &gpu1, &nic1, &virt] {
            std::fs::create_dir_all(d).unwrap();
        }
        let pci = root.join("bus/pci/devices");
        std::fs::create_dir_all(&pci).unwrap();
        symlink(&gpu0, pci.join("0000:03:00.0")).unwrap();
        symlink(&gpu1, pci.join("0000:13:00.0")).unwrap();
        for (class, name, target) in [
            ("class/net/eth0", "device", &nic0),
            ("class/infiniband/mlx5_1", "device", &nic1),
        ] {
            std::fs::create_dir_all(root.join(class)).unwrap();
            symlink(target, root.join(class).join(name)).unwrap();
        }
        std::fs::create_dir_all(root.join("class/net/veth0")).unwrap();
        let nics = [
            "eth0".to_string(),
            "mlx5_1".to_string(),
            "veth0".to_string(),
        ];
        assert_eq!(pci_rail(&root, "0000:03:00.0", &nics), Some(0));
        // Upper case bus ids (as CUDA reports them) are found too.
        assert_eq!(
            pci_rail(&root, "0000:13:00.0".to_uppercase().as_str(), &nics),
            Some(1)
        );
        assert_eq!(pci_rail(&root, "0000:99:00.0", &nics), None);
        assert_eq!(pci_rail(&root, "0000:03:00.0", &nics[2..]), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
