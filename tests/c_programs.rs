//! C test programs under `tests/c/`, built with our `mpicc` and run with our `mpirun`.
//!
//! How it works:
//! - Once per test run, the library is installed with `scripts/install.sh --prefix
//!   <target-dir>/test-install` (the target dir is found from this test executable's path, so
//!   `CARGO_TARGET_DIR` is honoured). Set `GPUMPI_TEST_PREFIX=<prefix>` to use an existing install
//!   instead (it must hold `bin/mpicc` and `bin/mpirun`); this is a harness knob, not a library one.
//!   (Under `cargo test --release` the script gets `--debug`, so it never waits on the release build
//!   lock that the running `cargo test` may hold.)
//! - Each program `tests/c/<name>.c` is compiled with `mpicc -Wall -O1`; a compiler warning is a
//!   failure (it usually means `mpi.h` disagrees with the standard prototypes).
//! - `tests/c/testlist` says how to run it, one line per run group:
//!   `program  nranks...  [singleton] [expect=fail] [exit=N] [stderr=TEXT]... [timeout=S] [env=VAR=VALUE]... [args...]`
//!   (a double-quoted token may hold spaces: `stderr="rank 0 has 256"`)
//!   Integers are rank counts, each run as `mpirun --oversubscribe -n N --timeout S prog args`;
//!   `singleton` also runs the program directly, without mpirun. `nodes=K` runs each rank
//!   through `scripts/emulate-nodes.sh K` (the ranks spread over K emulated nodes on this host,
//!   talking over loopback TCP between them); with `netns` too, each of those nodes is a
//!   network namespace (`scripts/netns-nodes.sh`, 198.18.0.x; `rails=R`: R rails per node,
//!   local rank `i` on rail `i mod R`; a recorded skip where
//!   namespaces are not available). `cpus=LIST` runs mpirun (and so its ranks) under
//!   `taskset -c LIST`. `expect=fail` wants a non-zero
//!   exit within half the timeout (not a hang ended by `--timeout`), exactly `N` with `exit=N`,
//!   and every `stderr=TEXT` in the job's stderr (a passing run must show them too). `env=VAR=VALUE` sets a variable in mpirun's (and so the ranks')
//!   environment. Anything else is an argument.
//!   A passing run exits 0 and prints exactly one line `OK <program>...` (from rank 0).
//! - `hosts=LIST` in a testlist line runs `mpirun --oversubscribe --host LIST --timeout S prog
//!   args` over emulated hosts: `tests/support/local-agent` starts each host's node daemon on
//!   this machine, the wire-up uses 127.0.0.1, and each host's ranks get its name as
//!   `GPUMPI_NODE_ID`. With `netns` too, the hosts are namespace nodes (`localhost` is node 0,
//!   `n<i>` node i; `scripts/netns-nodes.sh`, brought up for the run and removed after it):
//!   mpirun runs in node 0, `scripts/netns-agent` starts the other nodes' daemons in theirs, and
//!   the wire-up and the ranks' traffic between nodes go over 198.18.0.x (a recorded skip where
//!   namespaces are not available); after each such run no process may be left in the
//!   namespaces, no new `/dev/shm/gpumpi-*` file, and the namespaces must go. `map-by=POLICY`
//!   adds `--map-by POLICY` to those runs. `ib` (with `nodes=K` or `hosts=LIST netns`): the
//!   nodes talk through the ibverbs backend over the libibverbs test double.
//! - One `#[test]` per program (listed in `c_tests!` below), running its rank counts in sequence.
//!   Runs are serialized by a lock: the jobs oversubscribe the machine already.
//! - If the install script, `mpicc` or `mpirun` is missing, every program test FAILS with a message
//!   saying so; nothing is skipped silently.

#[path = "support/fake_ib.rs"]
mod fake_ib;
#[path = "support/skip.rs"]
mod skip;

use std::fs;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

const DEFAULT_TIMEOUT_S: u64 = 60;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn c_dir() -> PathBuf {
    repo_root().join("tests").join("c")
}

/// `<target-dir>`: the test executable lives in `<target-dir>/<profile>/deps/`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| repo_root().join("target"))
}

/// True when this test executable was built in `<target-dir>/release/`.
fn test_profile_is_release() -> bool {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .is_some_and(|n| n == "release")
}

/// Serializes compiles and runs across the per-program tests.
fn run_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The install prefix, installed once per test run; Err(message) if that is impossible.
fn install() -> Result<&'static Path, String> {
    static PREFIX: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PREFIX
        .get_or_init(|| {
            let prefix = match std::env::var_os("GPUMPI_TEST_PREFIX") {
                Some(p) => PathBuf::from(p),
                None => {
                    let prefix = target_dir().join("test-install");
                    let script = repo_root().join("scripts").join("install.sh");
                    if !script.is_file() {
                        return Err(format!(
                            "cannot install gpumpi for the C tests: {} does not exist",
                            script.display()
                        ));
                    }
                    // install.sh builds the release library; when this test itself is a release
                    // build, cargo may still hold the release build lock, so install the debug one.
                    let mut cmd = Command::new("bash");
                    cmd.arg(&script).arg("--prefix").arg(&prefix);
                    if test_profile_is_release() {
                        cmd.arg("--debug");
                    }
                    let out = cmd
                        .current_dir(repo_root())
                        .output()
                        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
                    if !out.status.success() {
                        return Err(format!(
                            "{} --prefix {} failed ({}):\nstdout:\n{}\nstderr:\n{}",
                            script.display(),
                            prefix.display(),
                            out.status,
                            String::from_utf8_lossy(&out.stdout),
                            String::from_utf8_lossy(&out.stderr)
                        ));
                    }
                    prefix
                }
            };
            for tool in ["bin/mpicc", "bin/mpirun"] {
                if !prefix.join(tool).is_file() {
                    return Err(format!(
                        "the install at {} has no {tool}: cannot build or run the C tests",
                        prefix.display()
                    ));
                }
            }
            Ok(prefix)
        })
        .as_ref()
        .map(PathBuf::as_path)
        .map_err(Clone::clone)
}

#[derive(Debug, Default, Clone)]
struct RunSpec {
    nranks: Vec<u32>,
    /// `hosts=LIST` runs: `mpirun --host LIST` over emulated hosts (tests/support/local-agent).
    hosts: Vec<String>,
    /// `map-by=POLICY` (with `hosts=`): `mpirun --map-by POLICY`.
    map_by: Option<String>,
    singleton: bool,
    expect_fail: bool,
    exit_code: Option<i32>,
    stderr_has: Vec<String>,
    timeout_s: u64,
    env: Vec<(String, String)>,
    /// `nodes=K`: the ranks are spread over K emulated nodes (`scripts/emulate-nodes.sh`).
    nodes: Option<u32>,
    /// `netns` (with `nodes=K`): each emulated node is a network namespace of its own
    /// (`scripts/netns-nodes.sh`), talking over 198.18.0.x.
    netns: bool,
    /// `ib` (with `nodes=K`, or `hosts=LIST netns`): the nodes talk through the ibverbs backend
    /// (`GPUMPI_NET=ib`) over the libibverbs test double (`tests/support/fake_ibverbs.c`, a
    /// fabric file per run).
    ib: bool,
    /// `rails=R` (with `nodes=K`): each emulated node has R rails, local rank `i` on rail
    /// `i mod R` (`emulate-nodes.sh --rails`); with `netns`, R interfaces and bridges per node.
    rails: Option<u32>,
    /// `cpus=LIST`: mpirun (and so every rank) runs under `taskset -c LIST`.
    cpus: Option<String>,
    args: Vec<String>,
}

/// The whitespace-separated tokens of a testlist line; double quotes group words into one token
/// (`stderr="rank 0 has 256"`) and are removed.
fn tokens(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut quoted, mut any) = (false, false);
    for ch in line.chars() {
        match ch {
            '"' => (quoted, any) = (!quoted, true),
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

/// Parses `tests/c/testlist`: (program, spec) per non-comment line.
fn testlist() -> Vec<(String, RunSpec)> {
    let path = c_dir().join("testlist");
    let text =
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut out = Vec::new();
    for (lineno, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let toks = tokens(line);
        let mut toks = toks.iter().map(String::as_str);
        let prog = toks.next().unwrap().to_string();
        let mut spec = RunSpec {
            timeout_s: DEFAULT_TIMEOUT_S,
            ..Default::default()
        };
        for t in toks {
            if let Ok(n) = t.parse::<u32>() {
                assert!(
                    spec.args.is_empty(),
                    "testlist:{}: rank count {t} after arguments",
                    lineno + 1
                );
                assert!(n >= 1, "testlist:{}: rank count must be >= 1", lineno + 1);
                spec.nranks.push(n);
            } else if let Some(h) = t.strip_prefix("hosts=") {
                spec.hosts.push(h.to_string());
            } else if let Some(m) = t.strip_prefix("map-by=") {
                spec.map_by = Some(m.to_string());
            } else if t == "singleton" {
                spec.singleton = true;
            } else if t == "netns" {
                spec.netns = true;
            } else if t == "ib" {
                spec.ib = true;
            } else if t == "expect=fail" {
                spec.expect_fail = true;
            } else if let Some(s) = t.strip_prefix("exit=") {
                spec.exit_code = Some(
                    s.parse()
                        .unwrap_or_else(|_| panic!("testlist:{}: bad {t}", lineno + 1)),
                );
            } else if let Some(s) = t.strip_prefix("stderr=") {
                spec.stderr_has.push(s.to_string());
            } else if let Some(kv) = t.strip_prefix("env=") {
                let (k, v) = kv
                    .split_once('=')
                    .unwrap_or_else(|| panic!("testlist:{}: {t} is not env=VAR=VALUE", lineno + 1));
                spec.env.push((k.to_string(), v.to_string()));
            } else if let Some(s) = t.strip_prefix("cpus=") {
                spec.cpus = Some(s.to_string());
            } else if let Some(s) = t.strip_prefix("rails=") {
                spec.rails = Some(
                    s.parse()
                        .unwrap_or_else(|_| panic!("testlist:{}: bad {t}", lineno + 1)),
                );
            } else if let Some(s) = t.strip_prefix("nodes=") {
                spec.nodes = Some(
                    s.parse()
                        .unwrap_or_else(|_| panic!("testlist:{}: bad {t}", lineno + 1)),
                );
            } else if let Some(s) = t.strip_prefix("timeout=") {
                spec.timeout_s = s
                    .parse()
                    .unwrap_or_else(|_| panic!("testlist:{}: bad {t}", lineno + 1));
            } else {
                spec.args.push(t.to_string());
            }
        }
        assert!(
            !spec.netns || spec.nodes.is_some() == spec.hosts.is_empty(),
            "testlist:{}: netns needs nodes=K or hosts=LIST (not both)",
            lineno + 1
        );
        assert!(
            !spec.netns || spec.hosts.iter().all(|h| netns_hosts(h).is_some()),
            "testlist:{}: netns hosts are localhost (node 0) and n<i> (node i)",
            lineno + 1
        );
        assert!(
            !spec.ib || spec.nodes.is_some() || (spec.netns && !spec.hosts.is_empty()),
            "testlist:{}: ib needs nodes=K, or hosts=LIST with netns",
            lineno + 1
        );
        assert!(
            spec.exit_code.is_none() || spec.expect_fail,
            "testlist:{}: exit= needs expect=fail",
            lineno + 1
        );
        assert!(
            !spec.nranks.is_empty() || !spec.hosts.is_empty() || spec.singleton,
            "testlist:{}: {prog} has no rank counts",
            lineno + 1
        );
        out.push((prog, spec));
    }
    out
}

/// The namespace nodes a `hosts=LIST netns` run needs (`localhost` is node 0, where mpirun
/// runs; `n<i>` is node i): the highest node index + 1, or None for another host name.
fn netns_hosts(list: &str) -> Option<u32> {
    let mut nodes = 1;
    for h in list.split(',') {
        let name = h.split(':').next().unwrap_or("");
        if name != "localhost" {
            let i: u32 = name.strip_prefix('n')?.parse().ok()?;
            nodes = nodes.max(i + 1);
        }
    }
    Some(nodes)
}

/// A set of namespace nodes (`scripts/netns-nodes.sh -p PREFIX up K R`), removed on drop.
struct Netns(String);

impl Netns {
    /// Brings up `k` nodes of `rails` rails; `Err(reason)` where namespaces are not available
    /// (exit 77).
    fn up(k: u32, rails: u32) -> Result<Netns, String> {
        let prefix = format!("gct{}", std::process::id());
        let out = Command::new("bash")
            .arg(repo_root().join("scripts/netns-nodes.sh"))
            .args(["-p", &prefix, "up", &k.to_string(), &rails.to_string()])
            .output()
            .expect("run scripts/netns-nodes.sh");
        let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
        match out.status.code() {
            Some(0) => Ok(Netns(prefix)),
            Some(77) => Err(err),
            c => panic!("netns-nodes.sh up failed ({c:?}): {err}"),
        }
    }
}

impl Netns {
    /// The processes in the namespaces of nodes `0..k` ("pid command line"), once none has
    /// been there for a poll or after 5 s of waiting for them to go.
    fn processes(&self, k: u32) -> Vec<String> {
        let mut left = Vec::new();
        for _ in 0..50 {
            left.clear();
            for i in 0..k {
                let out = Command::new("ip")
                    .args(["netns", "pids", &format!("{}-n{i}", self.0)])
                    .output()
                    .expect("run ip netns pids");
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                    left.push(format!("{pid} {}", cmdline.trim()));
                }
            }
            if left.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        left
    }

    /// Removes the namespaces now; `Err` names those that could not be removed.
    fn down(&self) -> Result<(), String> {
        let out = Command::new("bash")
            .arg(repo_root().join("scripts/netns-nodes.sh"))
            .args(["-p", &self.0, "down"])
            .output()
            .expect("run scripts/netns-nodes.sh down");
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }
}

/// The `/dev/shm/gpumpi-*` files there are now, but the test double's fabric files (the
/// harness creates and removes those).
fn shm_files() -> std::collections::BTreeSet<String> {
    fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with("gpumpi-") && !n.starts_with("gpumpi-fakeibv-"))
                .collect()
        })
        .unwrap_or_default()
}

/// What a job across `k` namespace nodes left behind: processes in the namespaces, and
/// `/dev/shm/gpumpi-*` files that were not there before it (`before`) and are still there a
/// second later (ranks unlink their segments once set up: a file that stays is a job that died
/// in set-up; one that goes within a second was another job's, running beside this one).
fn netns_leftovers(
    ns: &Netns,
    k: u32,
    before: &std::collections::BTreeSet<String>,
) -> Option<String> {
    let procs = ns.processes(k);
    let mut files: Vec<String> = shm_files().difference(before).cloned().collect();
    if !files.is_empty() {
        std::thread::sleep(Duration::from_secs(1));
        let now = shm_files();
        files.retain(|f| now.contains(f));
    }
    let mut left = Vec::new();
    if !procs.is_empty() {
        left.push(format!(
            "processes in the namespace nodes: {}",
            procs.join("; ")
        ));
    }
    if !files.is_empty() {
        left.push(format!("files in /dev/shm: {}", files.join(" ")));
    }
    (!left.is_empty()).then(|| left.join(", "))
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo_root().join("scripts/netns-nodes.sh"))
            .args(["-p", &self.0, "down"])
            .output();
    }
}

fn build_dir() -> PathBuf {
    target_dir().join("c-tests")
}

/// Compiles `tests/c/<prog>.c` with the installed mpicc; returns the executable.
fn compile(prefix: &Path, prog: &str) -> PathBuf {
    let dir = build_dir();
    fs::create_dir_all(&dir).expect("create build dir");
    let exe = dir.join(prog);
    let src = c_dir().join(format!("{prog}.c"));
    let out = Command::new(prefix.join("bin/mpicc"))
        .args(["-Wall", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .current_dir(c_dir())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}/bin/mpicc: {e}", prefix.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{prog}: mpicc failed ({}):\n{stderr}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        !stderr.contains("warning:"),
        "{prog}: mpicc printed warnings:\n{stderr}"
    );
    exe
}

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    timed_out: bool,
    secs: f64,
    /// What the job left behind (processes, files), as found by the check given to
    /// [`run_cmd_checked`] once the job had ended.
    left: Option<String>,
}

/// Runs a command with stdout/stderr to files, killing it after `limit`.
fn run_cmd(cmd: Command, tag: &str, limit: Duration) -> Outcome {
    run_cmd_checked(cmd, tag, limit, &|| None)
}

/// [`run_cmd`], with `leftovers` called once the job has ended (before the harness kills
/// whatever remains in its process group): `Some(description)` of anything left behind.
fn run_cmd_checked(
    mut cmd: Command,
    tag: &str,
    limit: Duration,
    leftovers: &dyn Fn() -> Option<String>,
) -> Outcome {
    let dir = build_dir();
    let out_path = dir.join(format!("{tag}.stdout"));
    let err_path = dir.join(format!("{tag}.stderr"));
    let out_f = fs::File::create(&out_path).expect("create stdout file");
    let err_f = fs::File::create(&err_path).expect("create stderr file");
    cmd.stdin(Stdio::null()).stdout(out_f).stderr(err_f);
    // Own process group, so that a timeout (or ranks left behind by a broken launcher) can be
    // killed as a whole.
    cmd.process_group(0);
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{tag}: cannot start {cmd:?}: {e}"));
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if start.elapsed() > limit {
            timed_out = true;
            kill_group(child.id());
            break child.wait().expect("wait after kill");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let left = if timed_out { None } else { leftovers() };
    // Whatever the job left running in its group goes too.
    kill_group(child.id());
    let read = |p: &Path| {
        let mut s = Vec::new();
        if let Ok(mut f) = fs::File::open(p) {
            let _ = f.read_to_end(&mut s);
        }
        String::from_utf8_lossy(&s).into_owned()
    };
    Outcome {
        code: status.code(),
        stdout: read(&out_path),
        stderr: read(&err_path),
        timed_out,
        secs: start.elapsed().as_secs_f64(),
        left,
    }
}

/// SIGKILL to the process group `pgid` (a child started with `process_group(0)`).
fn kill_group(pgid: u32) {
    // SAFETY: kill(2) with a negative pid signals that process group; no memory is involved.
    // The group is the one this harness created for the child, so nothing else is hit.
    unsafe {
        libc::kill(-(pgid as libc::pid_t), libc::SIGKILL);
    }
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Checks one run; returns a failure description or None.
fn judge(prog: &str, what: &str, spec: &RunSpec, o: &Outcome) -> Option<String> {
    let ctx = || {
        format!(
            "{what}: exit {:?}{} after {:.1}s\n--- stdout (tail) ---\n{}\n--- stderr (tail) ---\n{}",
            o.code,
            if o.timed_out {
                " (killed by the harness: timeout)"
            } else {
                ""
            },
            o.secs,
            tail(&o.stdout, 30),
            tail(&o.stderr, 30)
        )
    };
    if o.timed_out {
        return Some(format!("{prog} timed out\n{}", ctx()));
    }
    if let Some(left) = &o.left {
        return Some(format!("{prog}: the job left {left} behind\n{}", ctx()));
    }
    if spec.expect_fail {
        if o.code == Some(0) {
            return Some(format!(
                "{prog} was expected to fail but exited 0\n{}",
                ctx()
            ));
        }
        // an abort must be prompt: a job that only ended because mpirun's --timeout fired hung
        if o.secs > spec.timeout_s as f64 / 2.0 {
            return Some(format!(
                "{prog} failed as expected but only after {:.1}s (a hang?)\n{}",
                o.secs,
                ctx()
            ));
        }
        if let Some(want) = spec.exit_code {
            if o.code != Some(want) {
                return Some(format!(
                    "{prog} failed as expected but with exit {:?}, want {want}\n{}",
                    o.code,
                    ctx()
                ));
            }
        }
        for want in &spec.stderr_has {
            if !o.stderr.contains(want.as_str()) {
                return Some(format!(
                    "{prog}: stderr does not contain {want:?}\n{}",
                    ctx()
                ));
            }
        }
        return None;
    }
    if o.code != Some(0) {
        return Some(format!("{prog} failed\n{}", ctx()));
    }
    let ok_lines = o
        .stdout
        .lines()
        .filter(|l| l.trim_end() == format!("OK {prog}") || l.starts_with(&format!("OK {prog} ")))
        .count();
    if ok_lines != 1 {
        return Some(format!(
            "{prog}: want exactly one 'OK {prog}' line, got {ok_lines}\n{}",
            ctx()
        ));
    }
    if o.stdout.contains("FAIL") || o.stderr.contains("FAIL ") {
        return Some(format!("{prog}: output mentions FAIL\n{}", ctx()));
    }
    for want in &spec.stderr_has {
        if !o.stderr.contains(want.as_str()) {
            return Some(format!(
                "{prog}: stderr does not contain {want:?}\n{}",
                ctx()
            ));
        }
    }
    None
}

/// Sets `cmd` (mpirun) up for the ibverbs backend over the test double with fabric `f`.
fn ib_env(cmd: &mut Command, f: &fake_ib::Fabric) {
    let lib = fake_ib::lib().unwrap_or_else(|e| panic!("building the libibverbs test double: {e}"));
    cmd.env("GPUMPI_NET", "ib")
        .env("GPUMPI_IBVERBS_LIB", lib)
        .env("FAKEIBV_FABRIC", &f.path);
}

/// Compiles and runs one program at every rank count its testlist lines give.
fn run_program(prog: &str) {
    let specs: Vec<RunSpec> = testlist()
        .into_iter()
        .filter(|(p, _)| p == prog)
        .map(|(_, s)| s)
        .collect();
    assert!(!specs.is_empty(), "{prog} is not in tests/c/testlist");
    let _guard = run_lock();
    let prefix = match install() {
        Ok(p) => p,
        Err(msg) => panic!("C test {prog} cannot run: {msg}"),
    };
    let exe = compile(prefix, prog);
    let mpirun = prefix.join("bin/mpirun");
    let mut failures = Vec::new();
    for (k, spec) in specs.iter().enumerate() {
        let limit = Duration::from_secs(spec.timeout_s + 30);
        if spec.singleton {
            let mut cmd = Command::new(&exe);
            cmd.args(&spec.args)
                .envs(spec.env.iter().cloned())
                .current_dir(build_dir());
            let what = format!("{prog} {} (singleton, no mpirun)", spec.args.join(" "));
            let o = run_cmd(cmd, &format!("{prog}.{k}.singleton"), limit);
            failures.extend(judge(prog, &what, spec, &o));
        }
        let netns = match spec
            .nodes
            .filter(|_| spec.netns)
            .map(|k| Netns::up(k, spec.rails.unwrap_or(1)))
        {
            Some(Err(why)) => {
                skip::skip(&format!("c_programs::{prog} (netns line {k})"), &why);
                continue;
            }
            other => other.map(Result::unwrap),
        };
        for &n in &spec.nranks {
            let fabric = spec
                .ib
                .then(|| fake_ib::Fabric::new(&format!("c-{prog}-{k}-{n}")));
            let mut cmd = match &spec.cpus {
                Some(list) => {
                    let mut c = Command::new("taskset");
                    c.args(["-c", list]).arg(&mpirun);
                    c
                }
                None => Command::new(&mpirun),
            };
            if let Some(f) = &fabric {
                ib_env(&mut cmd, f);
            }
            cmd.args([
                "--oversubscribe",
                "-n",
                &n.to_string(),
                "--timeout",
                &spec.timeout_s.to_string(),
            ]);
            if let Some(k) = spec.nodes {
                cmd.arg(repo_root().join("scripts/emulate-nodes.sh"));
                if let Some(ns) = &netns {
                    cmd.args(["--netns", &ns.0]);
                }
                if let Some(r) = spec.rails {
                    cmd.args(["--rails", &r.to_string()]);
                }
                cmd.arg(k.to_string());
            }
            cmd.arg(&exe)
                .args(&spec.args)
                .envs(spec.env.iter().cloned())
                .current_dir(build_dir());
            let nodes = spec.nodes.map(|k| match (&netns, spec.ib) {
                (Some(_), false) => format!(" ({k} namespace nodes)"),
                (None, false) => format!(" ({k} emulated nodes)"),
                (Some(_), true) => format!(" ({k} namespace nodes, ibverbs test double)"),
                (None, true) => format!(" ({k} emulated nodes, ibverbs test double)"),
            });
            let what = format!(
                "{}mpirun -n {n} {prog} {}{}",
                spec.cpus
                    .as_ref()
                    .map(|l| format!("taskset -c {l} "))
                    .unwrap_or_default(),
                spec.args.join(" "),
                nodes.unwrap_or_default()
            );
            let o = run_cmd(cmd, &format!("{prog}.{k}.n{n}"), limit);
            failures.extend(judge(prog, &what, spec, &o));
            drop(fabric);
        }
        for (h, hosts) in spec.hosts.iter().enumerate() {
            let mut cmd;
            // Namespace nodes of a `netns` run, removed once the run is judged.
            let mut nodes = None;
            let shm_before = shm_files();
            if spec.netns {
                let k = netns_hosts(hosts).expect("checked by testlist()");
                let ns = match Netns::up(k, 1) {
                    Ok(ns) => nodes.insert((ns, k)),
                    Err(why) => {
                        skip::skip(&format!("c_programs::{prog} (hosts={hosts} netns)"), &why);
                        continue;
                    }
                };
                let ns = &ns.0;
                // mpirun in node 0; every other host's daemon through netns-agent in its node.
                // Wire-up and the ranks' network use the default interface choice (rail0).
                cmd = Command::new("bash");
                cmd.arg(repo_root().join("scripts/netns-nodes.sh"))
                    .args(["-p", &ns.0, "exec", "0"])
                    .arg(&mpirun)
                    .args(["--oversubscribe", "--host", hosts, "--launch-agent"])
                    .arg(format!(
                        "{} -p {}",
                        repo_root().join("scripts/netns-agent").display(),
                        ns.0
                    ));
                for (var, _) in std::env::vars() {
                    if var.starts_with("GPUMPI_") && var != "GPUMPI_TEST_PREFIX" {
                        cmd.env_remove(var);
                    }
                }
            } else {
                cmd = Command::new(&mpirun);
                cmd.args(["--oversubscribe", "--host", hosts, "--launch-agent"])
                    .arg(repo_root().join("tests/support/local-agent"))
                    .env("GPUMPI_WIREUP_ADDR", "127.0.0.1");
            }
            if let Some(m) = &spec.map_by {
                cmd.args(["--map-by", m]);
            }
            cmd.args(["--timeout", &spec.timeout_s.to_string()])
                .arg(&exe)
                .args(&spec.args)
                .envs(spec.env.iter().cloned())
                .current_dir(build_dir());
            // ib: the ranks of every node reach the double's one fabric file (the namespaces
            // share /dev/shm); the variables go to other nodes' ranks with mpirun's GPUMPI_*
            // settings, FAKEIBV_FABRIC through their daemons' environment.
            let fabric = spec
                .ib
                .then(|| fake_ib::Fabric::new(&format!("c-{prog}-{k}-h{h}")));
            if let Some(f) = &fabric {
                ib_env(&mut cmd, f);
            }
            let netns_note = match (spec.netns, spec.ib) {
                (true, true) => " (namespace nodes, ibverbs test double)",
                (true, false) => " (namespace nodes)",
                _ => "",
            };
            let what = format!(
                "mpirun --host {hosts} {prog} {}{netns_note}",
                spec.args.join(" ")
            );
            let tag = format!("{prog}.{k}.h{h}");
            let o = match &nodes {
                Some((ns, k)) => {
                    run_cmd_checked(cmd, &tag, limit, &|| netns_leftovers(ns, *k, &shm_before))
                }
                None => run_cmd(cmd, &tag, limit),
            };
            failures.extend(judge(prog, &what, spec, &o));
            drop(fabric);
            if let Some((ns, _)) = nodes {
                if let Err(e) = ns.down() {
                    failures.push(format!("{what}: namespaces left after the run: {e}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} run(s) of {prog} failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

macro_rules! c_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run_program(stringify!($name));
            }
        )*
        const PROGRAMS: &[&str] = &[$(stringify!($name)),*];
    };
}

c_tests!(
    init_thread,
    stream_api,
    init_plain,
    multinode_init,
    net_lazy,
    net_bulk,
    p2p_basic,
    p2p_nonblocking,
    p2p_modes,
    p2p_probe,
    p2p_order,
    p2p_large,
    p2p_dtype,
    p2p_finalized,
    coll_data,
    coll_a2av_pairs,
    coll_reduce,
    dtype_basic,
    type_half,
    dtype_pack,
    comm_basic,
    comm_attr,
    group_ops,
    topo_cart,
    misc_info,
    abort_job,
    err_args,
    err_handler,
    err_fatal,
    err_preinit,
    err_postfinalize,
    thread_multiple,
    bigcount_c,
    mpi5_abi,
    coll_comms,
    comm_churn,
    err_objects,
    coll_persist_reuse,
    coll_flag,
    launcher_check,
    mpi4py_needs,
    err_matrix,
    coll_mismatch,
    init_mismatch,
    coll_split,
    coll_drift,
    coll_mid,
    coll_pieces,
    mpix_callbacks,
);

/// Every `tests/c/*.c` has a `#[test]` and a testlist line, and vice versa. Needs no install.
#[test]
fn testlist_covers_every_program() {
    let mut on_disk: Vec<String> = fs::read_dir(c_dir())
        .expect("read tests/c")
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".c"))
                .map(str::to_string)
        })
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = testlist().into_iter().map(|(p, _)| p).collect();
    listed.sort();
    listed.dedup();
    let mut tests: Vec<String> = PROGRAMS.iter().map(|s| s.to_string()).collect();
    tests.sort();
    assert_eq!(on_disk, listed, "tests/c/*.c and tests/c/testlist disagree");
    assert_eq!(
        on_disk, tests,
        "tests/c/*.c and the c_tests! list in tests/c_programs.rs disagree"
    );
}

/// err_matrix under the default handler (MPI_ERRORS_ARE_FATAL): every case of `err_matrix list`
/// in a job of its own must end the job with a non-zero exit and gpumpi's fatal message naming
/// the call and the class, never with a crash, a hang or a return from the call.
#[test]
fn err_matrix_fatal() {
    let _guard = run_lock();
    let prefix = match install() {
        Ok(p) => p,
        Err(msg) => panic!("C test err_matrix cannot run: {msg}"),
    };
    let exe = compile(prefix, "err_matrix");
    let list = Command::new(&exe)
        .arg("list")
        .output()
        .expect("err_matrix list");
    assert!(list.status.success(), "err_matrix list failed");
    let list = String::from_utf8_lossy(&list.stdout).into_owned();
    let cases: Vec<(&str, &str)> = list.lines().filter_map(|l| l.split_once(' ')).collect();
    assert!(
        cases.len() > 50,
        "err_matrix lists only {} cases",
        cases.len()
    );
    let mut failures = Vec::new();
    for (name, call) in &cases {
        let mut cmd = Command::new(prefix.join("bin/mpirun"));
        cmd.args(["--oversubscribe", "-n", "1", "--timeout", "30"])
            .arg(&exe)
            .args(["fatal", name])
            .current_dir(build_dir());
        let o = run_cmd(
            cmd,
            &format!("err_matrix.fatal.{name}"),
            Duration::from_secs(60),
        );
        let want = format!("gpumpi: fatal error: {call}: MPI_ERR_");
        let ok = !o.timed_out
            && o.code.is_some_and(|c| c != 0)
            && o.stderr.contains(&want)
            && !o.stderr.contains("FAIL")
            && !o.stderr.contains("Segmentation")
            && !o.stderr.contains("signal");
        if !ok {
            failures.push(format!(
                "case {name}: want a fatal error naming {call} ({want:?}); exit {:?}{}\n{}",
                o.code,
                if o.timed_out { " (timeout)" } else { "" },
                tail(&o.stderr, 10)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases did not die as they should:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// The check made after each run across namespace nodes finds a process left in a node and a
/// new `/dev/shm/gpumpi-*` file that stays, and nothing once they are gone.
#[test]
fn netns_leftovers_are_found() {
    let _guard = run_lock();
    let ns = match Netns::up(2, 1) {
        Ok(ns) => ns,
        Err(why) => {
            skip::skip("c_programs::netns_leftovers_are_found", &why);
            return;
        }
    };
    let before = shm_files();
    assert_eq!(netns_leftovers(&ns, 2, &before), None);
    let mut sleeper = Command::new("ip")
        .args(["netns", "exec", &format!("{}-n1", ns.0), "sleep", "37"])
        .spawn()
        .expect("start sleep in node 1");
    let name = format!("gpumpi-leftover-check-{}", std::process::id());
    fs::write(format!("/dev/shm/{name}"), b"").expect("create a /dev/shm file");
    std::thread::sleep(Duration::from_millis(300));
    let left = netns_leftovers(&ns, 2, &before);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let _ = fs::remove_file(format!("/dev/shm/{name}"));
    let left = left.expect("a process and a file were left");
    assert!(
        left.contains(&format!("{} sleep 37", sleeper.id())) && left.contains(&name),
        "{left}"
    );
    assert_eq!(netns_leftovers(&ns, 2, &before), None);
    ns.down().expect("namespaces removed");
}
