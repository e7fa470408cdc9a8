//! Rank processes, shared by `mpirun` (ranks on its own host) and the node daemon (ranks on
//! another host): starting a rank in its own process group bound to its parent's life,
//! splitting its output into whole lines, stopping a set of ranks (a first signal, SIGKILL
//! after a grace period), CPU binding, and the signal flag both install.

use crate::config;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// Time between the first signal and SIGKILL when ranks are stopped.
pub const KILL_GRACE: Duration = Duration::from_millis(500);
/// Longest piece of output forwarded as one line.
pub const MAX_LINE: usize = 1 << 20;

static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALLED.store(sig, Ordering::SeqCst);
}

/// SIGINT, SIGTERM and SIGHUP set a flag that [`take_signal`] reads.
pub fn install_signal_handlers() {
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

/// The signal received since the last call (0 if none).
pub fn take_signal() -> i32 {
    SIGNALLED.swap(0, Ordering::SeqCst)
}

/// A started rank.
pub struct Proc {
    pub rank: usize,
    pub child: Child,
    pub pid: i32,
    pub status: Option<ExitStatus>,
}

/// Starts `program` as a rank: environment `env` on top of the inherited one (without
/// `GPUMPI_BOOTSTRAP`), stdout and stderr piped, stdin inherited or `/dev/null`, its own
/// process group, bound to `bind` when given, and killed (SIGKILL) when its parent dies.
pub fn spawn(
    program: &str,
    args: &[String],
    env: &[(String, String)],
    inherit_stdin: bool,
    bind: Option<libc::cpu_set_t>,
) -> std::io::Result<Child> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    cmd.env_remove("GPUMPI_BOOTSTRAP");
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    cmd.stdin(if inherit_stdin {
        Stdio::inherit()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
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
            // The parent may have died before prctl took effect.
            if libc::getppid() != parent {
                libc::_exit(137);
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Exit code of a rank that could not be started: 127 when the program is missing, else 126.
pub fn spawn_error_code(e: &std::io::Error) -> i32 {
    if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

/// Reads `src` to its end and hands each line (with its newline; one is added to a last line
/// without) to `f`. A "line" longer than [`MAX_LINE`] (binary output) comes in pieces.
pub fn read_lines(src: impl Read, mut f: impl FnMut(&[u8])) {
    let mut r = BufReader::with_capacity(64 << 10, src);
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        match (&mut r).take(MAX_LINE as u64).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        f(&line);
    }
}

/// Writes one line of a rank's output to mpirun's stdout or stderr, after `prefix`, in one
/// write under the stream's lock: lines of different ranks never interleave. A closed output
/// is ignored (the caller keeps draining so that ranks do not block).
pub fn emit_line(prefix: &str, line: &[u8], stderr: bool) {
    let mut out = Vec::with_capacity(prefix.len() + line.len());
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(line);
    let _ = if stderr {
        let mut e = std::io::stderr().lock();
        e.write_all(&out).and_then(|_| e.flush())
    } else {
        let mut o = std::io::stdout().lock();
        o.write_all(&out).and_then(|_| o.flush())
    };
}

/// `--tag-output`'s prefix (Open MPI's format).
pub fn tag_prefix(tag: bool, rank: usize, stderr: bool) -> String {
    if tag {
        format!("[1,{rank}]<{}>:", if stderr { "stderr" } else { "stdout" })
    } else {
        String::new()
    }
}

/// Reaps every rank that has exited; true when none is left running.
pub fn reap(procs: &mut [Proc]) -> bool {
    for p in procs.iter_mut() {
        if p.status.is_none() {
            if let Ok(Some(st)) = p.child.try_wait() {
                p.status = Some(st);
            }
        }
    }
    procs.iter().all(|p| p.status.is_some())
}

/// Sends `sig` to the process group of every rank still running.
pub fn signal_all(procs: &[Proc], sig: i32) {
    for p in procs.iter().filter(|p| p.status.is_none()) {
        // SAFETY: plain kill(2) on the process group this rank leads; the rank is not reaped
        // yet, so the group id cannot have been reused.
        unsafe {
            libc::kill(-p.pid, sig);
            libc::kill(p.pid, sig); // in case setpgid had not run yet
        }
    }
}

/// `first` (SIGTERM, or the signal received) to every live rank's process group, SIGKILL after
/// [`KILL_GRACE`], reap all.
pub fn terminate_all(procs: &mut [Proc], first: i32) {
    signal_all(procs, first);
    let t = Instant::now();
    while !reap(procs) && t.elapsed() < KILL_GRACE {
        std::thread::sleep(Duration::from_millis(5));
    }
    signal_all(procs, libc::SIGKILL);
    for p in procs.iter_mut() {
        if p.status.is_none() {
            p.status = p.child.wait().ok();
        }
    }
}

/// The CPUs of this process's affinity mask (empty if it cannot be read).
pub fn allowed_cpus() -> Vec<usize> {
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

/// The CPU set of the `local`-th of `n` ranks on this host under `GPUMPI_BIND` (see
/// `docs/ENV.md`): with `core` (the default), the local-th CPU of this process's affinity mask,
/// when the host has 2 ranks or more and exactly as many ranks as those CPUs. A rank that waits
/// on a peer then never shares a core with it while another core is idle (spinning there would
/// only delay the peer). Smaller jobs stay unbound: binding them to the first CPUs would pile
/// concurrent jobs onto those while the others idle.
pub fn bind_set(n: usize, local: usize) -> Option<libc::cpu_set_t> {
    let mode = config::get("GPUMPI_BIND").unwrap_or_default();
    match mode.to_ascii_lowercase().as_str() {
        "core" => {}
        "none" | "off" | "0" => return None,
        _ => {
            if local == 0 {
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
        libc::CPU_SET(allowed[local], &mut set);
        Some(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_split_and_terminated() {
        let mut got: Vec<Vec<u8>> = Vec::new();
        read_lines(&b"a\nbc\n\nlast"[..], |l| got.push(l.to_vec()));
        assert_eq!(got, [&b"a\n"[..], b"bc\n", b"\n", b"last\n"]);
        let big = vec![b'x'; MAX_LINE + 10];
        let mut n = Vec::new();
        read_lines(&big[..], |l| n.push(l.len()));
        assert_eq!(n, [MAX_LINE + 1, 11]);
        assert_eq!(tag_prefix(true, 3, true), "[1,3]<stderr>:");
        assert_eq!(tag_prefix(false, 3, true), "");
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
}
