//! mpirun's side of the hosts it starts through a launch agent: it runs
//! `AGENT... HOST MPIRUN --gpumpi-daemon` (Open MPI's rsh launcher convention; the agent is
//! `ssh` by default), writes `SERVER NODE SECRET` to the agent's stdin for the daemon
//! ([`super::daemon`]), and once the daemon has connected back to the wire-up server sends it
//! the node's `Launch`, prints the output it forwards, and reports its ranks' starts and exits
//! as [`NodeEvent`]s. Stopping the job sends `Kill`; closing the connection ends the daemon.

use super::procs;
use super::stream::Stream;
use super::wire::{self, Msg};
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a remote node reports to the launcher's loop.
#[derive(Debug)]
pub enum NodeEvent {
    Started {
        rank: usize,
        pid: i32,
    },
    SpawnFailed {
        rank: usize,
        code: i32,
        msg: String,
    },
    Exited {
        rank: usize,
        status: ExitStatus,
    },
    /// The daemon's connection ended.
    Lost {
        node: usize,
        why: String,
    },
    /// The launch agent process ended (with the last line it wrote to stderr).
    AgentExited {
        node: usize,
        status: Option<ExitStatus>,
        last: String,
    },
}

/// One host started through the launch agent.
pub struct RemoteNode {
    pub index: usize,
    pub name: String,
    pub ranks: Vec<usize>,
    agent_pid: i32,
    agent_done: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    conn: Option<Stream>,
}

/// The launch agent's command words: `--launch-agent`, else `GPUMPI_LAUNCH_AGENT`, else `ssh`.
pub fn agent_words(option: Option<&str>) -> Vec<String> {
    let cfg = crate::config::get("GPUMPI_LAUNCH_AGENT");
    let spec = option
        .map(str::to_string)
        .or(cfg)
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "ssh".into());
    spec.split_whitespace().map(String::from).collect()
}

impl RemoteNode {
    /// Starts the launch agent for node `index` (host `name`) with `line` on its stdin.
    /// The agent's own output goes to mpirun's stderr, prefixed with the host.
    pub fn start(
        agent: &[String],
        index: usize,
        name: &str,
        ranks: Vec<usize>,
        daemon: &str,
        line: &str,
        events: Sender<NodeEvent>,
    ) -> std::io::Result<RemoteNode> {
        let mut cmd = Command::new(&agent[0]);
        cmd.args(&agent[1..])
            .arg(name)
            .arg(daemon)
            .arg(super::daemon::DAEMON_ARG)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: setpgid is async-signal-safe; the agent gets its own process group so that
        // it can be stopped with whatever it started (and a terminal's ^C reaches mpirun only).
        unsafe {
            cmd.pre_exec(|| {
                libc::setpgid(0, 0);
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        let agent_pid = child.id() as i32;
        let mut stdin = child.stdin.take().unwrap();
        // The daemon reads one line; the pipe closes right after (mpirun keeps nothing open).
        let _ = stdin.write_all(line.as_bytes());
        drop(stdin);
        let last = Arc::new(Mutex::new(String::new()));
        let mut threads = Vec::new();
        for (src, keep) in [
            (
                Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
                false,
            ),
            (Box::new(child.stderr.take().unwrap()), true),
        ] {
            let (host, last) = (name.to_string(), last.clone());
            threads.push(std::thread::spawn(move || {
                procs::read_lines(src, |l| {
                    let text = String::from_utf8_lossy(l).trim_end().to_string();
                    procs::emit_line(&format!("mpirun: [{host}] "), l, true);
                    if keep && !text.is_empty() {
                        *last.lock().unwrap() = text;
                    }
                })
            }));
        }
        let agent_done = Arc::new(AtomicBool::new(false));
        let done = agent_done.clone();
        threads.push(std::thread::spawn(move || {
            let status = child.wait().ok();
            done.store(true, Ordering::Release);
            // Let the output threads catch the agent's last words.
            std::thread::sleep(Duration::from_millis(50));
            let last = last.lock().unwrap().clone();
            let _ = events.send(NodeEvent::AgentExited {
                node: index,
                status,
                last,
            });
        }));
        Ok(RemoteNode {
            index,
            name: name.to_string(),
            ranks,
            agent_pid,
            agent_done,
            threads,
            conn: None,
        })
    }

    pub fn attached(&self) -> bool {
        self.conn.is_some()
    }

    /// The daemon connected: send it `launch` and forward what it reports.
    pub fn attach(
        &mut self,
        mut conn: Stream,
        launch: &Msg,
        tag: bool,
        events: Sender<NodeEvent>,
    ) -> std::io::Result<()> {
        wire::write_msg(&mut conn, launch)?;
        let mut reader = conn.try_clone()?;
        let node = self.index;
        self.threads.push(std::thread::spawn(move || loop {
            let m = match wire::read_msg(&mut reader) {
                Ok(m) => m,
                Err(e) => {
                    let _ = events.send(NodeEvent::Lost {
                        node,
                        why: e.to_string(),
                    });
                    return;
                }
            };
            let ev = match m {
                Msg::Output { rank, stderr, data } => {
                    procs::emit_line(
                        &procs::tag_prefix(tag, rank as usize, stderr),
                        &data,
                        stderr,
                    );
                    continue;
                }
                Msg::Started { rank, pid } => NodeEvent::Started {
                    rank: rank as usize,
                    pid: pid as i32,
                },
                Msg::SpawnFailed { rank, code, msg } => NodeEvent::SpawnFailed {
                    rank: rank as usize,
                    code,
                    msg,
                },
                Msg::Exited { rank, status } => NodeEvent::Exited {
                    rank: rank as usize,
                    status: ExitStatus::from_raw(status),
                },
                other => {
                    tracing::warn!(
                        "mpirun: unexpected message from node {node}'s daemon: {other:?}"
                    );
                    continue;
                }
            };
            let _ = events.send(ev);
        }));
        self.conn = Some(conn);
        Ok(())
    }

    /// Tells the daemon to stop its ranks with `signal` (SIGKILL follows on its side).
    pub fn kill(&mut self, signal: i32) {
        if let Some(c) = &mut self.conn {
            let _ = wire::write_msg(c, &Msg::Kill { signal });
        }
    }

    /// Signals the agent's process group, unless the agent has already been reaped.
    fn signal_agent(&self, sig: i32) {
        if !self.agent_done.load(Ordering::Acquire) {
            // SAFETY: plain kill(2) of the agent's process group (it called setpgid).
            unsafe {
                libc::kill(-self.agent_pid, sig);
            }
        }
    }

    /// Ends the node: closes the daemon's connection (the daemon then exits, killing anything
    /// of the job still running there), waits up to `wait` for the agent to end, then stops it
    /// (SIGTERM, SIGKILL after the kill grace).
    pub fn close(&mut self, wait: Duration) {
        if let Some(c) = self.conn.take() {
            c.shutdown();
        }
        let t = Instant::now();
        while !self.agent_done.load(Ordering::Acquire) && t.elapsed() < wait {
            std::thread::sleep(Duration::from_millis(5));
        }
        if !self.agent_done.load(Ordering::Acquire) {
            self.signal_agent(libc::SIGTERM);
            let t = Instant::now();
            while !self.agent_done.load(Ordering::Acquire) && t.elapsed() < procs::KILL_GRACE {
                std::thread::sleep(Duration::from_millis(5));
            }
            self.signal_agent(libc::SIGKILL);
        }
        let t = Instant::now();
        for h in self.threads.drain(..) {
            while !h.is_finished() && t.elapsed() < Duration::from_secs(1) {
                std::thread::sleep(Duration::from_millis(5));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
    }
}
