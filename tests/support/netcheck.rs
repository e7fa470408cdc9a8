//! The checks both network backends' tests share (`tests/net_tcp.rs`, `tests/net_ib.rs`):
//! connecting a pair of comms from one thread, transfers with many requests in flight checked
//! byte for byte, and grouped receives.
#![allow(dead_code)]

use mpi_abi::transport::net::{MemKind, Net, NetError, RecvBuf, RecvComm, Request, SendComm};
use std::time::{Duration, Instant};

pub fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(120)
}

pub type Pair = (Box<dyn SendComm>, Box<dyn RecvComm>);

pub fn pair2(a: &dyn Net, b: &dyn Net) -> Result<Pair, NetError> {
    let (h, mut l) = b.listen(0)?;
    let mut c = a.connect(0, &h)?;
    let (mut s, mut r) = (None, None);
    let end = deadline();
    while s.is_none() || r.is_none() {
        assert!(Instant::now() < end, "set-up hangs");
        if s.is_none() {
            s = c.poll()?;
        }
        if r.is_none() {
            r = l.accept()?;
        }
    }
    Ok((s.unwrap(), r.unwrap()))
}

pub fn pair(net: &dyn Net) -> (Box<dyn SendComm>, Box<dyn RecvComm>) {
    pair2(net, net).unwrap()
}

pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 8);
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Sends `msgs` with up to `window` requests in flight and checks every byte and size.
pub fn xfer(s: &mut dyn SendComm, r: &mut dyn RecvComm, msgs: &[(i32, usize)], window: usize) {
    let sbufs: Vec<Vec<u8>> = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| pattern(i as u64 + 1, m.1))
        .collect();
    let mut rbufs: Vec<Vec<u8>> = msgs.iter().map(|m| vec![0u8; m.1 + 3]).collect();
    let smr: Vec<_> = sbufs
        .iter()
        .map(|b| s.reg_mr(b.as_ptr(), b.len(), MemKind::Host).unwrap())
        .collect();
    let rmr: Vec<_> = rbufs
        .iter()
        .map(|b| r.reg_mr(b.as_ptr(), b.len(), MemKind::Host).unwrap())
        .collect();
    let (mut si, mut ri) = (0, 0);
    let mut sq: Vec<(usize, Request)> = Vec::new();
    let mut rq: Vec<(usize, Request)> = Vec::new();
    let (mut sdone, mut rdone) = (0, 0);
    let end = deadline();
    while sdone < msgs.len() || rdone < msgs.len() {
        assert!(
            Instant::now() < end,
            "transfer hangs: {sdone} sent, {rdone} received"
        );
        while ri < msgs.len() && rq.len() < window {
            let b = RecvBuf {
                ptr: rbufs[ri].as_mut_ptr(),
                size: rbufs[ri].len(),
                tag: msgs[ri].0,
                mr: rmr[ri],
            };
            // SAFETY: rbufs outlive the loop and are read only after completion.
            match unsafe { r.irecv(&[b]) }.unwrap() {
                Some(q) => rq.push((ri, q)),
                None => break,
            }
            ri += 1;
        }
        while si < msgs.len() && sq.len() < window {
            // SAFETY: sbufs outlive the loop and are not modified.
            match unsafe { s.isend(sbufs[si].as_ptr(), msgs[si].1, msgs[si].0, smr[si]) }.unwrap() {
                Some(q) => sq.push((si, q)),
                None => break,
            }
            si += 1;
        }
        sq.retain(|&(i, q)| match s.test(q).unwrap() {
            Some(n) => {
                assert_eq!(n, msgs[i].1);
                sdone += 1;
                false
            }
            None => true,
        });
        rq.retain(|&(i, q)| {
            let mut sz = [usize::MAX];
            if r.test(q, &mut sz).unwrap() {
                assert_eq!(sz[0], msgs[i].1, "size of message {i}");
                assert!(
                    rbufs[i][..msgs[i].1] == sbufs[i][..],
                    "data of message {i} ({} bytes)",
                    msgs[i].1
                );
                assert_eq!(&rbufs[i][msgs[i].1..], &[0, 0, 0], "bytes past message {i}");
                rdone += 1;
                false
            } else {
                true
            }
        });
    }
    for m in smr {
        s.dereg_mr(m).unwrap();
    }
    for m in rmr {
        r.dereg_mr(m).unwrap();
    }
}

pub fn group(
    s: &mut dyn SendComm,
    r: &mut dyn RecvComm,
    recvs: &[(i32, usize)],
    sends: &[(i32, usize)],
) -> Result<(Vec<usize>, Vec<Vec<u8>>), NetError> {
    let mut rbufs: Vec<Vec<u8>> = recvs.iter().map(|m| vec![0u8; m.1]).collect();
    let bufs: Vec<RecvBuf> = rbufs
        .iter_mut()
        .zip(recvs)
        .map(|(b, m)| {
            let mr = r.reg_mr(b.as_ptr(), b.len(), MemKind::Host).unwrap();
            RecvBuf {
                ptr: b.as_mut_ptr(),
                size: b.len(),
                tag: m.0,
                mr,
            }
        })
        .collect();
    // SAFETY: rbufs outlive the group (completed or failed before returning).
    let rq = unsafe { r.irecv(&bufs) }?.unwrap();
    let sbufs: Vec<Vec<u8>> = sends.iter().map(|m| pattern(m.0 as u64, m.1)).collect();
    let mut sq = Vec::new();
    for (b, m) in sbufs.iter().zip(sends) {
        let mr = s.reg_mr(b.as_ptr(), b.len().max(1), MemKind::Host).unwrap();
        // SAFETY: sbufs outlive the requests.
        sq.push(
            unsafe { s.isend(b.as_ptr(), m.1, m.0, mr) }
                .unwrap()
                .unwrap(),
        );
    }
    let mut sizes = vec![0; recvs.len()];
    let end = deadline();
    loop {
        assert!(Instant::now() < end, "group hangs");
        for q in &sq {
            let _ = s.test(*q);
        }
        if r.test(rq, &mut sizes)? {
            return Ok((sizes, rbufs));
        }
    }
}

/// Grouped receives match sends by tag (equal tags fill in order), the comm goes on working
/// afterwards, and a group too large is refused.
pub fn check_grouped_receives(s: &mut dyn SendComm, r: &mut dyn RecvComm) {
    let recvs = [(10, 1000), (11, 300_000), (12, 64), (13, 2 << 20)];
    let sends = [(12, 50), (10, 1000), (13, (1 << 20) + 1), (11, 0)];
    let (sizes, bufs) = group(s, r, &recvs, &sends).unwrap();
    assert_eq!(sizes, [1000, 0, 50, (1 << 20) + 1]);
    for (tag, n) in sends {
        let i = recvs.iter().position(|m| m.0 == tag).unwrap();
        assert!(bufs[i][..n] == pattern(tag as u64, n)[..], "tag {tag}");
    }
    let (sizes, _) = group(s, r, &[(5, 10), (5, 10)], &[(5, 3), (5, 4)]).unwrap();
    assert_eq!(sizes, [3, 4]);
    xfer(s, r, &[(1, 5), (2, 70_000)], 2);
    let mut b = [0u8; 4];
    let mr = r.reg_mr(b.as_ptr(), 4, MemKind::Host).unwrap();
    let one = RecvBuf {
        ptr: b.as_mut_ptr(),
        size: 4,
        tag: 0,
        mr,
    };
    // SAFETY: refused before any use of the buffer.
    let e = unsafe { r.irecv(&[one; 9]) }.unwrap_err();
    assert!(e.msg.contains("group of 9"), "{e}");
}

/// A message whose tag the posted group lacks fails the receive, naming the tag and the peer.
pub fn check_tag_outside_the_group(s: &mut dyn SendComm, r: &mut dyn RecvComm) {
    let e = group(s, r, &[(1, 8), (2, 8)], &[(3, 8)]).unwrap_err();
    assert!(
        e.msg.contains("tag 3") && e.msg.contains("127.0.0.1"),
        "{e}"
    );
}

/// A message larger than its receive fails it; the comm stays failed (later receives report
/// the same error, no hang).
pub fn check_truncation(s: &mut dyn SendComm, r: &mut dyn RecvComm) {
    let e = group(s, r, &[(4, 100)], &[(4, 200)]).unwrap_err();
    assert!(
        e.msg.contains("truncated") && e.msg.contains("200") && e.msg.contains("100"),
        "{e}"
    );
    let mut b = [0u8; 4];
    if let Ok(mr) = r.reg_mr(b.as_ptr(), 4, MemKind::Host) {
        let one = RecvBuf {
            ptr: b.as_mut_ptr(),
            size: 4,
            tag: 0,
            mr,
        };
        // SAFETY: refused: the comm failed.
        assert!(unsafe { r.irecv(&[one]) }
            .unwrap_err()
            .msg
            .contains("truncated"));
    }
}
