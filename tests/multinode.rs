//! Jobs across hosts with our `mpirun` (`--host`, `--hostfile`, a launch agent, node daemons,
//! wire-up over TCP), run with the `gpumpi-bootstrap-test` helper (bootstrap only: wire-up,
//! fences, abort, finalize; MPI data between hosts is the engine's business).
//!
//! Two kinds of "hosts":
//! - emulated ones (no root needed): `tests/support/local-agent` starts a host's daemon on this
//!   machine, with the wire-up on 127.0.0.1; host names decide which node a rank is on;
//! - namespace nodes (`scripts/netns-nodes.sh`, root): mpirun runs in node 0, the agent
//!   `scripts/netns-agent` starts node 1's daemon inside node 1's namespace, and everything
//!   crosses the 198.18.0.0/24 bridge. Where namespaces are not permitted the test records a
//!   skip with the script's reason.
//!
//! Every test checks that no rank and no daemon is left running afterwards.

#[path = "support/netns.rs"]
mod netns;
#[path = "support/reports.rs"]
mod reports;
#[path = "support/skip.rs"]
mod skip;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MPIRUN: &str = env!("CARGO_BIN_EXE_mpirun");
const HELPER: &str = env!("CARGO_BIN_EXE_gpumpi-bootstrap-test");
/// How soon everything must be gone after a failure: teardown waits for nothing (well under a
/// second on an idle machine); the bound leaves room for a loaded one and is far below a hang.
const TEARDOWN: Duration = Duration::from_secs(10);
const LIMIT: Duration = Duration::from_secs(60);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn local_agent() -> String {
    root()
        .join("tests/support/local-agent")
        .display()
        .to_string()
}

/// mpirun with no inherited gpumpi environment, the test agent and the wire-up on loopback.
fn mpirun(args: &[&str]) -> Command {
    let mut c = Command::new(MPIRUN);
    for (k, _) in std::env::vars() {
        if k.starts_with("GPUMPI_") {
            c.env_remove(k);
        }
    }
    c.env("GPUMPI_WIREUP_ADDR", "127.0.0.1")
        .arg("--launch-agent")
        .arg(local_agent())
        .args(args);
    c
}

struct Out {
    code: i32,
    out: String,
    err: String,
    /// From the last helper report line ("rank ...") to mpirun's exit.
    since_report: Duration,
}

/// Runs `c` to its end (failing the test after `LIMIT` instead of hanging).
fn run(mut c: Command) -> Out {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut se = child.stderr.take().unwrap();
    let errt = std::thread::spawn(move || {
        let mut e = String::new();
        std::io::Read::read_to_string(&mut se, &mut e).unwrap();
        e
    });
    let so = child.stdout.take().unwrap();
    let outt = std::thread::spawn(move || reports::read_reports(so));
    let t = Instant::now();
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("mpirun did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let end = Instant::now();
    let (out, last) = outt.join().unwrap();
    Out {
        code: st.code().unwrap_or(-1),
        out,
        err: errt.join().unwrap(),
        since_report: end.saturating_duration_since(last),
    }
}

/// (rank, pid, local) of each helper report line `rank R/N pid P job J local L/LS peers ...`
/// (after a `--tag-output` prefix, if any).
fn reports(out: &str) -> Vec<(usize, i32, String)> {
    let mut v: Vec<(usize, i32, String)> = out
        .lines()
        .map(|l| l.split_once("<stdout>:").map_or(l, |(_, rest)| rest))
        .filter(|l| l.starts_with("rank ") && l.contains(" pid "))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let at = |k: &str| w[w.iter().position(|x| *x == k).unwrap() + 1];
            let rank = w[1].split('/').next().unwrap().parse().unwrap();
            (rank, at("pid").parse().unwrap(), at("local").to_string())
        })
        .collect();
    v.sort();
    v
}

fn alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks for existence. A zombie counts as gone.
    let exists = unsafe { libc::kill(pid, 0) == 0 };
    exists
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|t| t.trim_start().starts_with('Z'))
        })
}

fn ppid(pid: i32) -> i32 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    s.rsplit(')')
        .next()
        .and_then(|t| t.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

fn wait_gone(pids: &[i32], what: &str) {
    let t = Instant::now();
    while pids.iter().any(|&p| alive(p)) && t.elapsed() < TEARDOWN {
        std::thread::sleep(Duration::from_millis(10));
    }
    for &p in pids {
        assert!(!alive(p), "{what} {p} is still alive");
    }
}

/// Processes whose command line contains the daemon argument and `mark` in their environment.
fn daemons_of(marker: &str) -> Vec<i32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
        let has = |hay: &[u8], n: &str| hay.windows(n.len()).any(|w| w == n.as_bytes());
        if has(&cmd, "--gpumpi-daemon") && has(&env, marker) && alive(pid) {
            v.push(pid);
        }
    }
    v
}

/// A marker in mpirun's environment (inherited by the agents and daemons) to find them.
fn marker(test: &str) -> (String, String) {
    (
        "MULTINODE_TEST_MARK".into(),
        format!("{test}-{}", std::process::id()),
    )
}

#[test]
fn two_hosts_wire_up_launch_variables_and_placement() {
    let (mk, mv) = marker("wire");
    let mut c = mpirun(&[
        "--host",
        "localhost:2,nodeb:2",
        "--tag-output",
        HELPER,
        "--stderr",
    ]);
    c.env(&mk, &mv);
    let o = run(c);
    assert_eq!(o.code, 0, "{}{}", o.out, o.err);
    let r = reports(&o.out);
    let locals: Vec<&str> = r.iter().map(|x| x.2.as_str()).collect();
    assert_eq!(locals, ["0/2", "1/2", "0/2", "1/2"], "{}", o.out);
    for l in o.out.lines().filter(|l| l.contains(" pid ")) {
        assert!(l.ends_with("peers v0,v1,v2,v3"), "{l}");
        let rank = l.split(']').next().unwrap().trim_start_matches("[1,");
        assert!(
            l.starts_with(&format!("[1,{rank}]<stdout>:rank {rank}/4")),
            "{l}"
        );
    }
    for rank in 0..4 {
        assert!(
            o.err
                .contains(&format!("[1,{rank}]<stderr>:rank {rank} says hello")),
            "{}",
            o.err
        );
    }
    assert!(daemons_of(&mv).is_empty(), "daemons left");

    // What each rank finds in its environment, and where --map-by node puts ranks.
    let show = "echo R=$GPUMPI_RANK N=$GPUMPI_NODE_ID L=$OMPI_COMM_WORLD_LOCAL_RANK/$OMPI_COMM_WORLD_LOCAL_SIZE \
                ML=$MPI_LOCALRANKID LR=$LOCAL_RANK GL=$GPUMPI_LOCAL_RANK/$GPUMPI_LOCAL_SIZE S=${GPUMPI_SERVER%%/*} X=$XV";
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    let o = run({
        let mut c = mpirun(&[
            "--host",
            "localhost:2,nodeb:2",
            "-x",
            "XV=7",
            "sh",
            "-c",
            show,
        ]);
        c.env(&mk, &mv);
        c
    });
    assert_eq!(o.code, 0, "{}", o.err);
    let mut lines: Vec<&str> = o.out.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            format!("R=0 N={host} L=0/2 ML=0 LR=0 GL=0/2 S= X=7"),
            format!("R=1 N={host} L=1/2 ML=1 LR=1 GL=1/2 S= X=7"),
            "R=2 N=nodeb L=0/2 ML=0 LR=0 GL=0/2 S=tcp: X=7".into(),
            "R=3 N=nodeb L=1/2 ML=1 LR=1 GL=1/2 S=tcp: X=7".into(),
        ],
        "{}",
        o.err
    );
    let dir = std::env::temp_dir().join(format!("gpumpi-mn-hf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hf = dir.join("hosts");
    std::fs::write(
        &hf,
        "# two hosts\nlocalhost slots=2\nnodeb:2  # hydra form\n",
    )
    .unwrap();
    let o = run({
        let hf = hf.to_str().unwrap();
        let mut c = mpirun(&[
            "--hostfile",
            hf,
            "-n",
            "3",
            "--map-by",
            "node",
            "sh",
            "-c",
            show,
        ]);
        c.env(&mk, &mv);
        c
    });
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(o.code, 0, "{}", o.err);
    let mut lines: Vec<&str> = o
        .out
        .lines()
        .map(|l| &l[..l.find(" L=").unwrap()])
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            format!("R=0 N={host}"),
            "R=1 N=nodeb".into(),
            format!("R=2 N={host}")
        ]
    );
    assert!(daemons_of(&mv).is_empty(), "daemons left");
}

/// Runs the helper on localhost:2,nodeb:2 with `args`; checks the exit code, that stderr has
/// `want`, and that every rank and daemon is gone soon after.
fn failing_job(test: &str, args: &[&str], code: i32, want: &str) -> Out {
    let (mk, mv) = marker(test);
    let mut all = vec!["--host", "localhost:2,nodeb:2", HELPER];
    all.extend_from_slice(args);
    let mut c = mpirun(&all);
    c.env(&mk, &mv);
    let o = run(c);
    assert_eq!(o.code, code, "{}{}", o.out, o.err);
    assert!(o.err.contains(want), "stderr lacks {want:?}:\n{}", o.err);
    let pids: Vec<i32> = reports(&o.out).iter().map(|r| r.1).collect();
    assert_eq!(pids.len(), 4, "{}", o.out);
    wait_gone(&pids, "rank");
    wait_gone(&daemons_of(&mv), "daemon");
    println!(
        "{test}: mpirun exited {:?} after the last report line",
        o.since_report
    );
    assert!(
        o.since_report < TEARDOWN,
        "teardown took {:?}",
        o.since_report
    );
    o
}

#[test]
fn abort_on_another_host_ends_the_job() {
    failing_job(
        "abort",
        &["--abort", "3", "7"],
        7,
        "rank 3 called MPI_Abort(MPI_COMM_WORLD, 7): helper rank 3 gives up",
    );
}

#[test]
fn killed_rank_on_another_host_ends_the_job() {
    let o = failing_job(
        "kill",
        &["--kill", "2"],
        137,
        "was killed by signal 9 (SIGKILL)",
    );
    assert!(
        o.err.contains("rank 2 (pid ") && o.err.contains(" on nodeb)"),
        "{}",
        o.err
    );
    // A rank of mpirun's own host dying stops the remote ranks as well.
    failing_job("killlocal", &["--kill", "0"], 137, "rank 0 (pid ");
    failing_job(
        "exit",
        &["--exit", "3", "5"],
        5,
        "on nodeb) exited with code 5",
    );
}

/// Starts the helper with `--hang` and returns mpirun, its rank pids, and the daemons.
fn hanging_job(mut c: Command, n: usize, mv: &str) -> (Child, Vec<i32>, Vec<i32>) {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut r = BufReader::new(child.stdout.take().unwrap());
    let mut out = String::new();
    for _ in 0..n {
        r.read_line(&mut out).unwrap();
    }
    std::thread::spawn(move || {
        let mut sink = String::new();
        while r.read_line(&mut sink).unwrap_or(0) > 0 {}
    });
    let pids: Vec<i32> = reports(&out).iter().map(|r| r.1).collect();
    assert_eq!(pids.len(), n, "{out}");
    let daemons = daemons_of(mv);
    (child, pids, daemons)
}

#[test]
fn killed_mpirun_takes_remote_ranks_and_daemons_with_it() {
    let (mk, mv) = marker("sigkill");
    let mut c = mpirun(&["--host", "localhost:2,nodeb:2", HELPER, "--hang"]);
    c.env(&mk, &mv);
    let (mut child, pids, daemons) = hanging_job(c, 4, &mv);
    assert_eq!(daemons.len(), 1, "one daemon for nodeb");
    assert!(
        pids[2..].iter().all(|&p| ppid(p) == daemons[0]),
        "remote ranks are the daemon's"
    );
    // The job secret reaches the remote ranks, but never through a command line.
    let env = std::fs::read(format!("/proc/{}/environ", pids[3])).unwrap();
    let secret = env
        .split(|&b| b == 0)
        .find_map(|v| v.strip_prefix(b"GPUMPI_SECRET="))
        .expect("the remote rank has the secret")
        .to_vec();
    assert_eq!(secret.len(), 64);
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmd = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        assert!(
            !cmd.windows(secret.len()).any(|w| w == secret),
            "the secret is on the command line of {:?}",
            p.path()
        );
    }
    child.kill().unwrap(); // SIGKILL: the daemon must notice its lost connection
    child.wait().unwrap();
    wait_gone(&pids, "rank");
    wait_gone(&daemons, "daemon");
}

#[test]
fn unreachable_host_is_named() {
    let (mk, mv) = marker("bad");
    let mut c = mpirun(&["--host", "localhost:1,badhost:1", HELPER, "--hang"]);
    c.env(&mk, &mv);
    let t = Instant::now();
    let o = run(c);
    assert_eq!(o.code, 1, "{}", o.err);
    assert!(
        o.err.contains("host badhost: the launch agent")
            && o.err.contains("exited with code 255")
            && o.err.contains("No route to host"),
        "{}",
        o.err
    );
    wait_gone(
        &reports(&o.out).iter().map(|r| r.1).collect::<Vec<_>>(),
        "rank",
    );
    assert!(
        t.elapsed() < TEARDOWN + Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );

    // An agent that never starts the daemon: the launch timeout names the host.
    let mut c = mpirun(&["--host", "localhost:1,silent1:1", HELPER]);
    c.env(&mk, &mv).env("GPUMPI_LAUNCH_TIMEOUT", "2");
    let o = run(c);
    assert_eq!(o.code, 1, "{}", o.err);
    assert!(
        o.err
            .contains("host silent1: its daemon did not connect back within 2 s"),
        "{}",
        o.err
    );
    // A missing agent.
    let mut c = mpirun(&[
        "--host",
        "nodeb:1",
        "--launch-agent",
        "/nonexistent/agent",
        HELPER,
    ]);
    c.env(&mk, &mv);
    let o = run(c);
    assert_eq!(o.code, 1, "{}", o.err);
    assert!(
        o.err.contains("host nodeb: cannot run the launch agent"),
        "{}",
        o.err
    );
    // More ranks than slots.
    let o = run(mpirun(&["--host", "a:1,b:1", "-n", "3", HELPER]));
    assert_eq!(o.code, 2, "{}", o.err);
    assert!(
        o.err.contains("not enough slots") && o.err.contains("a:1,b:1"),
        "{}",
        o.err
    );
}

#[test]
fn daemon_refuses_a_bad_launch_line() {
    let mut c = Command::new(MPIRUN);
    c.arg("--gpumpi-daemon")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"tcp://127.0.0.1:1 0 zz\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("gpumpi daemon on ") && e.contains("malformed"),
        "{e}"
    );
}

// ---- namespace nodes ----

/// mpirun inside node 0 of `prefix`, wire-up on rail0, node daemons through netns-agent.
fn netns_mpirun(prefix: &str, mv: &str, args: &[&str]) -> Command {
    let mut c = Command::new("bash");
    c.arg(netns::script())
        .args(["-p", prefix, "exec", "0", "env"])
        .arg("GPUMPI_NET_IFNAME==rail0")
        .arg(format!("MULTINODE_TEST_MARK={mv}"))
        .arg(MPIRUN)
        .arg("--launch-agent")
        .arg(format!(
            "{} -p {prefix}",
            root().join("scripts/netns-agent").display()
        ))
        .args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("GPUMPI_") {
            c.env_remove(k);
        }
    }
    c
}

#[test]
fn jobs_across_two_namespace_nodes() {
    let test = "jobs_across_two_namespace_nodes";
    let prefix = format!("gmn{}", std::process::id());
    let Some(guard) = netns::up(&prefix, 2, 1, test) else {
        return;
    };
    let mv = format!("netns-{}", std::process::id());
    let hosts = ["--host", "localhost:2,n1:2"];

    // Wire-up across the bridge; ranks 2 and 3 run in node 1's namespace.
    let mut a = hosts.to_vec();
    a.push(HELPER);
    let o = run(netns_mpirun(&prefix, &mv, &a));
    assert_eq!(o.code, 0, "{}{}", o.out, o.err);
    let locals: Vec<String> = reports(&o.out).into_iter().map(|r| r.2).collect();
    assert_eq!(locals, ["0/2", "1/2", "0/2", "1/2"], "{}", o.out);
    assert!(
        o.out.lines().all(|l| l.ends_with("peers v0,v1,v2,v3")),
        "{}",
        o.out
    );
    let where_ = "echo R=$GPUMPI_RANK NS=$(ip netns identify $$) S=$GPUMPI_SERVER";
    let mut a = hosts.to_vec();
    a.extend(["sh", "-c", where_]);
    let o = run(netns_mpirun(&prefix, &mv, &a));
    assert_eq!(o.code, 0, "{}", o.err);
    let mut lines: Vec<&str> = o.out.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 4, "{}", o.out);
    for (r, l) in lines.iter().enumerate() {
        let ns = format!("NS={prefix}-n{}", r / 2);
        assert!(l.starts_with(&format!("R={r} {ns} ")), "{l}");
        if r >= 2 {
            assert!(l.contains(" S=tcp://198.18.0.1:"), "{l}");
        }
    }

    // Abort and a killed rank on node 1, a SIGKILLed mpirun, an unreachable host.
    for (args, code, want) in [
        (
            vec!["--abort", "3", "7"],
            7,
            "rank 3 called MPI_Abort(MPI_COMM_WORLD, 7)",
        ),
        (
            vec!["--kill", "2"],
            137,
            " on n1) was killed by signal 9 (SIGKILL)",
        ),
    ] {
        let mut a = hosts.to_vec();
        a.push(HELPER);
        a.extend(args);
        let o = run(netns_mpirun(&prefix, &mv, &a));
        assert_eq!(o.code, code, "{}{}", o.out, o.err);
        assert!(o.err.contains(want), "{}", o.err);
        wait_gone(
            &reports(&o.out).iter().map(|r| r.1).collect::<Vec<_>>(),
            "rank",
        );
        wait_gone(&daemons_of(&mv), "daemon");
        println!(
            "{want}: mpirun exited {:?} after the last report",
            o.since_report
        );
    }
    let mut a = hosts.to_vec();
    a.extend([HELPER, "--hang"]);
    let (mut child, pids, daemons) = hanging_job(netns_mpirun(&prefix, &mv, &a), 4, &mv);
    // The job goes first, so that a failed check leaves no hanging job behind.
    child.kill().unwrap();
    child.wait().unwrap();
    wait_gone(&pids, "rank");
    wait_gone(&daemons, "daemon");
    assert_eq!(daemons.len(), 1, "one daemon for n1");
    let o = run(netns_mpirun(
        &prefix,
        &mv,
        &["--host", "localhost:1,n7:1", HELPER],
    ));
    assert_eq!(o.code, 1, "{}", o.err);
    assert!(
        o.err.contains("host n7: the launch agent") && o.err.contains("no network namespace"),
        "{}",
        o.err
    );

    drop(guard);
    let left = String::from_utf8_lossy(&netns::nodes(&prefix, &["list"]).stdout).to_string();
    assert!(left.trim().is_empty(), "namespaces left: {left}");
    assert!(daemons_of(&mv).is_empty(), "daemons left");
}
