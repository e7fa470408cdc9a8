//! Node identity: which ranks share a node, for the choice between intra-node paths (shared
//! memory, CUDA IPC) and the network.
//!
//! A rank's node is named by `GPUMPI_NODE_ID` when set (so that several "nodes" can be
//! emulated on one host, as `NCCL_HOSTID` does), else by the launcher's name for it
//! ([`Bootstrap::node_name`]: PMIx's `pmix.hname`, PMI-1's `PMI_HOSTNAME`), else by the host
//! name. The launcher's name counts before the host name because the launcher decides what a
//! node is: hosts that share a host name but are started as different nodes (network
//! namespaces with their own addresses, containers) are different nodes to it and to us.
//! Ranks exchange their names through the bootstrap ([`exchange`]); [`NodeMap`] numbers the
//! nodes in the order of their lowest rank. `MPI_Init` records the job's map ([`set_job`]);
//! the runtime then picks the shared-memory ring or the network per peer, and a communicator
//! whose ranks are not all on one node declines the intra-node collective paths
//! ([`one_node`]).

use super::Bootstrap;
use crate::mpi::error::MpiResult;

/// This process's node name: `GPUMPI_NODE_ID`, else the launcher's name recorded by
/// [`choose`] at `MPI_Init`, else the host name.
pub fn node_name() -> String {
    pick(
        crate::config::get("GPUMPI_NODE_ID").as_deref(),
        LAUNCHER_NAME.get().cloned().flatten().as_deref(),
        host_name,
    )
}

/// The first of `node_id`, `launcher` and `host()` that is not blank, trimmed.
fn pick(node_id: Option<&str>, launcher: Option<&str>, host: impl FnOnce() -> String) -> String {
    [node_id, launcher]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|s| !s.is_empty())
        .map(str::to_string)
        .unwrap_or_else(host)
}

/// The launcher's name for this process's node, recorded once by [`choose`].
static LAUNCHER_NAME: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Records the launcher's name for this node (`MPI_Init`, from [`Bootstrap::node_name`];
/// blank names count as none) and returns this process's node name ([`node_name`]).
pub fn choose(launcher: Option<String>) -> String {
    let name = launcher
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    let _ = LAUNCHER_NAME.set(name);
    node_name()
}

/// This machine's host name (`localhost` when it cannot be read).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Names this machine (its kernel's boot id, else its host name): processes that see the same
/// name share CPUs, whatever nodes they are told they are on (`GPUMPI_NODE_ID`, namespaces).
pub fn machine_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty() && !s.contains(char::is_whitespace))
        .unwrap_or_else(|| host_name().replace(char::is_whitespace, "_"))
}

/// Nodes of a job: the node index of each rank and the ranks of each node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeMap {
    /// Node index of each rank.
    pub node_of: Vec<usize>,
    /// The ranks of each node, ascending.
    pub ranks: Vec<Vec<usize>>,
    /// Name of each node.
    pub names: Vec<String>,
}

impl NodeMap {
    /// From the node name of each rank (index = rank).
    pub fn from_names(names: &[String]) -> NodeMap {
        let mut m = NodeMap {
            node_of: Vec::with_capacity(names.len()),
            ranks: Vec::new(),
            names: Vec::new(),
        };
        for (r, n) in names.iter().enumerate() {
            let i = match m.names.iter().position(|x| x == n) {
                Some(i) => i,
                None => {
                    m.names.push(n.clone());
                    m.ranks.push(Vec::new());
                    m.names.len() - 1
                }
            };
            m.node_of.push(i);
            m.ranks[i].push(r);
        }
        m
    }

    pub fn nodes(&self) -> usize {
        self.names.len()
    }
}

/// The job's map, recorded once by `MPI_Init` (MPI is initialized at most once per process).
static JOB: std::sync::OnceLock<NodeMap> = std::sync::OnceLock::new();

/// Records the job's node map (the first call wins).
pub fn set_job(m: NodeMap) {
    let _ = JOB.set(m);
}

/// Whether the world ranks `ranks` are all on one node (true before `MPI_Init` recorded a
/// map, and for a job on one node).
pub fn one_node(ranks: &[usize]) -> bool {
    match JOB.get() {
        Some(m) if m.nodes() > 1 => {
            let first = ranks.first().map(|&r| m.node_of[r]);
            ranks.iter().all(|&r| Some(m.node_of[r]) == first)
        }
        _ => true,
    }
}

/// The node index of each of the world ranks `ranks`, where the job spans nodes (`None` for a
/// job on one node, or before `MPI_Init` recorded a map).
pub fn labels(ranks: &[usize]) -> Option<Vec<usize>> {
    match JOB.get() {
        Some(m) if m.nodes() > 1 => Some(ranks.iter().map(|&r| m.node_of[r]).collect()),
        _ => None,
    }
}

/// The world ranks on world rank `rank`'s node, ascending, from the job's map (`None` before
/// `MPI_Init` recorded it).
pub fn ranks_with(rank: usize) -> Option<Vec<usize>> {
    JOB.get().map(|m| m.ranks[m.node_of[rank]].clone())
}

/// Publishes this rank's node name and reads every rank's (one fence, collective over the job).
pub fn exchange(bs: &dyn Bootstrap, name: &str) -> MpiResult<NodeMap> {
    publish(bs, name);
    bs.fence()?;
    read(bs)
}

const KEY: &str = "gpumpi-node";

/// Puts this rank's node name into the bootstrap (read by [`read`] after the next fence).
pub fn publish(bs: &dyn Bootstrap, name: &str) {
    bs.put(KEY, name.as_bytes());
}

/// Every rank's node name, published with [`publish`] before a fence.
pub fn read(bs: &dyn Bootstrap) -> MpiResult<NodeMap> {
    let names = (0..bs.size())
        .map(|r| {
            bs.get(r, KEY)
                .map(|v| String::from_utf8_lossy(&v).into_owned())
        })
        .collect::<MpiResult<Vec<_>>>()?;
    Ok(NodeMap::from_names(&names))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_numbers_nodes_by_lowest_rank() {
        let n: Vec<String> = ["b", "a", "b", "c", "a"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let m = NodeMap::from_names(&n);
        assert_eq!(m.node_of, [0, 1, 0, 2, 1]);
        assert_eq!(m.ranks, [vec![0, 2], vec![1, 4], vec![3]]);
        assert_eq!(m.names, ["b", "a", "c"]);
        assert_eq!(m.nodes(), 3);
        assert_eq!(NodeMap::from_names(&[]).nodes(), 0);
    }

    #[test]
    fn exchange_over_the_fake_bootstrap() {
        let job = crate::bootstrap::fake::job(4);
        let maps: Vec<NodeMap> = std::thread::scope(|s| {
            let hs: Vec<_> = job
                .iter()
                .map(|b| s.spawn(move || exchange(b, &format!("node{}", b.rank() / 2)).unwrap()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for m in &maps {
            assert_eq!(m.node_of, [0, 0, 1, 1]);
            assert_eq!(m.names, ["node0", "node1"]);
        }
    }

    #[test]
    fn node_id_then_launcher_then_host() {
        let host = || "h".to_string();
        assert_eq!(pick(Some("e1"), Some("198.18.0.2"), host), "e1");
        assert_eq!(pick(None, Some(" 198.18.0.2 "), host), "198.18.0.2");
        assert_eq!(pick(Some("  "), Some("n1"), host), "n1");
        assert_eq!(pick(None, None, host), "h");
        assert_eq!(pick(Some(""), Some(""), host), "h");
    }

    #[test]
    fn host_name_is_the_default() {
        if std::env::var_os("GPUMPI_NODE_ID").is_none() {
            let n = node_name();
            assert!(!n.is_empty() && !n.contains('\n'));
        }
    }
}
