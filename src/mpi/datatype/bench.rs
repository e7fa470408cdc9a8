//! `cargo test --release --lib mpi::datatype::bench -- --ignored --nocapture`
use super::*;
use std::time::Instant;

fn rate(what: &str, bytes: usize, reps: usize, mut f: impl FnMut()) {
    f();
    let t = Instant::now();
    for _ in 0..reps {
        f();
    }
    println!(
        "{what}: {:.2} GB/s",
        (bytes * reps) as f64 / t.elapsed().as_secs_f64() / 1e9
    );
}

#[test]
#[ignore]
fn pack_throughput() {
    let int = Arc::new(TypeDesc::predefined(Basic::Int));
    let db = Arc::new(TypeDesc::predefined(Basic::Double));
    let n = 1 << 20;
    let src = vec![3u8; 32 * n];
    let cases = [
        (
            "vector 1 int stride 2",
            TypeDesc::vector(n as i64, 1, 2, &int).unwrap(),
        ),
        (
            "vector 2 double stride 3",
            TypeDesc::vector(n as i64 / 2, 2, 3, &db).unwrap(),
        ),
        (
            "vector 256 double stride 512",
            TypeDesc::vector(n as i64 / 256, 256, 512, &db).unwrap(),
        ),
        ("contiguous", TypeDesc::contiguous(n as i64, &db).unwrap()),
    ];
    for (name, t) in cases {
        let mut dst = vec![0u8; t.packed_size(1)];
        // SAFETY: src covers 32n bytes, more than any case's extent.
        rate(name, dst.len(), 20, || unsafe {
            t.pack(1, src.as_ptr(), &mut dst);
        });
    }
    // pair type: 1M DOUBLE_INT elements (not contiguous: 12 of 16 bytes)
    let t = TypeDesc::pair(Elem::DOUBLE_INT);
    let mut dst = vec![0u8; t.packed_size(n)];
    // SAFETY: 16n bytes of src.
    rate("DOUBLE_INT x 1M", dst.len(), 20, || unsafe {
        t.pack(n, src.as_ptr(), &mut dst);
    });
}
