//! `cargo test --release --lib mpi::op::bench -- --ignored --nocapture`
use super::*;
use std::time::Instant;

fn rate(what: &str, bytes: usize, reps: usize, mut f: impl FnMut()) {
    f();
    let t = Instant::now();
    for _ in 0..reps {
        f();
    }
    let s = t.elapsed().as_secs_f64();
    println!("{what}: {:.2} GB/s", (bytes * reps) as f64 / s / 1e9);
}

#[test]
#[ignore]
fn reduce_throughput() {
    let n = 1 << 20;
    let a = vec![1u8; n * 8];
    let mut b = vec![2u8; n * 8 + 1];
    for (name, e) in [
        ("f64", Basic::Double),
        ("f32", Basic::Float),
        ("i32", Basic::Int),
        ("i64", Basic::Long),
    ] {
        for op in [BuiltinOp::Sum, BuiltinOp::Max] {
            rate(&format!("{} {name} aligned", op.name()), n * 8, 50, || {
                reduce(op, Elem::Basic(e), &a, &mut b[..n * 8]).unwrap()
            });
            rate(
                &format!("{} {name} unaligned", op.name()),
                n * 8,
                50,
                || reduce(op, Elem::Basic(e), &a, &mut b[1..]).unwrap(),
            );
        }
    }
}
