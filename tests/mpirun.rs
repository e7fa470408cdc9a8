//! Runs the built `mpirun` with the `gpumpi-bootstrap-test` helper (see its
//! doc comment for the modes) and checks output, exit codes, clean-up and
//! the absence of leftover processes.

#[path = "support/reports.rs"]
mod reports;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const MPIRUN: &str = env!("CARGO_BIN_EXE_mpirun");
const HELPER: &str = env!("CARGO_BIN_EXE_gpumpi-bootstrap-test");

/// How soon a job must be gone after a rank died, aborted or mpirun was signalled: the feature
/// is that teardown does not wait for anything (it takes well under a second); the bound leaves
/// a wide margin for a loaded machine and is still far below a hang (`wait_output`'s 30 s).
const TEARDOWN: Duration = Duration::from_secs(10);
/// How soon a rank must fail when its launcher is unusable: well below the 30 s default
/// `GPUMPI_BOOTSTRAP_TIMEOUT` that waiting for it would take.
const FAIL_FAST: Duration = Duration::from_secs(15);

/// A command with no inherited gpumpi environment (the tests may themselves run under mpirun).
fn clean(prog: &str) -> Command {
    let mut c = Command::new(prog);
    for (k, _) in std::env::vars() {
        if k.starts_with("GPUMPI_") {
            c.env_remove(k);
        }
    }
    c
}

fn mpirun(args: &[&str]) -> Command {
    let mut c = clean(MPIRUN);
    c.args(args);
    c
}

/// Wait for `child` with a hard limit so that a broken mpirun fails the test instead of hanging it.
/// Returns the output, the total time, and the time from the last stdout line that starts with
/// "rank " (the helper's report, printed before it misbehaves) to the exit.
fn wait_output(mut child: Child, limit: Duration) -> (Output, Duration, Duration) {
    let t = Instant::now();
    let out = std::thread::spawn(move || {
        let mut e = String::new();
        let (so, mut se) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let th = std::thread::spawn(move || {
            std::io::Read::read_to_string(&mut se, &mut e).unwrap();
            e
        });
        let (s, last) = reports::read_reports(so);
        let e = th.join().unwrap();
        let st = child.wait().unwrap();
        (
            Output {
                status: st,
                stdout: s.into_bytes(),
                stderr: e.into_bytes(),
            },
            last.elapsed(),
        )
    });
    while !out.is_finished() {
        assert!(
            t.elapsed() < limit,
            "mpirun did not finish within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let total = t.elapsed();
    let (o, since) = out.join().unwrap();
    (o, total, since)
}

fn run(c: Command) -> (i32, String, String, Duration) {
    let (code, out, err, total, _) = run2(c);
    (code, out, err, total)
}

/// Like `run`, with the time from the helper's last report line to the end of mpirun.
fn run2(mut c: Command) -> (i32, String, String, Duration, Duration) {
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (o, total, since) = wait_output(child, Duration::from_secs(30));
    let code = o.status.code().unwrap_or(-1);
    (
        code,
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
        total,
        since,
    )
}

/// The pids the helper printed ("... pid P ...").
fn pids(out: &str) -> Vec<i32> {
    out.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let i = w.iter().position(|x| *x == "pid")?;
            w.get(i + 1)?.parse().ok()
        })
        .collect()
}

fn job_id(out: &str) -> String {
    let l = out
        .lines()
        .find(|l| l.contains(" job "))
        .expect("a helper line");
    let w: Vec<&str> = l.split_whitespace().collect();
    w[w.iter().position(|x| *x == "job").unwrap() + 1].to_string()
}

fn alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks for existence.
    unsafe { libc::kill(pid, 0) == 0 }
}

fn assert_all_gone(pids: &[i32]) {
    for &p in pids {
        assert!(!alive(p), "rank process {p} is still alive");
    }
}

fn shm_left(job: &str) -> Vec<String> {
    let prefix = format!("gpumpi-{job}-");
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

#[test]
fn exchange_and_tagged_output_at_several_sizes() {
    for n in [1usize, 2, 3, 4, 7] {
        let ns = n.to_string();
        let (code, out, err, _) = run(mpirun(&[
            "-n",
            &ns,
            "--oversubscribe",
            "--tag-output",
            "--",
            HELPER,
            "--stderr",
            "--shm",
        ]));
        assert_eq!(code, 0, "n={n}\nstdout:\n{out}\nstderr:\n{err}");
        let peers: Vec<String> = (0..n).map(|q| format!("v{q}")).collect();
        let peers = peers.join(",");
        let job = job_id(&out);
        for r in 0..n {
            let want = format!("[1,{r}]<stdout>:rank {r}/{n} pid ");
            let lines: Vec<&str> = out.lines().filter(|l| l.starts_with(&want)).collect();
            assert_eq!(lines.len(), 1, "n={n} rank {r}:\n{out}");
            assert!(
                lines[0].ends_with(&format!("job {job} local {r}/{n} peers {peers}")),
                "{}",
                lines[0]
            );
            assert_eq!(
                err.matches(&format!("[1,{r}]<stderr>:rank {r} says hello on stderr\n"))
                    .count(),
                1,
                "{err}"
            );
        }
        assert_eq!(out.lines().count(), n);
        assert_all_gone(&pids(&out));
        assert!(
            shm_left(&job).is_empty(),
            "leftover shm files {:?}",
            shm_left(&job)
        );
    }
}

#[test]
fn untagged_output_and_long_lines_never_interleave() {
    let (code, out, err, _) = run(mpirun(&[
        "-np",
        "4",
        "--oversubscribe",
        HELPER,
        "--lines",
        "150",
    ]));
    assert_eq!(code, 0, "{err}");
    let mut count = [0usize; 4];
    for l in out.lines().filter(|l| l.starts_with("L ")) {
        let w: Vec<&str> = l.split(' ').collect();
        assert_eq!(w.len(), 4, "a mangled line: {:.80}", l);
        let r: usize = w[1].parse().unwrap();
        let c = (b'a' + r as u8) as char;
        assert!(
            w[3].len() == 3000 && w[3].chars().all(|x| x == c),
            "rank {r}'s line is mangled"
        );
        count[r] += 1;
    }
    assert_eq!(count, [150; 4]);
    assert!(out.lines().filter(|l| l.starts_with("rank ")).count() == 4);
}

#[test]
fn killed_rank_stops_the_job_quickly_and_cleans_up() {
    let (code, out, err, _, took) = run2(mpirun(&[
        "-n",
        "4",
        "--oversubscribe",
        HELPER,
        "--kill",
        "2",
        "--shm",
    ]));
    assert_eq!(code, 128 + 9, "{err}");
    assert!(err.contains("mpirun: rank 2 (pid "), "{err}");
    assert!(
        err.contains(") was killed by signal 9 (SIGKILL); stopping the job"),
        "{err}"
    );
    assert!(took < TEARDOWN, "took {took:?}");
    let p = pids(&out);
    assert_eq!(p.len(), 4, "{out}");
    assert_all_gone(&p);
    assert!(shm_left(&job_id(&out)).is_empty());
}

#[test]
fn nonzero_exit_code_is_returned() {
    let (code, out, err, _, took) = run2(mpirun(&[
        "-n",
        "3",
        "--oversubscribe",
        HELPER,
        "--exit",
        "1",
        "5",
    ]));
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("mpirun: rank 1 (pid ")
            && err.contains("exited with code 5; stopping the job"),
        "{err}"
    );
    assert!(took < TEARDOWN, "took {took:?}");
    assert_all_gone(&pids(&out));
}

#[test]
fn abort_through_the_bootstrap() {
    let (code, out, err, _, took) = run2(mpirun(&[
        "-n",
        "3",
        "--oversubscribe",
        HELPER,
        "--abort",
        "1",
        "3",
    ]));
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("mpirun: rank 1 called MPI_Abort(MPI_COMM_WORLD, 3): helper rank 1 gives up"),
        "{err}"
    );
    assert!(took < TEARDOWN, "took {took:?}");
    assert_all_gone(&pids(&out));
}

#[test]
fn exit_without_finalize_is_a_failure() {
    let (code, out, err, _) = run(mpirun(&["-n", "2", HELPER, "--nofinalize", "0"]));
    assert_ne!(code, 0);
    assert!(
        err.contains("rank 0 (pid ") && err.contains("without finalizing"),
        "{err}"
    );
    assert_all_gone(&pids(&out));
}

#[test]
fn timeout_kills_the_job() {
    let (code, out, err, took) = run(mpirun(&[
        "-n",
        "2",
        "--timeout",
        "1",
        HELPER,
        "--hang",
        "--shm",
    ]));
    assert_eq!(code, 124, "{err}");
    assert!(err.contains("--timeout 1 s"), "{err}");
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(1) + TEARDOWN,
        "took {took:?}"
    );
    assert_all_gone(&pids(&out));
    assert!(shm_left(&job_id(&out)).is_empty());
}

#[test]
fn sigterm_to_mpirun_is_forwarded() {
    let mut child = mpirun(&["-n", "3", "--oversubscribe", HELPER, "--hang"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut r = BufReader::new(child.stdout.take().unwrap());
    let mut out = String::new();
    for _ in 0..3 {
        r.read_line(&mut out).unwrap();
    }
    let p = pids(&out);
    assert_eq!(p.len(), 3, "{out}");
    // SAFETY: signalling the mpirun child we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let t = Instant::now();
    let st = child.wait().unwrap();
    assert!(t.elapsed() < TEARDOWN, "took {:?}", t.elapsed());
    assert_eq!(st.code(), Some(128 + libc::SIGTERM));
    assert_all_gone(&p);
}

#[test]
fn env_options_and_non_mpi_programs() {
    let mut c = mpirun(&[
        "-n",
        "2",
        "-x",
        "FOO=bar baz",
        "-x",
        "GPUMPI_T_FWD",
        "sh",
        "-c",
        "echo \"$GPUMPI_RANK|$GPUMPI_SIZE|$GPUMPI_LOCAL_RANK|$FOO|$GPUMPI_T_FWD\"",
    ]);
    c.env("GPUMPI_T_FWD", "fwd");
    let (code, out, err, _) = run(c);
    assert_eq!(code, 0, "{err}");
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(lines, vec!["0|2|0|bar baz|fwd", "1|2|1|bar baz|fwd"]);
}

#[test]
fn the_public_job_id_shares_no_bytes_with_the_secret() {
    // The job id names files and directories every local user can see and is in every rank's
    // environment; the secret authenticates ranks to mpirun. No 4-byte run of the secret may
    // stand in the id (20 jobs: a derived id would show in every one).
    for _ in 0..20 {
        let (code, out, err, _) = run(mpirun(&[
            "-n",
            "1",
            "sh",
            "-c",
            "echo \"$GPUMPI_JOB_ID $GPUMPI_SECRET\"",
        ]));
        assert_eq!(code, 0, "{err}");
        let (id, secret) = out.trim().split_once(' ').expect("id and secret");
        assert_eq!(secret.len(), 64, "a 32-byte secret in hex: {secret:?}");
        let (_pid, tag) = id.split_once('-').expect("pid-tag");
        assert_eq!(tag.len(), 8, "a 4-byte random tag in hex: {id:?}");
        let tag = tag.to_ascii_lowercase();
        let secret = secret.to_ascii_lowercase();
        for i in (0..=secret.len() - 8).step_by(2) {
            assert_ne!(
                &secret[i..i + 8],
                tag,
                "the job id {id} holds bytes {}..{} of the secret",
                i / 2,
                i / 2 + 4
            );
        }
    }
}

/// The launch variables of Open MPI, hydra and torchrun that programs read (docs/MPIRUN.md).
const LAUNCH_VARS: &str = "$OMPI_COMM_WORLD_RANK $OMPI_COMM_WORLD_SIZE \
    $OMPI_COMM_WORLD_LOCAL_RANK $OMPI_COMM_WORLD_LOCAL_SIZE $OMPI_COMM_WORLD_NODE_RANK \
    $MPI_LOCALRANKID $MPI_LOCALNRANKS $LOCAL_RANK $LOCAL_WORLD_SIZE";

#[test]
fn ranks_get_the_launch_variables_of_other_mpis() {
    let script = format!("echo {LAUNCH_VARS}");
    let (code, out, err, _) = run(mpirun(&["-n", "3", "--oversubscribe", "sh", "-c", &script]));
    assert_eq!(code, 0, "{err}");
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            "0 3 0 3 0 0 3 0 3",
            "1 3 1 3 1 1 3 1 3",
            "2 3 2 3 2 2 3 2 3"
        ]
    );
    // An explicit -x of the same name wins.
    let (code, out, err, _) = run(mpirun(&[
        "-n",
        "1",
        "-x",
        "LOCAL_RANK=7",
        "sh",
        "-c",
        "echo $LOCAL_RANK $OMPI_COMM_WORLD_LOCAL_RANK",
    ]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "7 0");
}

#[test]
fn launch_variables_do_not_change_the_bootstrap() {
    // Under mpirun (with every launch variable set) each rank chooses mpirun's protocol.
    let (code, out, err, _) = run(mpirun(&["-n", "2", HELPER, "--method"]));
    assert_eq!(code, 0, "{err}");
    let mut methods: Vec<&str> = out.lines().filter(|l| l.starts_with("method ")).collect();
    methods.sort();
    assert_eq!(
        methods,
        vec!["method mpirun rank 0/2", "method mpirun rank 1/2"],
        "{out}"
    );
    // The same environment without mpirun's own GPUMPI_* variables: the launch variables
    // alone select nothing, so every rank is a singleton (not PMIx, not PMI-1).
    let script = format!(
        "test -n \"$OMPI_COMM_WORLD_SIZE\" && unset GPUMPI_JOB_ID GPUMPI_RANK GPUMPI_SECRET \
         GPUMPI_SERVER GPUMPI_SIZE && exec {HELPER} --method"
    );
    let (code, out, err, _) = run(mpirun(&["-n", "2", "sh", "-c", &script]));
    assert_eq!(code, 0, "{err}");
    let methods: Vec<&str> = out.lines().filter(|l| l.starts_with("method ")).collect();
    assert_eq!(
        methods,
        vec!["method singleton rank 0/1", "method singleton rank 0/1"],
        "{out}"
    );
}

#[test]
fn oversubscription_needs_consent() {
    let n = std::thread::available_parallelism().unwrap().get() + 1;
    let ns = n.to_string();
    let (code, out, err, _) = run(mpirun(&["-n", &ns, "true"]));
    assert_eq!(code, 2, "refusing to oversubscribe is a usage error: {err}");
    assert!(out.is_empty());
    assert!(
        err.contains("not enough slots") && err.contains("--oversubscribe"),
        "{err}"
    );
    let mut c = mpirun(&["-n", &ns, HELPER]);
    c.env("GPUMPI_OVERSUBSCRIBE", "1");
    let (code, out, err, _) = run(c);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), n);
}

#[test]
fn bad_secret_is_refused_with_a_clear_error() {
    let script = format!("GPUMPI_SECRET=00ff {HELPER}");
    let (code, _out, err, took) = run(mpirun(&["-n", "1", "sh", "-c", &script]));
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("bad secret") && err.contains("GPUMPI_SERVER="),
        "{err}"
    );
    assert!(took < FAIL_FAST, "took {took:?}");
}

#[test]
fn missing_server_fails_fast() {
    let mut c = clean(HELPER);
    c.env("GPUMPI_SERVER", "/nonexistent/gpumpi.sock")
        .env("GPUMPI_JOB_ID", "1-abc")
        .env("GPUMPI_RANK", "0")
        .env("GPUMPI_SIZE", "2")
        .env("GPUMPI_SECRET", "0011");
    let (code, _out, err, took) = run(c);
    assert_eq!(code, 3);
    assert!(
        err.contains("\"mpirun\"")
            && err.contains("/nonexistent/gpumpi.sock")
            && err.contains("cannot connect"),
        "{err}"
    );
    assert!(took < FAIL_FAST, "took {took:?}");
}

#[test]
fn singleton_and_forced_methods() {
    let (code, out, err, _) = run(clean(HELPER));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("rank 0/1 pid ") && out.contains(" local 0/1 peers v0"),
        "{out}"
    );
    // Forcing the singleton under mpirun: every rank is alone.
    let mut c = mpirun(&[
        "-n",
        "2",
        "sh",
        "-c",
        &format!("GPUMPI_BOOTSTRAP=singleton {HELPER}"),
    ]);
    c.env_remove("GPUMPI_BOOTSTRAP");
    let (code, out, err, _) = run(c);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("rank 0/1 ")).count(),
        2,
        "{out}"
    );
    let mut c = clean(HELPER);
    c.env("GPUMPI_BOOTSTRAP", "pmix-nope");
    let (code, _, err, _) = run(c);
    assert_eq!(code, 3);
    assert!(
        err.contains("GPUMPI_BOOTSTRAP") && err.contains("mpirun, pmix, pmi1, singleton"),
        "{err}"
    );
}

#[test]
fn usage_errors_help_and_version() {
    let (code, out, _, _) = run(mpirun(&["--help"]));
    assert_eq!(code, 0);
    assert!(out.contains("--oversubscribe") && out.contains("--tag-output"));
    // Each option is in the help and in docs/MPIRUN.md.
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/MPIRUN.md")).unwrap();
    for opt in [
        "-n",
        "-np",
        "--np",
        "-x",
        "--oversubscribe",
        "--tag-output",
        "--timeout",
        "-h",
        "--help",
        "-V",
        "--version",
    ] {
        assert!(
            out.split(|c: char| c.is_whitespace() || c == ',')
                .any(|w| w == opt),
            "{opt} missing from --help:\n{out}"
        );
        assert!(
            doc.contains(&format!("`{opt}")),
            "{opt} missing from docs/MPIRUN.md"
        );
    }
    for v in ["--version", "-V"] {
        let (code, out, _, _) = run(mpirun(&[v]));
        assert_eq!(code, 0);
        assert!(out.starts_with("mpirun (gpumpi) "), "{v}: {out}");
    }
    let (code, _, err, _) = run(mpirun(&["-n", "2"]));
    assert_eq!(code, 2);
    assert!(err.contains("no program"));
    let (code, _, err, _) = run(mpirun(&["-n", "1", "/nonexistent/prog"]));
    assert_eq!(code, 127);
    assert!(err.contains("cannot start rank 0"), "{err}");
}

#[test]
fn ranks_die_with_a_killed_mpirun() {
    let mut child = mpirun(&["-n", "2", HELPER, "--hang"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut r = BufReader::new(child.stdout.take().unwrap());
    let mut out = String::new();
    for _ in 0..2 {
        r.read_line(&mut out).unwrap();
    }
    let p = pids(&out);
    assert_eq!(p.len(), 2, "{out}");
    child.kill().unwrap(); // SIGKILL: no chance to clean up; PR_SET_PDEATHSIG must do it
    child.wait().unwrap();
    let t = Instant::now();
    while p.iter().any(|&q| alive(q)) && t.elapsed() < TEARDOWN {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_all_gone(&p);
    // What a SIGKILLed mpirun could not remove.
    let job = job_id(&out);
    let _ = std::fs::remove_dir_all(std::env::temp_dir().join(format!("gpumpi-{job}")));
}

#[test]
fn abort_from_a_thread_while_another_waits_in_a_fence() {
    let (code, out, err, _, took) = run2(mpirun(&["-n", "2", HELPER, "--abort-thread", "1", "6"]));
    assert_eq!(code, 6, "{err}");
    assert!(
        err.contains(
            "mpirun: rank 1 called MPI_Abort(MPI_COMM_WORLD, 6): abort from a second thread"
        ),
        "{err}"
    );
    assert!(took < TEARDOWN, "took {took:?}");
    assert_all_gone(&pids(&out));
}

#[test]
fn a_live_rank_that_drops_its_connection_is_dead() {
    let (code, out, err, _, took) = run2(mpirun(&["-n", "2", HELPER, "--drop-conn", "0"]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("mpirun: rank 0 (pid ")
            && err.contains("closed its connection to mpirun without finalizing"),
        "{err}"
    );
    assert!(took < TEARDOWN, "took {took:?}");
    assert_all_gone(&pids(&out));
}

#[test]
fn half_set_environment_is_an_error_not_a_singleton() {
    let mut c = clean(HELPER);
    c.env("GPUMPI_RANK", "1");
    let (code, out, err, _) = run(c);
    assert_eq!(code, 3, "{out}");
    assert!(
        err.contains("\"mpirun\"") && err.contains("GPUMPI_SERVER is not set"),
        "{err}"
    );
}
