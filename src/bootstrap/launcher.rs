//! The logic of `mpirun` (the binary in `src/bin/mpirun.rs` only calls [`main`]).
//!
//! `mpirun [-n N] [--host H[:N],...] [--hostfile F] [--map-by slot|node] [--launch-agent CMD]
//! [--oversubscribe] [-x VAR[=value]]... [--tag-output] [--timeout S] [--] program [args...]`
//! places N ranks on hosts ([`super::hosts`]; without a host list all on this machine) and
//! starts them with an embedded wire-up server ([`super::server`]) listening on a Unix socket in
//! a private directory (mode 0700, under `$TMPDIR`), and on TCP as well when some host is not
//! this machine, protected by a per-job random secret. Ranks on this machine are forked
//! directly; every other host gets a node daemon through the launch agent ([`super::remote`],
//! [`super::daemon`]). Each rank gets (see `docs/ENV.md`): `GPUMPI_JOB_ID`, `GPUMPI_RANK`,
//! `GPUMPI_SIZE`, `GPUMPI_LOCAL_RANK`, `GPUMPI_LOCAL_SIZE`, `GPUMPI_UNIVERSE_SIZE`,
//! `GPUMPI_APPNUM`, `GPUMPI_SERVER`, `GPUMPI_SECRET`, `GPUMPI_NODE_ID` (when the job spans
//! hosts), and the variables other launchers set that programs read ([`launch_env`]:
//! `OMPI_COMM_WORLD_*`, `MPI_LOCALRANKID`, `LOCAL_RANK`, ...).
//!
//! With `GPUMPI_BIND=core` (the default) the i-th rank of a host is bound to the i-th CPU of
//! the affinity mask there when that host's rank count (2 or more) equals the number of those
//! CPUs (see [`procs::bind_set`]).
//!
//! Each rank runs in its own process group with `PR_SET_PDEATHSIG` = SIGKILL, so it dies with
//! mpirun (or its host's daemon, which dies when its connection to mpirun ends). Output is
//! forwarded line by line. The first failure (non-zero exit, death by signal, abort through
//! the bootstrap, a rank that drops its connection without finalizing, a daemon lost, a launch
//! agent that fails, the time limit, a signal to mpirun) stops the job: SIGTERM to every
//! rank's process group, SIGKILL 0.5 s later, on every host. At exit the private directory and
//! every `/dev/shm/gpumpi-<job_id>-*` file are removed; an mpirun that was killed cannot do
//! that, so every mpirun first sweeps what killed jobs of its user left ([`sweep_stale_jobs`]).

use super::hosts::{self, HostSlots, MapBy, Placement};
use super::procs::{self, Proc};
use super::random_bytes;
use super::remote::{NodeEvent, RemoteNode};
use super::server::{Event, Layout, RankState, Server};
use super::wire;
use crate::config;
use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long a rank that dropped its connection may take to be reaped before it is reported as lost.
const LOST_GRACE: Duration = Duration::from_millis(300);
/// How long remote ranks may take to report their exit after `Kill` before their node is closed.
const REMOTE_KILL_WAIT: Duration = Duration::from_secs(3);
/// Exit code on `--timeout`, like timeout(1).
pub const TIMEOUT_EXIT: i32 = 124;
/// Exit code of a usage error: bad options, or more ranks than cores without `--oversubscribe`.
pub const USAGE_EXIT: i32 = 2;

pub const USAGE: &str = "\
usage: mpirun [-n N] [options] [--] program [args...]

options:
  -n, -np, --np N     number of ranks to start (default with a host list: every slot)
  -H, --host LIST     hosts and slots: h1:2,h2:2 (a host without :N has 1 slot)
  --hostfile FILE     hosts from a file: `host slots=N` or `host:N` per line, # comments
  --map-by slot|node  fill each host's slots in turn (slot, the default) or go round the hosts
  --launch-agent CMD  how to start a daemon on another host: CMD HOST COMMAND... (default ssh,
                      also GPUMPI_LAUNCH_AGENT)
  --oversubscribe     allow more ranks than cores or slots (also GPUMPI_OVERSUBSCRIBE=1)
  -x VAR[=value]      set VAR=value in every rank, or forward VAR from mpirun's environment
  --tag-output        prefix each output line with [1,rank]<stdout>: or [1,rank]<stderr>:
  --timeout S         stop the job after S seconds (exit code 124)
  -h, --help          this help
  -V, --version       print the version
";

#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// `-n`; without it a host list's slots decide.
    pub n: Option<usize>,
    pub oversubscribe: bool,
    /// `--host` entries, in order (repeated hosts add slots).
    pub hosts: Vec<HostSlots>,
    pub hostfile: Option<String>,
    pub map_by: MapBy,
    pub launch_agent: Option<String>,
    /// `-x` options in order: (name, Some(value)) sets, (name, None) forwards.
    pub env: Vec<(String, Option<String>)>,
    pub tag_output: bool,
    pub timeout: Option<Duration>,
    pub program: String,
    pub args: Vec<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Parsed {
    Run(Options),
    Help,
    Version,
}

/// Parse mpirun's arguments (without `argv[0]`).
pub fn parse_args(args: &[String]) -> Result<Parsed, String> {
    let mut o = Options {
        n: None,
        oversubscribe: false,
        hosts: Vec::new(),
        hostfile: None,
        map_by: MapBy::Slot,
        launch_agent: None,
        env: Vec::new(),
        tag_output: false,
        timeout: None,
        program: String::new(),
        args: Vec::new(),
    };
    let mut i = 0;
    let value = |i: &mut usize, opt: &str| -> Result<String, String> {
        *i += 1;
        args.get(*i)
            .cloned()
            .ok_or_else(|| format!("option {opt} needs a value"))
    };
    while i < args.len() {
        let a = args[i].as_str();
        // `--opt=value` forms.
        let (name, inline) = match a.split_once('=') {
            Some((k, v)) if a.starts_with("--") => (k, Some(v.to_string())),
            _ => (a, None),
        };
        let val = |i: &mut usize| match &inline {
            Some(v) => Ok(v.clone()),
            None => value(i, name),
        };
        match name {
            "-h" | "--help" => return Ok(Parsed::Help),
            "--version" | "-V" => return Ok(Parsed::Version),
            "-n" | "-np" | "--np" | "--n" => {
                let v = val(&mut i)?;
                let k: usize = v.parse().map_err(|_| {
                    format!("{name} {v:?}: the number of ranks must be a positive integer")
                })?;
                if k == 0 {
                    return Err(format!(
                        "{name} 0: the number of ranks must be a positive integer"
                    ));
                }
                o.n = Some(k);
            }
            "-H" | "--host" | "-host" | "--hosts" | "-hosts" => {
                hosts::parse_host_list(&val(&mut i)?, &mut o.hosts)?
            }
            "--hostfile" | "-hostfile" | "--machinefile" | "-machinefile" | "-f" => {
                o.hostfile = Some(val(&mut i)?)
            }
            "--map-by" | "-map-by" => o.map_by = MapBy::parse(&val(&mut i)?)?,
            "--launch-agent" | "-launch-agent" | "--launcher-exec" => {
                o.launch_agent = Some(val(&mut i)?)
            }
            "--oversubscribe" => o.oversubscribe = true,
            "--tag-output" => o.tag_output = true,
            "-x" => {
                let v = val(&mut i)?;
                let (k, v) = match v.split_once('=') {
                    Some((k, v)) => (k.to_string(), Some(v.to_string())),
                    None => (v, None),
                };
                if k.is_empty()
                    || k.starts_with(|c: char| c.is_ascii_digit())
                    || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    return Err(format!("-x {k:?}: not a valid environment variable name"));
                }
                o.env.push((k, v));
            }
            "--timeout" => {
                let v = val(&mut i)?;
                let s: f64 = v
                    .parse()
                    .map_err(|_| format!("--timeout {v:?}: not a number of seconds"))?;
                if !(s > 0.0 && s.is_finite()) {
                    return Err(format!(
                        "--timeout {v:?}: must be a positive number of seconds"
                    ));
                }
                o.timeout = Some(Duration::from_secs_f64(s));
            }
            "--" => {
                i += 1;
                break;
            }
            _ if a.starts_with('-') && a.len() > 1 => {
                return Err(format!("unknown option {a:?} (see mpirun --help)"))
            }
            _ => break,
        }
        i += 1;
    }
    let Some(prog) = args.get(i) else {
        return Err("no program to run (see mpirun --help)".into());
    };
    o.program = prog.clone();
    o.args = args[i + 1..].to_vec();
    if o.hostfile.is_some() && !o.hosts.is_empty() {
        return Err("--host and --hostfile cannot be used together".into());
    }
    if o.n.is_none() && o.hostfile.is_none() && o.hosts.is_empty() {
        return Err("the number of ranks is missing: use -n N (or a host list)".into());
    }
    Ok(Parsed::Run(o))
}

/// Entry point of the binary: returns the exit code.
pub fn main(args: Vec<String>) -> i32 {
    if args.first().map(String::as_str) == Some(super::daemon::DAEMON_ARG) {
        return super::daemon::main();
    }
    match parse_args(&args) {
        Ok(Parsed::Help) => {
            print!("{USAGE}");
            0
        }
        Ok(Parsed::Version) => {
            println!("mpirun (gpumpi) {}", env!("CARGO_PKG_VERSION"));
            0
        }
        Ok(Parsed::Run(o)) => run(&o),
        Err(e) => {
            eprintln!("mpirun: {e}");
            USAGE_EXIT
        }
    }
}

pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        _ => "unknown signal",
    }
}

/// The private directory and shared-memory files of a job; removed on drop.
struct Cleanup {
    dir: PathBuf,
    job_id: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        remove_shm_files(&self.job_id);
    }
}

/// Remove every `/dev/shm/gpumpi-<job_id>-*`; returns how many were removed.
pub fn remove_shm_files(job_id: &str) -> usize {
    let prefix = format!("gpumpi-{job_id}-");
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir("/dev/shm") {
        for e in rd.flatten() {
            if e.file_name()
                .to_str()
                .is_some_and(|s| s.starts_with(&prefix))
                && std::fs::remove_file(e.path()).is_ok()
            {
                n += 1;
            }
        }
    }
    n
}

/// Where job directories live: `$TMPDIR` (or /tmp when `$TMPDIR` is too long for a socket path).
fn jobs_base() -> PathBuf {
    let base = std::env::temp_dir();
    if base.as_os_str().len() > 60 {
        PathBuf::from("/tmp")
    } else {
        base
    }
}

/// Clean up after mpiruns of this user that were killed (SIGKILL leaves no chance to clean up):
/// a directory `gpumpi-<pid>-<8 hex digits>` under `base`, owned by our uid, whose mpirun
/// `pid` is gone and whose wire-up socket nobody serves, is stale. Its job's processes that
/// outlived it (ranks die with mpirun through PR_SET_PDEATHSIG, but processes a rank forked
/// do not) are found by `GPUMPI_JOB_ID=<job>` in their environment among our uid's processes
/// and killed; then the directory and the job's `/dev/shm` names are removed. Returns the job
/// ids swept.
pub fn sweep_stale_jobs(base: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let mut swept = Vec::new();
    let Ok(rd) = std::fs::read_dir(base) else {
        return swept;
    };
    for e in rd.flatten() {
        let Some(job_id) = e
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix("gpumpi-"))
            .map(str::to_string)
        else {
            continue;
        };
        let Some((pid, tag)) = job_id.split_once('-') else {
            continue;
        };
        let Ok(pid) = pid.parse::<i32>() else {
            continue;
        };
        if pid <= 0 || tag.len() != 8 || !tag.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let path = e.path();
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() && m.uid() == uid => {}
            _ => continue,
        }
        if process_exists(pid) || UnixStream::connect(path.join("wireup.sock")).is_ok() {
            continue;
        }
        kill_job_processes(&job_id, uid);
        let _ = std::fs::remove_dir_all(&path);
        remove_shm_files(&job_id);
        tracing::debug!("mpirun: removed what the killed job {job_id} left");
        swept.push(job_id);
    }
    swept
}

fn process_exists(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// SIGKILL every process of `uid` whose environment holds `GPUMPI_JOB_ID=<job_id>`.
fn kill_job_processes(job_id: &str, uid: u32) {
    use std::os::unix::fs::MetadataExt;
    let want = format!("GPUMPI_JOB_ID={job_id}");
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if !std::fs::metadata(e.path()).is_ok_and(|m| m.uid() == uid) {
            continue;
        }
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if env.split(|&b| b == 0).any(|v| v == want.as_bytes()) {
            // SAFETY: plain kill(2) of a process of our own uid.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// A private directory for the job's socket: `<jobs_base>/gpumpi-<job_id>`, mode 0700.
fn private_dir(job_id: &str) -> std::io::Result<PathBuf> {
    let dir = jobs_base().join(format!("gpumpi-{job_id}"));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

/// Why the job ends early.
struct Stop {
    msg: String,
    code: i32,
    /// The signal sent first to every rank (then SIGKILL after the grace period).
    first_signal: i32,
}

impl Stop {
    fn failed(msg: String, code: i32) -> Option<Stop> {
        Some(Stop {
            msg,
            code,
            first_signal: libc::SIGTERM,
        })
    }
}

/// `who` (e.g. `rank 2 (pid 1234)`) ended with `st`: the message and mpirun's exit code, or
/// `None` for a clean exit.
fn describe_exit(who: &str, st: ExitStatus) -> Option<(String, i32)> {
    if let Some(sig) = st.signal() {
        return Some((
            format!(
                "{who} was killed by signal {sig} ({}); stopping the job",
                signal_name(sig)
            ),
            128 + sig,
        ));
    }
    match st.code() {
        Some(0) | None => None,
        Some(c) => Some((format!("{who} exited with code {c}; stopping the job"), c)),
    }
}

fn forward(
    src: impl Read + Send + 'static,
    rank: usize,
    stderr: bool,
    tag: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let prefix = procs::tag_prefix(tag, rank, stderr);
        procs::read_lines(src, |l| procs::emit_line(&prefix, l, stderr));
    })
}

fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Where the job's ranks go: the host list or hostfile placed by [`hosts::place`], else `-n`
/// ranks on this machine (refused beyond its cores without oversubscription). Errors carry
/// mpirun's exit code.
fn plan(o: &Options, oversubscribe: bool) -> Result<Placement, (String, i32)> {
    let list = match &o.hostfile {
        Some(f) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| (format!("cannot read the hostfile {f:?}: {e}"), USAGE_EXIT))?;
            hosts::parse_hostfile(&text, f).map_err(|e| (e, USAGE_EXIT))?
        }
        None => o.hosts.clone(),
    };
    let hostname = super::node::host_name();
    if list.is_empty() {
        let n = o.n.unwrap_or(1);
        let ncores = cores();
        if n > ncores && !oversubscribe {
            return Err((
                format!(
                    "there are not enough slots available in the system to satisfy the {n} \
                     slots requested by the application {:?}: this machine has {ncores} cores.\n\
                     Either request fewer ranks, or use --oversubscribe (or \
                     GPUMPI_OVERSUBSCRIBE=1) to run more ranks than cores.",
                    o.program
                ),
                USAGE_EXIT,
            ));
        }
        return Ok(Placement {
            nodes: vec![hosts::Node {
                name: hostname,
                local: true,
                ranks: (0..n).collect(),
            }],
            node_of: vec![0; n],
        });
    }
    hosts::place(
        &list,
        o.n,
        o.map_by,
        oversubscribe,
        |h| hosts::is_local_name(h, &hostname),
        &hostname,
    )
    .map_err(|e| (e, USAGE_EXIT))
}

/// The TCP listener of the wire-up server, for ranks and daemons on other hosts:
/// `GPUMPI_WIREUP_ADDR` (an IP address, optionally `IP:PORT`), else the first interface that
/// `GPUMPI_NET_IFNAME` and `GPUMPI_NET_FAMILY` select (the network transport's rule), on a port
/// the kernel picks.
fn wireup_listener() -> Result<TcpListener, String> {
    use crate::transport::net::ifname::{self, Family};
    let addr = match config::get("GPUMPI_WIREUP_ADDR").filter(|v| !v.trim().is_empty()) {
        Some(v) => {
            let v = v.trim();
            let a = match v.parse::<IpAddr>() {
                Ok(ip) => SocketAddr::new(ip, 0),
                Err(_) => v.parse::<SocketAddr>().map_err(|_| {
                    format!("GPUMPI_WIREUP_ADDR={v:?} is not an IP address or IP:PORT")
                })?,
            };
            if a.ip().is_unspecified() {
                return Err(format!(
                    "GPUMPI_WIREUP_ADDR={v:?}: name the address the other hosts reach mpirun at"
                ));
            }
            a
        }
        None => {
            let all = crate::sys::socket::interfaces()
                .map_err(|e| format!("cannot list the network interfaces: {e}"))?;
            let fam = config::get("GPUMPI_NET_FAMILY").unwrap_or_default();
            let fam = Family::parse(&fam).unwrap_or(Family::Any);
            let spec = config::get("GPUMPI_NET_IFNAME").filter(|s| !s.trim().is_empty());
            let picked = ifname::select(&all, spec.as_deref(), fam);
            let names: Vec<String> = all
                .iter()
                .map(|a| format!("{} {}", a.name, a.addr))
                .collect();
            let a = picked.first().ok_or_else(|| {
                format!(
                    "no network interface for the wire-up of ranks on other hosts \
                     (GPUMPI_NET_IFNAME={}; interfaces: {}); set GPUMPI_WIREUP_ADDR",
                    spec.as_deref().unwrap_or("unset"),
                    names.join(", ")
                )
            })?;
            SocketAddr::new(a.addr, 0)
        }
    };
    TcpListener::bind(addr).map_err(|e| {
        format!("cannot listen on {addr} for the wire-up of ranks on other hosts: {e} (GPUMPI_WIREUP_ADDR)")
    })
}

/// Run a job; returns mpirun's exit code.
pub fn run(o: &Options) -> i32 {
    let oversubscribe = o.oversubscribe || config::get_bool("GPUMPI_OVERSUBSCRIBE");
    let placement = match plan(o, oversubscribe) {
        Ok(p) => p,
        Err((msg, code)) => {
            eprintln!("mpirun: {msg}");
            return code;
        }
    };
    for (k, _) in o
        .env
        .iter()
        .filter(|(k, v)| v.is_none() && std::env::var_os(k).is_none())
    {
        eprintln!("mpirun: warning: -x {k}: {k} is not set in mpirun's environment; not forwarded");
    }
    let secret = match random_bytes(32) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mpirun: cannot read /dev/urandom for the job secret: {e}");
            return 1;
        }
    };
    // The job id is public (directory names, process environments): its random part is drawn
    // apart from the secret.
    let tag = match random_bytes(4) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("mpirun: cannot read /dev/urandom for the job id: {e}");
            return 1;
        }
    };
    let remote: Vec<usize> = (0..placement.nodes.len())
        .filter(|&i| !placement.nodes[i].local)
        .collect();
    let tcp = if remote.is_empty() {
        None
    } else {
        match wireup_listener() {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("mpirun: {e}");
                return 1;
            }
        }
    };
    sweep_stale_jobs(&jobs_base());
    let job_id = format!("{}-{}", std::process::id(), wire::to_hex(&tag));
    let dir = match private_dir(&job_id) {
        Ok(d) => d,
        Err(e) => {
            eprintln!(
                "mpirun: cannot create the job directory under {:?}: {e}",
                std::env::temp_dir()
            );
            return 1;
        }
    };
    let cleanup = Cleanup {
        dir: dir.clone(),
        job_id: job_id.clone(),
    };
    let sock = dir.join("wireup.sock");
    let layout = Layout {
        node_of: placement.node_of.clone(),
        daemon_nodes: remote,
    };
    let server = match Server::start_with(&sock, tcp, layout, secret.clone()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mpirun: cannot start the wire-up server on {sock:?}: {e}");
            return 1;
        }
    };
    procs::install_signal_handlers();
    tracing::debug!(
        "mpirun: job {job_id}, {} ranks on {} nodes, server {sock:?} {:?}",
        placement.node_of.len(),
        placement.nodes.len(),
        server.tcp_addr()
    );
    let job = Job {
        o,
        placement: &placement,
        job_id: &job_id,
        sock: sock.to_string_lossy().into_owned(),
        tcp: server
            .tcp_addr()
            .map(|a| format!("{}{a}", super::stream::TCP_PREFIX)),
        secret: wire::to_hex(&secret),
    };
    let code = launch_and_wait(&job, &server);
    drop(server);
    drop(cleanup);
    code
}

/// The per-rank variables other MPI launchers set and programs read, e.g. to pick their GPU:
/// Open MPI's `OMPI_COMM_WORLD_*`, MPICH hydra's `MPI_LOCALRANKID`/`MPI_LOCALNRANKS`, and the
/// `LOCAL_RANK`/`LOCAL_WORLD_SIZE` of torchrun-style launchers, for rank `rank` of `n`, the
/// `local`-th of the `local_n` ranks on its node. The library itself reads none of them, and
/// none selects a bootstrap method (`Method::env`): detection stays on `GPUMPI_*`, `PMIX_*`
/// and `PMI_*`.
pub fn launch_env(
    rank: usize,
    n: usize,
    local: usize,
    local_n: usize,
) -> [(&'static str, String); 9] {
    let (r, n, l, ln) = (
        rank.to_string(),
        n.to_string(),
        local.to_string(),
        local_n.to_string(),
    );
    [
        ("OMPI_COMM_WORLD_RANK", r),
        ("OMPI_COMM_WORLD_SIZE", n),
        ("OMPI_COMM_WORLD_LOCAL_RANK", l.clone()),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", ln.clone()),
        ("OMPI_COMM_WORLD_NODE_RANK", l.clone()),
        ("MPI_LOCALRANKID", l.clone()),
        ("MPI_LOCALNRANKS", ln.clone()),
        ("LOCAL_RANK", l),
        ("LOCAL_WORLD_SIZE", ln),
    ]
}

/// Variables mpirun sets itself: never forwarded from its own environment to other hosts.
const LAUNCHER_VARS: &[&str] = &[
    "GPUMPI_APPNUM",
    "GPUMPI_BOOTSTRAP",
    "GPUMPI_JOB_ID",
    "GPUMPI_LOCAL_RANK",
    "GPUMPI_LOCAL_SIZE",
    "GPUMPI_NODE_ID",
    "GPUMPI_RANK",
    "GPUMPI_SECRET",
    "GPUMPI_SERVER",
    "GPUMPI_SIZE",
    "GPUMPI_UNIVERSE_SIZE",
];

/// What every rank's start needs to know about the job.
struct Job<'a> {
    o: &'a Options,
    placement: &'a Placement,
    job_id: &'a str,
    /// The wire-up server's Unix socket and, for other hosts, its `tcp://` address.
    sock: String,
    tcp: Option<String>,
    secret: String,
}

impl Job<'_> {
    fn host(&self, rank: usize) -> &str {
        &self.placement.nodes[self.placement.node_of[rank]].name
    }

    fn is_local(&self, rank: usize) -> bool {
        self.placement.nodes[self.placement.node_of[rank]].local
    }

    /// `rank 2 (pid 1234)` on this machine, `rank 2 (pid 1234 on n1)` on another host.
    fn who(&self, rank: usize, pid: Option<i32>) -> String {
        match (self.is_local(rank), pid) {
            (true, Some(p)) => format!("rank {rank} (pid {p})"),
            (true, None) => format!("rank {rank}"),
            (false, Some(p)) => format!("rank {rank} (pid {p} on {})", self.host(rank)),
            (false, None) => format!("rank {rank} (on {})", self.host(rank)),
        }
    }

    /// The variables set in `rank`'s environment on top of what it inherits. Ranks on other
    /// hosts also get mpirun's own `GPUMPI_*` settings (several must be the same on every
    /// rank), as Open MPI forwards its `OMPI_MCA_*` variables; `-x VAR` is resolved here.
    /// Later entries win: an explicit `-x` overrides a launch variable, never a `GPUMPI_*`
    /// variable of the launcher.
    fn rank_env(&self, rank: usize) -> Vec<(String, String)> {
        let p = self.placement;
        let n = p.node_of.len();
        let (local, local_n) = p.local(rank);
        let remote = !self.is_local(rank);
        let mut env: Vec<(String, String)> = Vec::new();
        if remote {
            for (k, v) in std::env::vars_os() {
                if let (Some(k), Some(v)) = (k.to_str(), v.to_str()) {
                    if k.starts_with("GPUMPI_") && !LAUNCHER_VARS.contains(&k) {
                        env.push((k.to_string(), v.to_string()));
                    }
                }
            }
        }
        env.extend(
            launch_env(rank, n, local, local_n)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v)),
        );
        if p.nodes.len() > 1 {
            env.push(("GPUMPI_NODE_ID".into(), self.host(rank).to_string()));
        }
        for (k, v) in &self.o.env {
            match v {
                Some(v) => env.push((k.clone(), v.clone())),
                None => {
                    if let Ok(v) = std::env::var(k) {
                        env.push((k.clone(), v));
                    }
                }
            }
        }
        let server = match (remote, &self.tcp) {
            (true, Some(t)) => t.clone(),
            _ => self.sock.clone(),
        };
        for (k, v) in [
            ("GPUMPI_JOB_ID", self.job_id.to_string()),
            ("GPUMPI_RANK", rank.to_string()),
            ("GPUMPI_SIZE", n.to_string()),
            ("GPUMPI_LOCAL_RANK", local.to_string()),
            ("GPUMPI_LOCAL_SIZE", local_n.to_string()),
            ("GPUMPI_UNIVERSE_SIZE", n.to_string()),
            ("GPUMPI_APPNUM", "0".to_string()),
            ("GPUMPI_SERVER", server),
        ] {
            env.push((k.to_string(), v));
        }
        // A rank on another host gets the secret from its node daemon, which has it from the
        // launch agent's stdin: the `Launch` message over TCP does not carry it.
        if !remote {
            env.push(("GPUMPI_SECRET".into(), self.secret.clone()));
        }
        env
    }
}

fn launch_and_wait(job: &Job, server: &Server) -> i32 {
    let o = job.o;
    let p = job.placement;
    let n = p.node_of.len();
    let mut status: Vec<Option<ExitStatus>> = vec![None; n];
    let mut pids: Vec<Option<i32>> = vec![None; n];
    let mut locals: Vec<Proc> = Vec::new();
    let mut outputs = Vec::new();
    let (tx, rx) = channel::<NodeEvent>();
    let mut remotes: Vec<RemoteNode> = Vec::new();
    let start = Instant::now();
    let mut stop: Option<Stop> = None;
    // stdin goes to rank 0 only, and only when it runs here and stdin is not a terminal (a
    // rank in its own process group reading the terminal would be stopped by SIGTTIN).
    // SAFETY: isatty only inspects file descriptor 0.
    let stdin_tty = unsafe { libc::isatty(0) } == 1;
    'local: for node in p.nodes.iter().filter(|nd| nd.local) {
        for (local, &r) in node.ranks.iter().enumerate() {
            let env = job.rank_env(r);
            let bind = procs::bind_set(node.ranks.len(), local);
            match procs::spawn(&o.program, &o.args, &env, r == 0 && !stdin_tty, bind) {
                Ok(mut child) => {
                    let pid = child.id() as i32;
                    let (so, se) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
                    outputs.push(forward(so, r, false, o.tag_output));
                    outputs.push(forward(se, r, true, o.tag_output));
                    pids[r] = Some(pid);
                    locals.push(Proc {
                        rank: r,
                        child,
                        pid,
                        status: None,
                    });
                }
                Err(e) => {
                    stop = Stop::failed(
                        format!("cannot start rank {r}: {:?}: {e}", o.program),
                        procs::spawn_error_code(&e),
                    );
                    break 'local;
                }
            }
        }
    }
    let agent = super::remote::agent_words(o.launch_agent.as_deref());
    let exe = std::env::current_exe()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "mpirun".into());
    if stop.is_none() {
        if let Some(tcp) = &job.tcp {
            for (i, node) in p.nodes.iter().enumerate().filter(|(_, nd)| !nd.local) {
                let line = format!("{tcp} {i} {}\n", job.secret);
                match RemoteNode::start(
                    &agent,
                    i,
                    &node.name,
                    node.ranks.clone(),
                    &exe,
                    &line,
                    tx.clone(),
                ) {
                    Ok(rn) => remotes.push(rn),
                    Err(e) => {
                        stop = Stop::failed(
                            format!(
                                "host {}: cannot run the launch agent {:?}: {e}",
                                node.name,
                                agent.join(" ")
                            ),
                            1,
                        );
                        break;
                    }
                }
            }
        }
    }
    let launch_timeout =
        Duration::from_secs(config::get_usize("GPUMPI_LAUNCH_TIMEOUT").max(1) as u64);
    let cwd = std::env::current_dir()
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_default();

    let mut lost: Vec<(usize, Instant)> = Vec::new();
    // A rank that exited: its failure, or a clean exit of a rank that never finalized.
    let exited = |r: usize, st: ExitStatus, pid: Option<i32>| -> Option<Stop> {
        if let Some((msg, code)) = describe_exit(&job.who(r, pid), st) {
            return Stop::failed(msg, code);
        }
        match server.rank_state(r) {
            RankState::Connected | RankState::Lost => Stop::failed(
                format!(
                    "{} exited without finalizing; stopping the job",
                    job.who(r, pid)
                ),
                1,
            ),
            _ => None,
        }
    };
    while stop.is_none() {
        let sig = procs::take_signal();
        if sig != 0 {
            stop = Some(Stop {
                msg: format!(
                    "received signal {sig} ({}); forwarding it to the ranks and stopping the job",
                    signal_name(sig)
                ),
                code: 128 + sig,
                first_signal: sig,
            });
            break;
        }
        if let Some(t) = o.timeout {
            if start.elapsed() >= t {
                stop = Stop::failed(
                    format!(
                        "the job ran longer than --timeout {} s; stopping it",
                        t.as_secs_f64()
                    ),
                    TIMEOUT_EXIT,
                );
                break;
            }
        }
        match server.events().recv_timeout(Duration::from_millis(10)) {
            Ok(Event::Abort { rank, code, msg }) => {
                stop = Stop::failed(
                    format!("rank {rank} called MPI_Abort(MPI_COMM_WORLD, {code}): {msg}"),
                    if code == 0 { 1 } else { code },
                );
                break;
            }
            Ok(Event::Lost { rank }) => lost.push((rank, Instant::now())),
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {}
        }
        // Daemons that connected back get their node's launch.
        while let Ok((node, conn)) = server.daemons().try_recv() {
            match remotes.iter_mut().find(|rn| rn.index == node) {
                Some(rn) if !rn.attached() => {
                    let launch = wire::Msg::Launch {
                        program: o.program.clone(),
                        args: o.args.clone(),
                        cwd: cwd.clone(),
                        ranks: rn
                            .ranks
                            .iter()
                            .map(|&r| (r as u32, job.rank_env(r)))
                            .collect(),
                    };
                    if let Err(e) = rn.attach(conn, &launch, o.tag_output, tx.clone()) {
                        stop = Stop::failed(
                            format!(
                                "host {}: cannot send the launch to its daemon: {e}",
                                rn.name
                            ),
                            1,
                        );
                    }
                }
                _ => conn.shutdown(), // a second daemon for one node
            }
        }
        while stop.is_none() {
            let Ok(ev) = rx.try_recv() else { break };
            match ev {
                NodeEvent::Started { rank, pid } => pids[rank] = Some(pid),
                NodeEvent::SpawnFailed { rank, code, msg } => {
                    stop = Stop::failed(
                        format!("cannot start rank {rank} on {}: {msg}", job.host(rank)),
                        code,
                    )
                }
                NodeEvent::Exited { rank, status: st } => {
                    status[rank] = Some(st);
                    stop = exited(rank, st, pids[rank]);
                }
                NodeEvent::Lost { node, why } => {
                    if p.nodes[node].ranks.iter().any(|&r| status[r].is_none()) {
                        stop = Stop::failed(
                            format!(
                                "lost the connection to the daemon on {} ({why}); stopping the job",
                                p.nodes[node].name
                            ),
                            1,
                        );
                    }
                }
                NodeEvent::AgentExited {
                    node,
                    status: st,
                    last,
                } => {
                    let attached = remotes.iter().any(|rn| rn.index == node && rn.attached());
                    let failed = st.is_none_or(|s| !s.success());
                    if !attached && failed {
                        let how = match st {
                            Some(s) => match (s.code(), s.signal()) {
                                (Some(c), _) => format!("exited with code {c}"),
                                (_, Some(g)) => {
                                    format!("was killed by signal {g} ({})", signal_name(g))
                                }
                                _ => "failed".into(),
                            },
                            None => "could not be waited for".into(),
                        };
                        let last = if last.is_empty() {
                            String::new()
                        } else {
                            format!(": {last}")
                        };
                        stop = Stop::failed(
                            format!(
                                "host {}: the launch agent \"{} {} {exe} {}\" {how}{last}",
                                p.nodes[node].name,
                                agent.join(" "),
                                p.nodes[node].name,
                                super::daemon::DAEMON_ARG
                            ),
                            1,
                        );
                    }
                }
            }
        }
        if stop.is_some() {
            break;
        }
        if start.elapsed() >= launch_timeout {
            if let Some(rn) = remotes.iter().find(|rn| !rn.attached()) {
                stop = Stop::failed(
                    format!(
                        "host {}: its daemon did not connect back within {} s \
                         (GPUMPI_LAUNCH_TIMEOUT); is mpirun installed at {exe} there, and can \
                         it reach {}?",
                        rn.name,
                        launch_timeout.as_secs(),
                        job.tcp.as_deref().unwrap_or("")
                    ),
                    1,
                );
                break;
            }
        }
        procs::reap(&mut locals);
        for l in &locals {
            if let (Some(st), None) = (l.status, status[l.rank]) {
                status[l.rank] = Some(st);
                if stop.is_none() {
                    stop = exited(l.rank, st, Some(l.pid));
                }
            }
        }
        if stop.is_some() {
            break;
        }
        // A dropped connection whose process is still alive after a grace period is a dead
        // rank (a rank on another host gets longer: its exit travels through its daemon).
        let grace = |r: usize| {
            if job.is_local(r) {
                LOST_GRACE
            } else {
                5 * LOST_GRACE
            }
        };
        if let Some(&(r, _)) = lost
            .iter()
            .find(|(r, t)| status[*r].is_none() && t.elapsed() >= grace(*r))
        {
            stop = Stop::failed(
                format!(
                    "{} closed its connection to mpirun without finalizing; stopping the job",
                    job.who(r, pids[r])
                ),
                1,
            );
            break;
        }
        if status.iter().all(Option::is_some) {
            break;
        }
    }

    let code = match stop {
        None => 0,
        Some(Stop {
            msg,
            code,
            first_signal,
        }) => {
            eprintln!("mpirun: {msg}");
            for rn in remotes.iter_mut() {
                rn.kill(first_signal);
            }
            procs::terminate_all(&mut locals, first_signal);
            // The daemons SIGKILL after their grace period and report every exit.
            let mut gone: Vec<usize> = Vec::new();
            let t = Instant::now();
            while t.elapsed() < REMOTE_KILL_WAIT
                && remotes.iter().any(|rn| {
                    rn.attached()
                        && !gone.contains(&rn.index)
                        && rn.ranks.iter().any(|&r| status[r].is_none())
                })
            {
                match rx.recv_timeout(Duration::from_millis(10)) {
                    Ok(NodeEvent::Exited { rank, status: st }) => status[rank] = Some(st),
                    Ok(NodeEvent::Lost { node, .. }) => gone.push(node),
                    _ => {}
                }
            }
            code
        }
    };
    // Closing a daemon's connection ends it (and anything of the job left on its host).
    for rn in remotes.iter_mut() {
        rn.close(Duration::from_secs(2));
    }
    // Output threads end when the last writer of each pipe is gone; do not wait
    // forever for a daemonized grandchild that kept a pipe open.
    let deadline = Instant::now() + Duration::from_secs(1);
    for h in outputs {
        while !h.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if h.is_finished() {
            let _ = h.join();
        }
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Parsed, String> {
        parse_args(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    fn run_opts(s: &str) -> Options {
        match p(s).unwrap() {
            Parsed::Run(o) => o,
            x => panic!("{x:?}"),
        }
    }

    #[test]
    fn parses_the_documented_forms() {
        let o =
            run_opts("-n 4 --oversubscribe -x A=1 -x B --tag-output --timeout 2.5 prog -n 3 --x");
        assert_eq!(o.n, Some(4));
        assert!(o.oversubscribe && o.tag_output);
        assert_eq!(
            o.env,
            vec![("A".into(), Some("1".into())), ("B".into(), None)]
        );
        assert_eq!(o.timeout, Some(Duration::from_millis(2500)));
        assert_eq!(o.program, "prog");
        assert_eq!(o.args, vec!["-n", "3", "--x"]);
        assert_eq!(run_opts("-np 2 a").n, Some(2));
        assert_eq!(run_opts("--np=3 a").n, Some(3));
        let o = run_opts("-H a:2,b --host c:1 --map-by node --launch-agent myagent prog");
        assert_eq!(o.n, None);
        assert_eq!(
            o.hosts
                .iter()
                .map(|h| (h.name.as_str(), h.slots))
                .collect::<Vec<_>>(),
            [("a", 2), ("b", 1), ("c", 1)]
        );
        assert_eq!(o.map_by, MapBy::Node);
        assert_eq!(o.launch_agent.as_deref(), Some("myagent"));
        let o = run_opts("--hostfile hf -np 3 --map-by=slot prog");
        assert_eq!(
            (o.hostfile.as_deref(), o.n, o.map_by),
            (Some("hf"), Some(3), MapBy::Slot)
        );
        assert_eq!(run_opts("-f hf prog").hostfile.as_deref(), Some("hf"));
        assert_eq!(
            run_opts("--timeout=1 -n 1 a").timeout,
            Some(Duration::from_secs(1))
        );
        let o = run_opts("-n 2 -- -weird arg");
        assert_eq!(
            (o.program.as_str(), o.args.clone()),
            ("-weird", vec!["arg".to_string()])
        );
        assert_eq!(
            run_opts("-x X=a=b -n 1 a").env,
            vec![("X".into(), Some("a=b".into()))]
        );
        assert_eq!(p("-h").unwrap(), Parsed::Help);
        assert_eq!(p("-n 2 --help prog").unwrap(), Parsed::Help);
        assert_eq!(p("--version").unwrap(), Parsed::Version);
        assert!(!run_opts("-n 1 a").tag_output);
    }

    #[test]
    fn rejects_bad_arguments_with_a_reason() {
        for (args, want) in [
            ("prog", "missing"),
            ("-n", "needs a value"),
            ("-n 0 a", "positive"),
            ("-n x a", "positive"),
            ("-n 2", "no program"),
            ("-n 2 --", "no program"),
            ("-n 2 --bogus a", "unknown option"),
            ("-n 2 --timeout 0 a", "positive"),
            ("-n 2 --timeout nan a", "positive"),
            ("-n 2 --timeout abc a", "not a number"),
            ("-n 2 -x 1=2=3 a", "valid environment"),
            ("-n 2 -x =3 a", "valid environment"),
            ("-H a:0 a", "positive"),
            ("--host a,,b a", "empty"),
            ("--map-by socket a", "slot or node"),
            ("-H a --hostfile f a", "together"),
        ] {
            let e = p(args).unwrap_err();
            assert!(e.contains(want), "{args:?}: {e}");
        }
    }

    #[test]
    fn launch_variables_select_no_bootstrap() {
        use crate::bootstrap::{choose, Method, METHODS};
        let env = launch_env(2, 5, 1, 3);
        let names: Vec<&str> = env.iter().map(|(k, _)| *k).collect();
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("OMPI_COMM_WORLD_RANK"), Some("2"));
        assert_eq!(get("OMPI_COMM_WORLD_SIZE"), Some("5"));
        assert_eq!(get("OMPI_COMM_WORLD_LOCAL_RANK"), Some("1"));
        assert_eq!(get("MPI_LOCALNRANKS"), Some("3"));
        assert_eq!(get("LOCAL_WORLD_SIZE"), Some("3"));
        for m in METHODS {
            for v in m.env() {
                assert!(!names.contains(v), "{v} would select {m:?}");
            }
        }
        // Alone, they leave a singleton; with mpirun's own variables, mpirun is chosen.
        let only = |extra: &'static [&'static str]| {
            let names = names.clone();
            move |m: Method| m.detect_in(|v| names.contains(&v) || extra.contains(&v))
        };
        assert_eq!(choose(None, only(&[])).unwrap().0, Method::Singleton);
        let mpirun = crate::bootstrap::mpirun::ENV;
        assert_eq!(choose(None, only(mpirun)).unwrap().0, Method::Mpirun);
    }

    #[test]
    fn exit_descriptions() {
        assert_eq!(
            describe_exit("rank 1 (pid 5)", ExitStatus::from_raw(0)),
            None
        );
        let (m, c) = describe_exit("rank 2 (pid 1234)", ExitStatus::from_raw(9)).unwrap();
        assert_eq!(
            m,
            "rank 2 (pid 1234) was killed by signal 9 (SIGKILL); stopping the job"
        );
        assert_eq!(c, 137);
        let (m, c) = describe_exit("rank 0 (pid 7 on n1)", ExitStatus::from_raw(3 << 8)).unwrap();
        assert!(m.starts_with("rank 0 (pid 7 on n1) exited"), "{m}");
        assert!(m.contains("exited with code 3"));
        assert_eq!(c, 3);
    }

    #[test]
    fn shm_cleanup_only_touches_the_job() {
        let id = format!(
            "t{}-{}",
            std::process::id(),
            wire::to_hex(&random_bytes(4).unwrap())
        );
        let mine = format!("/dev/shm/gpumpi-{id}-x");
        let other = format!("/dev/shm/gpumpi-{id}0-x");
        std::fs::write(&mine, b"1").unwrap();
        std::fs::write(&other, b"1").unwrap();
        assert_eq!(remove_shm_files(&id), 1);
        assert!(!Path::new(&mine).exists());
        assert!(Path::new(&other).exists());
        std::fs::remove_file(other).unwrap();
    }
}
