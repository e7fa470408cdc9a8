//! The TCP network backend between two namespace "nodes" (scripts/netns-nodes.sh): 2 nodes x 1
//! rail, node i at 198.18.0.(i+1). This test binary re-runs itself inside each namespace
//! (`ip netns exec`) in a child role chosen by NETNS_TEST_ROLE (a test-harness variable, not a
//! library setting); the two children exchange the connection handle through a file, move
//! messages of several sizes and check every byte. Afterwards nothing may be left: no
//! namespace, bridge or veth of the set. Where namespaces are not permitted the test records a
//! skip with the script's reason.

#[path = "support/netns.rs"]
mod netns;
#[path = "support/skip.rs"]
mod skip;

use mpi_abi::transport::net::ifname::Family;
use mpi_abi::transport::net::tcp::{Stripe, TcpConfig, TcpNet};
use mpi_abi::transport::net::{Handle, MemKind, Net, RecvBuf, HANDLE_BYTES};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const ROLE: &str = "NETNS_TEST_ROLE";
const DIR: &str = "NETNS_TEST_DIR";
const SECRET: &[u8] = b"netns-test";
const SIZES: &[usize] = &[0, 1, 4096, 65537, 1 << 20, (7 << 20) + 3];

use netns::{nodes, script};

fn pattern(i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (k.wrapping_mul(31) ^ i.wrapping_mul(97)) as u8)
        .collect()
}

fn net() -> TcpNet {
    let cfg = TcpConfig {
        ifname: Some("=rail0".into()),
        family: Family::V4,
        threads: 2,
        socks_per_thread: 2,
        connect_timeout: Duration::from_secs(5),
        accept_timeout: Duration::from_secs(20),
        stripe: Stripe::Auto,
    };
    TcpNet::new(cfg, SECRET).unwrap()
}

/// Child role "recv" (node 1): listen, publish the handle, receive and check every message.
fn child_recv(dir: &Path) {
    let net = net();
    assert_eq!(net.devices()[0].addr, "198.18.0.2");
    let (h, mut l) = net.listen(0).unwrap();
    std::fs::write(dir.join("handle.tmp"), h.0).unwrap();
    std::fs::rename(dir.join("handle.tmp"), dir.join("handle")).unwrap();
    let end = Instant::now() + Duration::from_secs(60);
    let mut r = loop {
        if let Some(r) = l.accept().unwrap() {
            break r;
        }
        assert!(Instant::now() < end, "no connection");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert!(r.peer().starts_with("198.18.0.1:"), "peer {}", r.peer());
    for (i, &n) in SIZES.iter().enumerate() {
        let mut b = vec![0u8; n + 1];
        let mr = r.reg_mr(b.as_ptr(), b.len(), MemKind::Host).unwrap();
        // SAFETY: b outlives the request, completed below before b is read.
        let q = unsafe {
            r.irecv(&[RecvBuf {
                ptr: b.as_mut_ptr(),
                size: n + 1,
                tag: i as i32,
                mr,
            }])
        }
        .unwrap()
        .unwrap();
        let mut sz = [0];
        while !r.test(q, &mut sz).unwrap() {
            assert!(Instant::now() < end, "message {i} hangs");
        }
        assert_eq!(sz[0], n);
        assert!(b[..n] == pattern(i, n)[..], "data of message {i}");
    }
    println!("recv: {} messages checked", SIZES.len());
}

/// Child role "send" (node 0): read the handle, connect, send.
fn child_send(dir: &Path) {
    let net = net();
    assert_eq!(net.devices()[0].addr, "198.18.0.1");
    let end = Instant::now() + Duration::from_secs(60);
    let hp = dir.join("handle");
    while !hp.exists() {
        assert!(Instant::now() < end, "no handle");
        std::thread::sleep(Duration::from_millis(5));
    }
    let h = Handle(std::fs::read(hp).unwrap().try_into().expect("handle size"));
    let mut c = net.connect(0, &h).unwrap();
    let mut s = loop {
        if let Some(s) = c.poll().unwrap() {
            break s;
        }
        assert!(Instant::now() < end, "set-up hangs");
        std::thread::sleep(Duration::from_millis(1));
    };
    for (i, &n) in SIZES.iter().enumerate() {
        let b = pattern(i, n);
        let mr = s.reg_mr(b.as_ptr(), n, MemKind::Host).unwrap();
        // SAFETY: b outlives the request, completed below.
        let q = unsafe { s.isend(b.as_ptr(), n, i as i32, mr) }
            .unwrap()
            .unwrap();
        while s.test(q).unwrap().is_none() {
            assert!(Instant::now() < end, "send {i} hangs");
        }
    }
    println!("send: {} messages sent", SIZES.len());
}

#[test]
fn tcp_between_two_namespace_nodes() {
    const _: () = assert!(HANDLE_BYTES == 128);
    if let Ok(role) = std::env::var(ROLE) {
        let dir = PathBuf::from(std::env::var(DIR).unwrap());
        match role.as_str() {
            "recv" => child_recv(&dir),
            "send" => child_send(&dir),
            r => panic!("unknown role {r}"),
        }
        return;
    }
    let test = "tcp_between_two_namespace_nodes";
    let prefix = format!("gmt{}", std::process::id());
    let Some(guard) = netns::up(&prefix, 2, 1, test) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("{prefix}-handles"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    let spawn = |node: &str, role: &str| {
        Command::new("bash")
            .arg(script())
            .args(["-p", &prefix, "exec", node])
            .arg(&exe)
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .env(DIR, &dir)
            .spawn()
            .unwrap()
    };
    let mut rx = spawn("1", "recv");
    let mut tx = spawn("0", "send");
    let (sr, ss) = (rx.wait().unwrap(), tx.wait().unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        sr.success() && ss.success(),
        "children: recv {sr}, send {ss}"
    );

    drop(guard);
    let left = String::from_utf8_lossy(&nodes(&prefix, &["list"]).stdout).to_string();
    assert!(left.trim().is_empty(), "namespaces left: {left}");
    let all = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&all.stdout).contains(&prefix));
    let links = Command::new("ip").args(["-o", "link"]).output().unwrap();
    let links = String::from_utf8_lossy(&links.stdout);
    assert!(
        !links
            .lines()
            .any(|l| l.contains("rail0") || l.contains(&prefix) || l.contains(" p0r0")),
        "interfaces left in the root namespace: {links}"
    );
}
