//! What a SIGKILLed mpirun leaves behind (its wire-up directory, its job's `/dev/shm` names, and
//! processes a rank forked, which PR_SET_PDEATHSIG does not reach) is removed by the next
//! mpirun of the same user; a live job's directory is left alone.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MPIRUN: &str = env!("CARGO_BIN_EXE_mpirun");

fn mpirun(tmp: &Path) -> Command {
    let mut c = Command::new(MPIRUN);
    for (k, _) in std::env::vars() {
        if k.starts_with("GPUMPI_") {
            c.env_remove(k);
        }
    }
    c.env("TMPDIR", tmp);
    c
}

/// Alive and not a zombie.
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

fn job_dirs(tmp: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("gpumpi-"))
        })
        .collect()
}

#[test]
fn the_next_mpirun_sweeps_what_a_killed_one_left() {
    let tmp = std::env::temp_dir().join(format!("gpumpi-sweep-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    // A directory named like a job of a live mpirun (this test's pid) must survive the sweep.
    let live = tmp.join(format!("gpumpi-{}-0000abcd", std::process::id()));
    std::fs::create_dir(&live).unwrap();

    let mut child = mpirun(&tmp)
        .args(["-n", "1", "sh", "-c", "sleep 600 & echo \"child $!\"; wait"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let grandchild: i32 = line
        .trim()
        .strip_prefix("child ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output {line:?}"));
    let dirs: Vec<PathBuf> = job_dirs(&tmp).into_iter().filter(|d| *d != live).collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let job = dirs[0].file_name().unwrap().to_str().unwrap()["gpumpi-".len()..].to_string();
    // A shared-memory name of the job, as a rank killed during MPI_Init leaves it.
    let shm = PathBuf::from(format!("/dev/shm/gpumpi-{job}-0-00112233aabbccdd"));
    std::fs::write(&shm, b"x").unwrap();

    child.kill().unwrap(); // SIGKILL: mpirun cannot clean up
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        dirs[0].exists(),
        "the killed mpirun's directory is left behind"
    );
    assert!(
        running(grandchild),
        "the rank's own child outlives the killed mpirun (PR_SET_PDEATHSIG reaches only the rank)"
    );

    let st = mpirun(&tmp)
        .args(["-n", "1", "true"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let t = Instant::now();
    while running(grandchild) && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = running(grandchild);
    if left {
        // SAFETY: kill(2) of the process this test started (through mpirun and sh).
        unsafe { libc::kill(grandchild, libc::SIGKILL) };
    }
    assert!(
        !left,
        "the next mpirun did not end the killed job's process {grandchild}"
    );
    assert!(
        !dirs[0].exists(),
        "the killed job's directory was not removed"
    );
    assert!(
        !shm.exists(),
        "the killed job's /dev/shm name was not removed"
    );
    assert!(live.exists(), "a live job's directory was removed");
    std::fs::remove_dir_all(&tmp).unwrap();
}
