//! The block lengths of an alltoallv/alltoallw, told inside each node: every rank sends each
//! other rank of its node one message, its row (the lengths of its blocks for every rank, then
//! of its blocks from every rank), so that a rank carrying its node's blocks between nodes
//! (`rails`) knows the length of every block it packs, forwards or unpacks: every block from or
//! to a rank of its node. One message per ordered pair of ranks of a node, over shared memory;
//! nothing crosses the network.
//!
//! The same exchange gives a node's leader the counts of its members for any vector collective
//! whose counts only the members know.

use crate::coll::hier::Nodes;
use crate::coll::schedule::{Builder, Region};
use crate::coll::Schedule;

/// Bytes of one rank's row over `n` ranks: `2 n` lengths of 8 bytes.
pub fn row_bytes(n: usize) -> usize {
    2 * n * 8
}

/// The row of a rank whose block for rank `d` is `send(d)` bytes and whose block from rank `s`
/// is `recv(s)` bytes.
pub fn row(n: usize, send: impl Fn(usize) -> usize, recv: impl Fn(usize) -> usize) -> Vec<u8> {
    (0..n)
        .map(&send)
        .chain((0..n).map(&recv))
        .flat_map(|l| (l as u64).to_le_bytes())
        .collect()
}

/// The schedule of `rank`: its row in `Send` (from offset 0) to every other rank of its node,
/// the row of the `i`-th rank of its node into `Recv` at `i * row_bytes(n)` (its own copied).
pub fn build(nodes: &Nodes, rank: usize) -> Schedule {
    let n = nodes.of.len();
    let w = row_bytes(n);
    let members = &nodes.ranks[nodes.of[rank]];
    let mut b = Builder::new();
    for (i, &t) in members.iter().enumerate() {
        if t == rank {
            b.copy(Region::send(0, w), Region::recv(i * w, w));
        } else {
            b.send(t, Region::send(0, w));
            b.recv(t, Region::recv(i * w, w));
        }
    }
    b.finish()
}

/// The lengths every rank of a node knows after [`build`] ran: of every block from or to a
/// rank of the node.
pub struct NodeLens<'a> {
    nodes: &'a Nodes,
    g: usize,
    rows: &'a [u8],
}

impl<'a> NodeLens<'a> {
    /// `rows`: the `Recv` buffer of [`build`] at a rank of node `g`.
    pub fn new(nodes: &'a Nodes, g: usize, rows: &'a [u8]) -> NodeLens<'a> {
        NodeLens { nodes, g, rows }
    }

    fn at(&self, member: usize, k: usize) -> usize {
        let n = self.nodes.of.len();
        let i = self.nodes.ranks[self.g]
            .iter()
            .position(|&x| x == member)
            .expect("a rank of the node");
        let o = i * row_bytes(n) + k * 8;
        u64::from_le_bytes(self.rows[o..o + 8].try_into().expect("8 bytes")) as usize
    }

    /// The length of the block from `s` to `d`, where `s` or `d` is on the node (0 otherwise:
    /// no rank of the node handles it).
    pub fn len(&self, s: usize, d: usize) -> usize {
        let n = self.nodes.of.len();
        if self.nodes.of[s] == self.g {
            self.at(s, d)
        } else if self.nodes.of[d] == self.g {
            self.at(d, n + s)
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::sim::{simulate, RankBufs};

    #[test]
    fn every_rank_learns_the_lengths_of_its_nodes_blocks() {
        for node_of in [
            vec![0, 0, 1, 1],
            vec![0, 1, 0, 1, 2, 2, 0],
            vec![0, 0, 0, 1],
            vec![0, 1],
        ] {
            let nodes = Nodes::new(&node_of);
            let n = node_of.len();
            let len = |s: usize, d: usize| (s * 7 + d * 3) % 5 * 1000 + s;
            let scheds: Vec<Schedule> = (0..n).map(|r| build(&nodes, r)).collect();
            let mut bufs: Vec<RankBufs> = (0..n)
                .map(|r| RankBufs {
                    send: row(n, |d| len(r, d), |s| len(s, r)),
                    recv: vec![0; nodes.ranks[nodes.of[r]].len() * row_bytes(n)],
                })
                .collect();
            simulate(&scheds, &mut bufs, 1, &|_, _| unreachable!("no reduction"));
            for (r, b) in bufs.iter().enumerate() {
                let g = nodes.of[r];
                let l = NodeLens::new(&nodes, g, &b.recv);
                for s in 0..n {
                    for d in 0..n {
                        let want = match nodes.of[s] == g || nodes.of[d] == g {
                            true => len(s, d),
                            false => 0,
                        };
                        assert_eq!(l.len(s, d), want, "{node_of:?} rank {r}: {s} -> {d}");
                    }
                }
                // Nothing leaves the node.
                for st in &scheds[r].steps {
                    if let crate::coll::schedule::Step::Send { peer, .. } = *st {
                        assert_eq!(nodes.of[peer], g);
                    }
                }
            }
        }
    }
}
