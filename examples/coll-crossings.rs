//! Messages and bytes that cross node boundaries in one collective call, flat schedule
//! (`coll::build`, as the tuning table selects it) against hierarchical (`coll::hier`), on
//! several node maps: a count that depends on no timing, for benches/NOTES.md.
//!
//!   cargo run --release --example coll-crossings -- [BYTES]
//!
//! BYTES (default 1024) is each rank's block (gather, scatter, allgather(v),
//! reduce_scatter_block) or the vector (bcast, reduce, allreduce). Rooted collectives are
//! summed over every root and divided by the rank count (the mean over roots).

use mpi_abi::coll::hier::{self, Nodes};
use mpi_abi::coll::{self, Block, CollArgs, CollKind, Schedule, Step};

/// (messages, bytes) sent across nodes by all ranks' schedules.
fn crossings(scheds: &[Schedule], nodes: &Nodes) -> (usize, usize) {
    let mut c = (0, 0);
    for (r, s) in scheds.iter().enumerate() {
        for st in &s.steps {
            if let Step::Send { peer, src } = *st {
                if nodes.of[peer] != nodes.of[r] {
                    c.0 += 1;
                    c.1 += src.len;
                }
            }
        }
    }
    c
}

fn main() {
    let bytes: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("BYTES: a number"))
        .unwrap_or(1024);
    let packed = |sizes: &[usize]| -> Vec<usize> {
        sizes
            .iter()
            .enumerate()
            .flat_map(|(i, &k)| std::iter::repeat_n(i, k))
            .collect()
    };
    let maps: Vec<(&str, Vec<usize>)> = vec![
        ("2x2", packed(&[2, 2])),
        ("3x1", packed(&[1, 1, 1])),
        ("3+2", packed(&[3, 2])),
        ("2x3 rr", (0..6).map(|r| r % 2).collect()),
        ("4x4", packed(&[4, 4, 4, 4])),
        ("4x4 rr", (0..16).map(|r| r % 4).collect()),
        ("2x8", packed(&[8, 8])),
    ];
    let kinds = [
        CollKind::Gather,
        CollKind::Scatter,
        CollKind::Allgatherv,
        CollKind::ReduceScatterBlock,
        CollKind::ReduceScatter,
    ];
    println!("block/vector {bytes} bytes; cells: inter-node messages / KiB per call, flat -> hierarchical");
    print!("| map |");
    for k in kinds {
        print!(" {} |", k.name());
    }
    println!();
    print!("|---|");
    for _ in kinds {
        print!("---|");
    }
    println!();
    for (name, labels) in &maps {
        let n = labels.len();
        let nodes = Nodes::new(labels);
        let blocks: Vec<Block> = (0..n).map(|r| Block::new(r * bytes, bytes)).collect();
        print!("| {name} |");
        for kind in kinds {
            let reduction = kind.is_reduction();
            let roots = match kind {
                CollKind::Gather | CollKind::Scatter => n,
                _ => 1,
            };
            let (mut flat, mut hiers) = ((0, 0), (0, 0));
            for root in 0..roots {
                let args = |r: usize| CollArgs {
                    root,
                    recv_blocks: &blocks,
                    elem_size: if reduction { 4 } else { 1 },
                    bytes,
                    ..CollArgs::new(r, n, bytes)
                };
                let f: Vec<Schedule> = (0..n)
                    .map(|r| coll::build(kind, &args(r)).unwrap().1)
                    .collect();
                let h: Vec<Schedule> = (0..n)
                    .map(|r| hier::build(kind, &args(r), &nodes).unwrap())
                    .collect();
                let (a, b) = (crossings(&f, &nodes), crossings(&h, &nodes));
                flat = (flat.0 + a.0, flat.1 + a.1);
                hiers = (hiers.0 + b.0, hiers.1 + b.1);
            }
            let kib = |x: usize| x as f64 / roots as f64 / 1024.0;
            print!(
                " {:.1}/{:.0} -> {:.1}/{:.0} |",
                flat.0 as f64 / roots as f64,
                kib(flat.1),
                hiers.0 as f64 / roots as f64,
                kib(hiers.1)
            );
        }
        println!();
    }
}
