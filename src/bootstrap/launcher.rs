//! The logic of `mpirun` (the binary in `src/bin/mpirun.rs` only calls [`main`]).
//!
//! `mpirun -n N [--oversubscribe] [-x VAR[=value]]... [--tag-output] [--timeout S] [--] program [args...]`
//! starts N ranks of `program` on this machine with an embedded wire-up
//! server ([`super::server`]) listening on a Unix socket in a private
//! directory (mode 0700, under `$TMPDIR`), protected by a per-job random
//! secret. Each rank gets (see `docs/ENV.md`): `GPUMPI_JOB_ID`, `GPUMPI_RANK`,
//! `GPUMPI_SIZE`, `GPUMPI_LOCAL_RANK`, `GPUMPI_LOCAL_SIZE`,
//! `GPUMPI_UNIVERSE_SIZE`, `GPUMPI_APPNUM`, `GPUMPI_SERVER`, `GPUMPI_SECRET`, and the
//! variables other launchers set that programs read ([`launch_env`]: `OMPI_COMM_WORLD_*`,
//! `MPI_LOCALRANKID`, `LOCAL_RANK`, ...).
//!
//! With `GPUMPI_BIND=core` (the default) rank i is bound to the i-th CPU of mpirun's
//! affinity mask when N >= 2 equals the number of those CPUs (see [`bind_set`]).
//!
//! Each rank runs in its own process group with `PR_SET_PDEATHSIG` = SIGKILL,
//! so it dies with mpirun. Output is forwarded line by line. The first
//! failure (non-zero exit, death by signal, abort through the bootstrap, a
//! rank that drops its connection without finalizing, the time limit, a
//! signal to mpirun) stops the job: SIGTERM to every rank's process group,
//! SIGKILL 0.5 s later. At exit the private directory and every
//! `/dev/shm/gpumpi-<job_id>-*` file are removed; an mpirun that was killed cannot do that,
//! so every mpirun first sweeps what killed jobs of its user left ([`sweep_stale_jobs`]).

use super::random_bytes;
use super::server::{Event, RankState, Server};
use super::wire;
use crate::config;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

/// Time between SIGTERM and SIGKILL when the job is stopped.
const KILL_GRACE: Duration = Duration::from_millis(500);
/// How long a rank that dropped its connection may take to be reaped before it is reported as lost.
const LOST_GRACE: Duration = Duration::from_millis(300);
/// Longest piece of output forwarded as one line.
const MAX_LINE: usize = 1 << 20;
/// Exit code on `--timeout`, like timeout(1).
pub const TIMEOUT_EXIT: i32 = 124;
/// Exit code of a usage error: bad options, or more ranks than cores without `--oversubscribe`.
pub const USAGE_EXIT: i32 = 2;

pub const USAGE: &str = "\
usage: mpirun -n N [options] [--] program [args...]

options:
  -n, -np, --np N     number of ranks to start (required)
  --oversubscribe     allow more ranks than cores (also GPUMPI_OVERSUBSCRIBE=1)
  -x VAR[=value]      set VAR=value in every rank, or forward VAR from mpirun's environment
  --tag-output        prefix each output line with [1,rank]<stdout>: or [1,rank]<stderr>:
  --timeout S         stop the job after S seconds (exit code 124)
  -h, --help          this help
  -V, --version       print the version
";

#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub n: usize,
    pub oversubscribe: bool,
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
    let mut n = None;
    let mut o = Options {
        n: 0,
        oversubscribe: false,
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
                n = Some(k);
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
    o.n = n.ok_or("the number of ranks is missing: use -n N")?;
    Ok(Parsed::Run(o))
}

/// Entry point of the binary: returns the exit code.
pub fn main(args: Vec<String>) -> i32 {
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

static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALLED.store(sig, Ordering::SeqCst);
}

fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe;
        // the sigaction struct is fully initialized (zeroed, then filled).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
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

struct Rank {
    child: Child,
    pid: i32,
    status: Option<ExitStatus>,
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

fn describe_exit(rank: usize, pid: i32, st: ExitStatus) -> Option<(String, i32)> {
    if let Some(sig) = st.signal() {
        return Some((
            format!(
                "rank {rank} (pid {pid}) was killed by signal {sig} ({}); stopping the job",
                signal_name(sig)
            ),
            128 + sig,
        ));
    }
    match st.code() {
        Some(0) | None => None,
        Some(c) => Some((
            format!("rank {rank} (pid {pid}) exited with code {c}; stopping the job"),
            c,
        )),
    }
}

fn forward(
    src: impl Read + Send + 'static,
    rank: usize,
    stderr: bool,
    tag: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let prefix = if tag {
            format!("[1,{rank}]<{}>:", if stderr { "stderr" } else { "stdout" })
        } else {
            String::new()
        };
        let mut r = BufReader::with_capacity(64 << 10, src);
        let mut line = Vec::with_capacity(256);
        loop {
            line.clear();
            // A "line" longer than MAX_LINE (binary output) is forwarded in pieces.
            match (&mut r).take(MAX_LINE as u64).read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            let mut out = Vec::with_capacity(prefix.len() + line.len());
            out.extend_from_slice(prefix.as_bytes());
            out.extend_from_slice(&line);
            // One write_all under the lock: lines of different ranks never interleave.
            let ok = if stderr {
                let mut e = std::io::stderr().lock();
                e.write_all(&out).and_then(|_| e.flush())
            } else {
                let mut o = std::io::stdout().lock();
                o.write_all(&out).and_then(|_| o.flush())
            };
            if ok.is_err() {
                // Our output is gone (closed pipe): keep draining so ranks do not block.
                continue;
            }
        }
    })
}

fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Run a job; returns mpirun's exit code.
pub fn run(o: &Options) -> i32 {
    let oversubscribe = o.oversubscribe || config::get_bool("GPUMPI_OVERSUBSCRIBE");
    let ncores = cores();
    if o.n > ncores && !oversubscribe {
        eprintln!(
            "mpirun: there are not enough slots available in the system to satisfy the {} slots \
             requested by the application {:?}: this machine has {ncores} cores.\n\
             Either request fewer ranks, or use --oversubscribe (or GPUMPI_OVERSUBSCRIBE=1) \
             to run more ranks than cores.",
            o.n, o.program
        );
        return USAGE_EXIT;
    }
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
    let server = match Server::start(&sock, o.n, secret.clone()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mpirun: cannot start the wire-up server on {sock:?}: {e}");
            return 1;
        }
    };
    install_signal_handlers();
    tracing::debug!("mpirun: job {job_id}, {} ranks, server {sock:?}", o.n);

    let code = launch_and_wait(o, &job_id, &sock, &wire::to_hex(&secret), &server);
    drop(server);
    drop(cleanup);
    code
}

/// The CPUs of mpirun's affinity mask (empty if it cannot be read).
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
    let mine = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        set
    };
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET reads the set for an index below its capacity.
    (0..max)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &mine) })
        .collect()
}

/// The CPU set of `rank` under `GPUMPI_BIND` (see `docs/ENV.md`): with `core` (the default), the
/// rank-th CPU of mpirun's own affinity mask, when the job has 2 ranks or more and exactly as many
/// ranks as those CPUs. A rank that waits on a peer then never shares a core with it while another
/// core is idle (spinning there would only delay the peer). Smaller jobs stay unbound: binding
/// them to the first CPUs would pile concurrent jobs onto those while the others idle.
fn bind_set(n: usize, rank: usize) -> Option<libc::cpu_set_t> {
    let mode = config::get("GPUMPI_BIND").unwrap_or_default();
    match mode.to_ascii_lowercase().as_str() {
        "core" => {}
        "none" | "off" | "0" => return None,
        _ => {
            if rank == 0 {
                eprintln!(
                    "mpirun: warning: GPUMPI_BIND={mode:?}: not core or none; ranks are not bound"
                );
            }
            return None;
        }
    }
    if n < 2 {
        return None;
    }
    let allowed = allowed_cpus();
    if n != allowed.len() {
        return None;
    }
    // SAFETY: as above; CPU_SET writes an index below the set's capacity.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(allowed[rank], &mut set);
        Some(set)
    }
}

/// The per-rank variables other MPI launchers set and programs read, e.g. to pick their GPU:
/// Open MPI's `OMPI_COMM_WORLD_*`, MPICH hydra's `MPI_LOCALRANKID`/`MPI_LOCALNRANKS`, and the
/// `LOCAL_RANK`/`LOCAL_WORLD_SIZE` of torchrun-style launchers. Every rank runs on this node,
/// so local rank = node rank = rank. The library itself reads none of them, and none selects a
/// bootstrap method (`Method::env`): detection stays on `GPUMPI_*`, `PMIX_*` and `PMI_*`.
pub fn launch_env(rank: usize, n: usize) -> [(&'static str, String); 9] {
    let (r, n) = (rank.to_string(), n.to_string());
    [
        ("OMPI_COMM_WORLD_RANK", r.clone()),
        ("OMPI_COMM_WORLD_SIZE", n.clone()),
        ("OMPI_COMM_WORLD_LOCAL_RANK", r.clone()),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", n.clone()),
        ("OMPI_COMM_WORLD_NODE_RANK", r.clone()),
        ("MPI_LOCALRANKID", r.clone()),
        ("MPI_LOCALNRANKS", n.clone()),
        ("LOCAL_RANK", r),
        ("LOCAL_WORLD_SIZE", n),
    ]
}

fn spawn_rank(
    o: &Options,
    rank: usize,
    job_id: &str,
    sock: &Path,
    secret: &str,
) -> std::io::Result<Child> {
    let mut cmd = Command::new(&o.program);
    cmd.args(&o.args);
    // Set first, so that an explicit `-x` of the same name wins.
    cmd.envs(launch_env(rank, o.n));
    // `-x VAR` forwards: the child inherits mpirun's environment, so only an explicit value
    // needs setting (an unset forwarded variable was warned about in `run`).
    for (k, v) in &o.env {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    cmd.env("GPUMPI_JOB_ID", job_id)
        .env("GPUMPI_RANK", rank.to_string())
        .env("GPUMPI_SIZE", o.n.to_string())
        .env("GPUMPI_LOCAL_RANK", rank.to_string())
        .env("GPUMPI_LOCAL_SIZE", o.n.to_string())
        .env("GPUMPI_UNIVERSE_SIZE", o.n.to_string())
        .env("GPUMPI_APPNUM", "0")
        .env("GPUMPI_SERVER", sock)
        .env("GPUMPI_SECRET", secret)
        .env_remove("GPUMPI_BOOTSTRAP");
    // stdin goes to rank 0 only, and only when it is not a terminal (a rank in its own
    // process group reading the terminal would be stopped by SIGTTIN).
    // SAFETY: isatty only inspects file descriptor 0.
    let stdin_tty = unsafe { libc::isatty(0) } == 1;
    cmd.stdin(if rank == 0 && !stdin_tty {
        Stdio::inherit()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let bind = bind_set(o.n, rank);
    // SAFETY: getpid is always safe.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the child between fork and exec and only calls
    // async-signal-safe functions (setpgid, sched_setaffinity, prctl, getppid, _exit).
    unsafe {
        cmd.pre_exec(move || {
            libc::setpgid(0, 0);
            if let Some(set) = &bind {
                // A failure only leaves the rank unbound.
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set);
            }
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            // mpirun may have died before prctl took effect.
            if libc::getppid() != parent {
                libc::_exit(137);
            }
            Ok(())
        });
    }
    cmd.spawn()
}

fn launch_and_wait(o: &Options, job_id: &str, sock: &Path, secret: &str, server: &Server) -> i32 {
    let mut ranks: Vec<Rank> = Vec::with_capacity(o.n);
    let mut outputs = Vec::new();
    let start = Instant::now();
    let mut stop: Option<Stop> = None;
    for r in 0..o.n {
        match spawn_rank(o, r, job_id, sock, secret) {
            Ok(mut child) => {
                let pid = child.id() as i32;
                outputs.push(forward(
                    child.stdout.take().unwrap(),
                    r,
                    false,
                    o.tag_output,
                ));
                outputs.push(forward(child.stderr.take().unwrap(), r, true, o.tag_output));
                ranks.push(Rank {
                    child,
                    pid,
                    status: None,
                });
            }
            Err(e) => {
                let code = if e.kind() == std::io::ErrorKind::NotFound {
                    127
                } else {
                    126
                };
                stop = Stop::failed(format!("cannot start rank {r}: {:?}: {e}", o.program), code);
                break;
            }
        }
    }

    let mut lost: Vec<(usize, Instant)> = Vec::new();
    while stop.is_none() {
        let sig = SIGNALLED.swap(0, Ordering::SeqCst);
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
        // Reap.
        for (r, rk) in ranks.iter_mut().enumerate() {
            if rk.status.is_some() {
                continue;
            }
            if let Ok(Some(st)) = rk.child.try_wait() {
                rk.status = Some(st);
                if let Some((msg, code)) = describe_exit(r, rk.pid, st) {
                    stop = Stop::failed(msg, code);
                    break;
                }
                if server.rank_state(r) == RankState::Connected
                    || server.rank_state(r) == RankState::Lost
                {
                    stop = Stop::failed(
                        format!(
                            "rank {r} (pid {}) exited without finalizing; stopping the job",
                            rk.pid
                        ),
                        1,
                    );
                    break;
                }
            }
        }
        if stop.is_some() {
            break;
        }
        // A dropped connection whose process is still alive after a grace period is a dead rank.
        if let Some(&(r, _)) = lost
            .iter()
            .find(|(r, t)| ranks[*r].status.is_none() && t.elapsed() >= LOST_GRACE)
        {
            stop = Stop::failed(
                format!(
                    "rank {r} (pid {}) closed its connection to mpirun without finalizing; stopping the job",
                    ranks[r].pid
                ),
                1,
            );
            break;
        }
        if ranks.iter().all(|r| r.status.is_some()) {
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
            terminate_all(&mut ranks, first_signal);
            code
        }
    };
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

/// `first` (SIGTERM, or the signal mpirun received) to every live rank's process group,
/// SIGKILL after [`KILL_GRACE`], reap all.
fn terminate_all(ranks: &mut [Rank], first: i32) {
    let signal_live = |ranks: &mut [Rank], sig: i32| {
        for rk in ranks.iter_mut() {
            if rk.status.is_none() {
                // SAFETY: plain kill(2) on the process group this rank leads; the rank is not
                // reaped yet, so the group id cannot have been reused.
                unsafe {
                    libc::kill(-rk.pid, sig);
                    libc::kill(rk.pid, sig); // in case setpgid had not run yet
                }
            }
        }
    };
    let reap = |ranks: &mut [Rank]| {
        for rk in ranks.iter_mut() {
            if rk.status.is_none() {
                if let Ok(Some(st)) = rk.child.try_wait() {
                    rk.status = Some(st);
                }
            }
        }
        ranks.iter().all(|r| r.status.is_some())
    };
    signal_live(ranks, first);
    let t = Instant::now();
    while !reap(ranks) && t.elapsed() < KILL_GRACE {
        std::thread::sleep(Duration::from_millis(5));
    }
    signal_live(ranks, libc::SIGKILL);
    for rk in ranks.iter_mut() {
        if rk.status.is_none() {
            rk.status = rk.child.wait().ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Parsed, String> {
        parse_args(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn binding_only_when_the_job_fills_the_cpus() {
        if std::env::var_os("GPUMPI_BIND").is_some() {
            return; // the default is what is tested
        }
        let cpus = allowed_cpus().len();
        assert!(bind_set(1, 0).is_none(), "a single rank stays unbound");
        assert!(
            bind_set(cpus + 1, 0).is_none(),
            "an oversubscribed job stays unbound"
        );
        if cpus >= 3 {
            assert!(
                bind_set(cpus - 1, 0).is_none(),
                "a smaller job stays unbound"
            );
        }
        if cpus >= 2 {
            for r in 0..cpus {
                let set = bind_set(cpus, r).expect("a job filling the CPUs is bound");
                // SAFETY: CPU_COUNT reads the set.
                assert_eq!(unsafe { libc::CPU_COUNT(&set) }, 1, "one CPU per rank");
            }
        }
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
        assert_eq!(o.n, 4);
        assert!(o.oversubscribe && o.tag_output);
        assert_eq!(
            o.env,
            vec![("A".into(), Some("1".into())), ("B".into(), None)]
        );
        assert_eq!(o.timeout, Some(Duration::from_millis(2500)));
        assert_eq!(o.program, "prog");
        assert_eq!(o.args, vec!["-n", "3", "--x"]);
        assert_eq!(run_opts("-np 2 a").n, 2);
        assert_eq!(run_opts("--np=3 a").n, 3);
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
        ] {
            let e = p(args).unwrap_err();
            assert!(e.contains(want), "{args:?}: {e}");
        }
    }

    #[test]
    fn launch_variables_select_no_bootstrap() {
        use crate::bootstrap::{choose, Method, METHODS};
        let env = launch_env(2, 5);
        let names: Vec<&str> = env.iter().map(|(k, _)| *k).collect();
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("OMPI_COMM_WORLD_LOCAL_RANK"), Some("2"));
        assert_eq!(get("MPI_LOCALNRANKS"), Some("5"));
        assert_eq!(get("LOCAL_WORLD_SIZE"), Some("5"));
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
        assert_eq!(describe_exit(1, 5, ExitStatus::from_raw(0)), None);
        let (m, c) = describe_exit(2, 1234, ExitStatus::from_raw(9)).unwrap();
        assert_eq!(
            m,
            "rank 2 (pid 1234) was killed by signal 9 (SIGKILL); stopping the job"
        );
        assert_eq!(c, 137);
        let (m, c) = describe_exit(0, 7, ExitStatus::from_raw(3 << 8)).unwrap();
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
