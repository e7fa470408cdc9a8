//! PMI-1 client: the "simple PMI" text protocol MPICH's hydra (`mpiexec`) and other launchers
//! speak over a socket the process inherits (`PMI_FD`, with `PMI_RANK` and `PMI_SIZE`) or
//! connects to (`PMI_PORT`=host:port, with `PMI_ID`).
//!
//! Every message is one line of `key=value` words, the first being `cmd=<name>`:
//!
//! ```text
//! -> cmd=init pmi_version=1 pmi_subversion=1      <- cmd=response_to_init rc=0 ...
//! -> cmd=get_maxes                                <- cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024
//! -> cmd=get_appnum                               <- cmd=appnum appnum=0
//! -> cmd=get_my_kvsname                           <- cmd=my_kvsname kvsname=kvs_1_0
//! -> cmd=put kvsname=K key=k value=v              <- cmd=put_result rc=0
//! -> cmd=barrier_in                               <- cmd=barrier_out
//! -> cmd=get kvsname=K key=k                      <- cmd=get_result rc=0 value=v
//! -> cmd=finalize                                 <- cmd=finalize_ack
//! -> cmd=abort exitcode=N                         (the launcher kills the job)
//! ```
//!
//! Mapping onto [`Bootstrap`]: the KVS is one space for the whole job, so rank `r`'s key `k`
//! is stored as `r:k` (`k` hex-encoded when it holds characters other than `[A-Za-z0-9_.-]`).
//! Values are hex (`x<hex>`); a value longer than the launcher's `vallen_max` is split over
//! keys `r:k#0`, `r:k#1`, ... and the main key holds `n<count>`. Puts are sent at the fence
//! (so a fence = the puts + one barrier), gets are fetched one round trip each and cached
//! until the next fence.
//!
//! Locality: each rank puts its node's name before the first fence and reads every rank's
//! after it, which gives `node_ranks` (until that first fence a rank only knows itself). The
//! name is `PMI_HOSTNAME`, which hydra sets to the host as its host list names it (so ranks
//! of hosts that share a host name, such as network namespaces, are told apart), else the
//! host name.
//!
//! Time limits: connecting and every request/reply have `GPUMPI_BOOTSTRAP_TIMEOUT`; the
//! barrier has none (slow ranks are legitimate), a dead launcher closes the socket.

use super::Bootstrap;
use crate::config;
use crate::mpi::error::{MpiError, MpiResult};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::time::Duration;

/// Longest reply line accepted (a bad server cannot make us buffer without end).
const MAX_LINE: u64 = 1 << 20;
const HOST_KEY: &str = "gpumpi.host";

/// Variables whose presence selects this method.
pub const ENV: &[&str] = &["PMI_FD", "PMI_PORT"];

pub fn detect() -> bool {
    ENV.iter().any(|v| config::get(v).is_some())
}

/// A byte stream to the PMI server: a Unix or TCP socket.
pub trait Stream: Read + Write + Send {
    fn set_read_timeout_(&self, d: Option<Duration>) -> std::io::Result<()>;
    fn clone_box(&self) -> std::io::Result<Box<dyn Stream>>;
}

impl Stream for UnixStream {
    fn set_read_timeout_(&self, d: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(d)
    }
    fn clone_box(&self) -> std::io::Result<Box<dyn Stream>> {
        Ok(Box::new(self.try_clone()?))
    }
}

impl Stream for TcpStream {
    fn set_read_timeout_(&self, d: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(d)
    }
    fn clone_box(&self) -> std::io::Result<Box<dyn Stream>> {
        Ok(Box::new(self.try_clone()?))
    }
}

/// One protocol line: `cmd=<name>` and its other `key=value` words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub cmd: String,
    pub kv: HashMap<String, String>,
}

impl Reply {
    pub fn get(&self, k: &str) -> Option<&str> {
        self.kv.get(k).map(String::as_str)
    }
    /// `rc` is absent or 0; else the error names `what` and the server's `msg`.
    pub fn check_rc(&self, what: &str) -> Result<(), String> {
        match self.get("rc") {
            None | Some("0") => Ok(()),
            Some(rc) => Err(format!(
                "{what}: the launcher answered rc={rc}{}",
                self.get("msg")
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default()
            )),
        }
    }
    pub fn usize(&self, k: &str) -> Result<usize, String> {
        let v = self
            .get(k)
            .ok_or_else(|| format!("reply `cmd={}` has no {k}", self.cmd))?;
        v.trim()
            .parse()
            .map_err(|_| format!("reply `cmd={}`: {k}={v:?} is not a number", self.cmd))
    }
}

/// Parse one line of the protocol. Words without `=` are taken as the continuation of the
/// previous value (some servers put spaces in `msg=`).
pub fn parse_line(line: &str) -> Result<Reply, String> {
    let line = line.trim_end_matches(['\n', '\r']);
    let mut kv: HashMap<String, String> = HashMap::new();
    let mut last: Option<String> = None;
    for w in line.split(' ').filter(|w| !w.is_empty()) {
        match w.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                kv.insert(k.to_string(), v.to_string());
                last = Some(k.to_string());
            }
            _ => match last.as_ref().and_then(|k| kv.get_mut(k)) {
                Some(v) => {
                    v.push(' ');
                    v.push_str(w);
                }
                None => return Err(format!("malformed PMI line {line:?}")),
            },
        }
    }
    let cmd = kv
        .remove("cmd")
        .ok_or_else(|| format!("PMI line without cmd=: {line:?}"))?;
    Ok(Reply { cmd, kv })
}

/// Format a request line (with its newline). Values must not contain spaces or newlines.
pub fn format_line(cmd: &str, args: &[(&str, &str)]) -> String {
    let mut s = format!("cmd={cmd}");
    for (k, v) in args {
        s.push(' ');
        s.push_str(k);
        s.push('=');
        s.push_str(v);
    }
    s.push('\n');
    s
}

/// The KVS key of `rank`'s `key`.
pub fn kvs_key(rank: usize, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-');
    if plain {
        format!("{rank}:{key}")
    } else {
        format!("{rank}:h{}", super::wire::to_hex(key.as_bytes()))
    }
}

/// Split `value` into (key, text) puts for a server accepting values of `vallen_max` bytes.
pub fn encode_value(key: &str, value: &[u8], vallen_max: usize) -> Vec<(String, String)> {
    let hex = super::wire::to_hex(value);
    // One byte for the tag, one for a terminating NUL on the server side.
    let room = vallen_max.saturating_sub(2).max(2) & !1;
    if hex.len() <= room {
        return vec![(key.to_string(), format!("x{hex}"))];
    }
    let chunks: Vec<&str> = hex
        .as_bytes()
        .chunks(room)
        .map(|c| std::str::from_utf8(c).expect("hex is ASCII"))
        .collect();
    let mut out = vec![(key.to_string(), format!("n{}", chunks.len()))];
    for (i, c) in chunks.iter().enumerate() {
        out.push((format!("{key}#{i}"), format!("x{c}")));
    }
    out
}

/// What the main key of a value holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Encoded {
    Bytes(Vec<u8>),
    Chunks(usize),
}

pub fn decode_value(text: &str) -> Result<Encoded, String> {
    if let Some(h) = text.strip_prefix('x') {
        return super::wire::from_hex(h)
            .map(Encoded::Bytes)
            .ok_or_else(|| format!("value {text:.40?} is not hex"));
    }
    if let Some(n) = text.strip_prefix('n') {
        if let Ok(n) = n.parse::<usize>() {
            if n <= 1 << 20 {
                return Ok(Encoded::Chunks(n));
            }
        }
    }
    Err(format!("value {text:.40?} was not written by gpumpi"))
}

/// Group ranks by host name: the ranks sharing `hosts[rank]`, ascending.
pub fn node_ranks_from_hosts(hosts: &[String], rank: usize) -> Vec<usize> {
    (0..hosts.len())
        .filter(|&r| hosts[r] == hosts[rank])
        .collect()
}

struct Conn {
    reader: BufReader<Box<dyn Stream>>,
    timeout: Duration,
}

impl Conn {
    fn read_reply(&mut self, what: &str, timeout: Option<Duration>) -> Result<Reply, String> {
        self.reader
            .get_ref()
            .set_read_timeout_(timeout)
            .map_err(|e| format!("{what}: {e}"))?;
        let mut line = String::new();
        match self.reader.by_ref().take(MAX_LINE).read_line(&mut line) {
            Ok(0) => Err(format!("{what}: the launcher closed the PMI connection")),
            Ok(_) if !line.ends_with('\n') => Err(format!(
                "{what}: reply line longer than {MAX_LINE} bytes or cut short"
            )),
            Ok(_) => parse_line(&line).map_err(|e| format!("{what}: {e}")),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(format!(
                    "{what}: no reply within {:?} (GPUMPI_BOOTSTRAP_TIMEOUT)",
                    timeout.unwrap_or_default()
                ))
            }
            Err(e) => Err(format!("{what}: reading the reply: {e}")),
        }
    }

    /// Send a request and read the reply, which must be `cmd=<expect>`.
    fn call(
        &mut self,
        writer: &Mutex<Box<dyn Stream>>,
        cmd: &str,
        args: &[(&str, &str)],
        expect: &str,
        timeout: Option<Duration>,
    ) -> Result<Reply, String> {
        let line = format_line(cmd, args);
        {
            let mut w = writer.lock().unwrap_or_else(|e| e.into_inner());
            w.write_all(line.as_bytes())
                .and_then(|_| w.flush())
                .map_err(|e| format!("cmd={cmd}: sending: {e}"))?;
        }
        let r = self.read_reply(&format!("cmd={cmd}"), timeout)?;
        if r.cmd != expect {
            return Err(format!(
                "cmd={cmd}: expected cmd={expect} in reply, got cmd={}",
                r.cmd
            ));
        }
        Ok(r)
    }
}

pub struct Pmi1 {
    rank: usize,
    size: usize,
    appnum: usize,
    kvsname: String,
    job_id: String,
    keylen_max: usize,
    vallen_max: usize,
    conn: Mutex<Conn>,
    writer: Mutex<Box<dyn Stream>>,
    pending: Mutex<Vec<(String, Vec<u8>)>>,
    cache: Mutex<HashMap<(usize, String), Vec<u8>>>,
    /// Ranks on this node; `None` until the first fence.
    node: Mutex<Option<Vec<usize>>>,
    /// `PMI_HOSTNAME`: the launcher's name for this node.
    host: Option<String>,
}

fn fail(msg: String) -> MpiError {
    crate::mpi_err!(MPI_ERR_OTHER, "pmi1 bootstrap: {msg}")
}

fn env_usize(name: &str) -> MpiResult<usize> {
    let v = config::get(name).ok_or_else(|| fail(format!("{name} is not set")))?;
    v.trim()
        .parse()
        .map_err(|_| fail(format!("{name}={v:?} is not a non-negative integer")))
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length; gethostname NUL-terminates within it on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len() - 1) };
    if rc != 0 {
        return "localhost".into();
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// A job id for file names from a KVS name ("kvs_123_0" -> "p-kvs-123-0").
pub fn job_id_from(kvsname: &str) -> String {
    let mut id: String = kvsname
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    id.truncate(96);
    format!("p-{id}")
}

impl Pmi1 {
    /// Connect as the environment says (`PMI_FD` or `PMI_PORT`).
    pub fn connect_from_env() -> MpiResult<Self> {
        let timeout =
            Duration::from_secs(config::get_usize("GPUMPI_BOOTSTRAP_TIMEOUT").max(1) as u64);
        if let Some(fd) = config::get("PMI_FD") {
            let fd: i32 = fd
                .trim()
                .parse()
                .map_err(|_| fail(format!("PMI_FD={fd:?} is not a file descriptor number")))?;
            let rank = env_usize("PMI_RANK")?;
            let size = env_usize("PMI_SIZE")?;
            let s = socket_from_fd(fd)?;
            return Self::handshake(Box::new(s), Some((rank, size)), None, timeout);
        }
        let port = config::get("PMI_PORT")
            .ok_or_else(|| fail("neither PMI_FD nor PMI_PORT is set".into()))?;
        let id = config::get("PMI_ID").unwrap_or_else(|| "0".into());
        use std::net::ToSocketAddrs;
        let addrs: Vec<_> = port
            .to_socket_addrs()
            .map_err(|e| fail(format!("PMI_PORT={port:?} is not host:port: {e}")))?
            .collect();
        let mut last = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, timeout) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Self::handshake(Box::new(s), None, Some(&id), timeout);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(fail(format!(
            "cannot connect to PMI_PORT={port}: {}",
            last.map(|e| e.to_string())
                .unwrap_or_else(|| "no address".into())
        )))
    }

    /// The protocol's opening over a connected stream: `initack` (PMI_PORT only), `init`,
    /// `get_maxes`, `get_appnum`, `get_my_kvsname`. `known` = (rank, size) from the
    /// environment (PMI_FD); with `pmi_id` the server tells them. The node's name is
    /// `PMI_HOSTNAME`, else the host name.
    pub fn handshake(
        stream: Box<dyn Stream>,
        known: Option<(usize, usize)>,
        pmi_id: Option<&str>,
        timeout: Duration,
    ) -> MpiResult<Self> {
        let host = config::get("PMI_HOSTNAME");
        Self::handshake_on(stream, known, pmi_id, timeout, host)
    }

    /// [`Pmi1::handshake`] with the launcher's name for this node given (`None`: the host
    /// name; blank counts as none).
    pub fn handshake_on(
        stream: Box<dyn Stream>,
        known: Option<(usize, usize)>,
        pmi_id: Option<&str>,
        timeout: Duration,
        host: Option<String>,
    ) -> MpiResult<Self> {
        let writer = Mutex::new(stream.clone_box().map_err(|e| fail(e.to_string()))?);
        let mut conn = Conn {
            reader: BufReader::new(stream),
            timeout,
        };
        let t = Some(timeout);
        let (rank, size) = match (known, pmi_id) {
            (Some(rs), _) => rs,
            (None, Some(id)) => {
                conn.call(&writer, "initack", &[("pmiid", id)], "initack", t)
                    .map_err(fail)?;
                let (mut rank, mut size) = (None, None);
                for _ in 0..3 {
                    let r = conn.read_reply("initack", t).map_err(fail)?;
                    if r.cmd != "set" {
                        return Err(fail(format!(
                            "initack: expected cmd=set, got cmd={}",
                            r.cmd
                        )));
                    }
                    if r.get("rank").is_some() {
                        rank = Some(r.usize("rank").map_err(fail)?);
                    }
                    if r.get("size").is_some() {
                        size = Some(r.usize("size").map_err(fail)?);
                    }
                }
                match (rank, size) {
                    (Some(r), Some(s)) => (r, s),
                    _ => return Err(fail("initack: the launcher sent no rank or size".into())),
                }
            }
            (None, None) => return Err(fail("neither rank/size nor PMI_ID given".into())),
        };
        if rank >= size {
            return Err(fail(format!(
                "rank {rank} is not below the job size {size}"
            )));
        }
        let r = conn
            .call(
                &writer,
                "init",
                &[("pmi_version", "1"), ("pmi_subversion", "1")],
                "response_to_init",
                t,
            )
            .map_err(fail)?;
        r.check_rc("cmd=init").map_err(fail)?;
        let m = conn
            .call(&writer, "get_maxes", &[], "maxes", t)
            .map_err(fail)?;
        m.check_rc("cmd=get_maxes").map_err(fail)?;
        let keylen_max = m.usize("keylen_max").map_err(fail)?;
        let vallen_max = m.usize("vallen_max").map_err(fail)?;
        if vallen_max < 8 || keylen_max < 8 {
            return Err(fail(format!(
                "the launcher's limits keylen_max={keylen_max} vallen_max={vallen_max} are too small"
            )));
        }
        let a = conn
            .call(&writer, "get_appnum", &[], "appnum", t)
            .map_err(fail)?;
        let appnum = a.usize("appnum").unwrap_or(0);
        let k = conn
            .call(&writer, "get_my_kvsname", &[], "my_kvsname", t)
            .map_err(fail)?;
        k.check_rc("cmd=get_my_kvsname").map_err(fail)?;
        let kvsname = k
            .get("kvsname")
            .filter(|s| !s.is_empty())
            .ok_or_else(|| fail("cmd=get_my_kvsname: no kvsname in the reply".into()))?
            .to_string();
        tracing::debug!(
            "pmi1: rank {rank} of {size}, kvs {kvsname}, keylen_max {keylen_max}, vallen_max {vallen_max}"
        );
        let me = Pmi1 {
            rank,
            size,
            appnum,
            job_id: job_id_from(&kvsname),
            kvsname,
            keylen_max,
            vallen_max,
            conn: Mutex::new(conn),
            writer,
            pending: Mutex::new(Vec::new()),
            cache: Mutex::new(HashMap::new()),
            node: Mutex::new(if size == 1 { Some(vec![0]) } else { None }),
            host: host.map(|h| h.trim().to_string()).filter(|h| !h.is_empty()),
        };
        if size > 1 {
            let host = me.host.clone().unwrap_or_else(hostname);
            me.put(HOST_KEY, host.as_bytes());
        }
        Ok(me)
    }

    fn lock_conn(&self) -> std::sync::MutexGuard<'_, Conn> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get_text(&self, conn: &mut Conn, key: &str) -> MpiResult<String> {
        let t = Some(conn.timeout);
        let r = conn
            .call(
                &self.writer,
                "get",
                &[("kvsname", &self.kvsname), ("key", key)],
                "get_result",
                t,
            )
            .map_err(fail)?;
        if r.check_rc("").is_err() {
            crate::mpi_bail!(
                MPI_ERR_NAME,
                "pmi1 bootstrap: no value under {key:?} in the launcher's KVS{}",
                r.get("msg").map(|m| format!(" ({m})")).unwrap_or_default()
            );
        }
        Ok(r.get("value").unwrap_or("").to_string())
    }

    fn fetch(&self, rank: usize, key: &str) -> MpiResult<Vec<u8>> {
        let k = kvs_key(rank, key);
        let mut conn = self.lock_conn();
        let text = self.get_text(&mut conn, &k)?;
        match decode_value(&text).map_err(|e| fail(format!("key {k:?}: {e}")))? {
            Encoded::Bytes(b) => Ok(b),
            Encoded::Chunks(n) => {
                let mut out = Vec::new();
                for i in 0..n {
                    let ck = format!("{k}#{i}");
                    let t = self.get_text(&mut conn, &ck)?;
                    match decode_value(&t).map_err(|e| fail(format!("key {ck:?}: {e}")))? {
                        Encoded::Bytes(b) => out.extend(b),
                        Encoded::Chunks(_) => {
                            return Err(fail(format!("key {ck:?}: nested chunks")))
                        }
                    }
                }
                Ok(out)
            }
        }
    }

    fn learn_locality(&self) -> MpiResult<()> {
        if self.node.lock().unwrap().is_some() {
            return Ok(());
        }
        let mut hosts = Vec::with_capacity(self.size);
        for r in 0..self.size {
            let h = self
                .fetch(r, HOST_KEY)
                .map_err(|e| fail(format!("reading the host name of rank {r}: {}", e.msg)))?;
            hosts.push(String::from_utf8_lossy(&h).into_owned());
        }
        let nr = node_ranks_from_hosts(&hosts, self.rank);
        tracing::debug!("pmi1: rank {} shares its node with {nr:?}", self.rank);
        *self.node.lock().unwrap() = Some(nr);
        Ok(())
    }
}

/// The inherited PMI socket, after checking that `fd` is one.
fn socket_from_fd(fd: i32) -> MpiResult<UnixStream> {
    use std::os::unix::io::FromRawFd;
    // SAFETY: a zeroed stat struct is a valid out-parameter for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on any integer is safe; it fails with EBADF when fd is not open.
    if fd < 0 || unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(fail(format!(
            "PMI_FD={fd} is not an open file descriptor ({}); the process was not started by \
             a PMI-1 launcher, or its environment was copied from one",
            std::io::Error::last_os_error()
        )));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(fail(format!(
            "PMI_FD={fd} is not a socket; the process was not started by a PMI-1 launcher \
             (MPICH's mpiexec), or its environment was copied from one"
        )));
    }
    // SAFETY: fd is an open socket inherited from the launcher for this purpose; from now on
    // the stream owns it (read/write/setsockopt/dup work on any socket family).
    let s = unsafe { UnixStream::from_raw_fd(fd) };
    // Do not leak the PMI socket into programs this process starts.
    // SAFETY: fcntl on an open descriptor.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok(s)
}

impl Bootstrap for Pmi1 {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn node_ranks(&self) -> Vec<usize> {
        self.node
            .lock()
            .unwrap()
            .clone()
            .unwrap_or_else(|| vec![self.rank])
    }
    fn node_name(&self) -> Option<String> {
        self.host.clone()
    }
    fn appnum(&self) -> usize {
        self.appnum
    }
    fn job_id(&self) -> &str {
        &self.job_id
    }
    fn put(&self, key: &str, value: &[u8]) {
        let mut p = self.pending.lock().unwrap();
        p.retain(|(k, _)| k != key);
        p.push((key.to_string(), value.to_vec()));
    }
    fn fence(&self) -> MpiResult<()> {
        let puts = std::mem::take(&mut *self.pending.lock().unwrap());
        {
            let mut conn = self.lock_conn();
            let t = Some(conn.timeout);
            for (key, value) in &puts {
                for (k, v) in encode_value(&kvs_key(self.rank, key), value, self.vallen_max) {
                    if k.len() >= self.keylen_max {
                        return Err(fail(format!(
                            "put {key:?}: the KVS key {k:?} is longer than the launcher's \
                             keylen_max={}",
                            self.keylen_max
                        )));
                    }
                    let r = conn
                        .call(
                            &self.writer,
                            "put",
                            &[("kvsname", &self.kvsname), ("key", &k), ("value", &v)],
                            "put_result",
                            t,
                        )
                        .map_err(fail)?;
                    r.check_rc(&format!("put {k:?}")).map_err(fail)?;
                }
            }
            // The barrier waits for the slowest rank: no time limit.
            conn.call(&self.writer, "barrier_in", &[], "barrier_out", None)
                .map_err(fail)?
                .check_rc("barrier")
                .map_err(fail)?;
        }
        self.cache.lock().unwrap().clear();
        self.learn_locality()
    }
    fn get(&self, rank: usize, key: &str) -> MpiResult<Vec<u8>> {
        if rank >= self.size {
            crate::mpi_bail!(
                MPI_ERR_RANK,
                "bootstrap get: rank {rank} is not in a job of {}",
                self.size
            );
        }
        let ck = (rank, key.to_string());
        if let Some(v) = self.cache.lock().unwrap().get(&ck) {
            return Ok(v.clone());
        }
        let v = self.fetch(rank, key)?;
        self.cache.lock().unwrap().insert(ck, v.clone());
        Ok(v)
    }
    fn abort(&self, code: i32, msg: &str) -> ! {
        let code = if code == 0 { 1 } else { code };
        eprintln!("gpumpi: rank {} aborts the job ({code}): {msg}", self.rank);
        // hydra forwards stderr through its proxy and kills the job as soon as it reads the
        // abort: give the message above a moment to get through first.
        std::thread::sleep(Duration::from_millis(100));
        // Only the writer is needed: another thread may be waiting in a barrier, holding the
        // connection (a write in progress is short, so wait for it a little).
        let line = format_line("abort", &[("exitcode", &code.to_string())]);
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        let mut sent = false;
        while std::time::Instant::now() < deadline {
            if let Ok(mut w) = self.writer.try_lock() {
                sent = w.write_all(line.as_bytes()).and_then(|_| w.flush()).is_ok();
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if sent {
            // The launcher kills the job; give it the time to do so.
            std::thread::sleep(Duration::from_secs(5));
        } else {
            eprintln!(
                "gpumpi: rank {}: could not send abort to the launcher",
                self.rank
            );
        }
        std::process::exit(code);
    }
    fn finalize(&self) -> MpiResult<()> {
        let mut conn = self.lock_conn();
        let t = Some(conn.timeout);
        conn.call(&self.writer, "finalize", &[], "finalize_ack", t)
            .map_err(fail)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn parse_and_format() {
        let r = parse_line("cmd=get_result rc=0 value=x0a1b msg=success\n").unwrap();
        assert_eq!(r.cmd, "get_result");
        assert_eq!(r.get("value"), Some("x0a1b"));
        assert!(r.check_rc("get").is_ok());
        let r = parse_line("cmd=get_result rc=-1 msg=key not found").unwrap();
        assert_eq!(r.get("msg"), Some("key not found"));
        let e = r.check_rc("get k").unwrap_err();
        assert!(e.contains("rc=-1") && e.contains("key not found"), "{e}");
        assert!(parse_line("rc=0 value=1").is_err(), "no cmd");
        assert!(parse_line("garbage").is_err());
        assert!(parse_line("").is_err());
        assert!(parse_line("=x cmd").is_err());
        assert_eq!(
            format_line("put", &[("kvsname", "k"), ("key", "a"), ("value", "b")]),
            "cmd=put kvsname=k key=a value=b\n"
        );
        let m = parse_line("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=abc").unwrap();
        assert_eq!(m.usize("keylen_max"), Ok(64));
        assert!(m.usize("vallen_max").is_err());
        assert!(m.usize("nope").is_err());
    }

    #[test]
    fn keys_and_values() {
        assert_eq!(kvs_key(3, "shm.addr"), "3:shm.addr");
        assert_eq!(kvs_key(0, "a b=c"), "0:h6120623d63");
        for len in [0usize, 1, 10, 500, 511, 512, 3000] {
            let v: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let puts = encode_value("1:k", &v, 64);
            assert!(puts.iter().all(|(_, t)| t.len() <= 63), "len {len}");
            let got = match decode_value(&puts[0].1).unwrap() {
                Encoded::Bytes(b) => {
                    assert_eq!(puts.len(), 1);
                    b
                }
                Encoded::Chunks(n) => {
                    assert_eq!(puts.len(), n + 1);
                    let mut out = Vec::new();
                    for (i, (k, t)) in puts[1..].iter().enumerate() {
                        assert_eq!(k, &format!("1:k#{i}"));
                        match decode_value(t).unwrap() {
                            Encoded::Bytes(b) => out.extend(b),
                            _ => panic!("nested"),
                        }
                    }
                    out
                }
            };
            assert_eq!(got, v, "len {len}");
        }
        assert!(decode_value("xzz").is_err());
        assert!(decode_value("n").is_err());
        assert!(decode_value("hello").is_err());
        assert!(decode_value("n99999999999").is_err());
    }

    #[test]
    fn locality_from_hosts() {
        let h: Vec<String> = ["a", "b", "a", "b", "a"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(node_ranks_from_hosts(&h, 2), vec![0, 2, 4]);
        assert_eq!(node_ranks_from_hosts(&h, 3), vec![1, 3]);
        assert!(job_id_from("kvs_12_0")
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-'));
    }

    /// A PMI-1 server for `n` clients, one thread per client plus shared state, over
    /// socketpairs. `quirk` changes its behaviour for error tests.
    #[derive(Clone, Copy, PartialEq)]
    enum Quirk {
        None,
        BadInitRc,
        WrongReply,
        Silent,
        CloseAfterInit,
        GarbageMaxes,
    }

    struct Shared {
        kvs: Mutex<HashMap<String, String>>,
        barrier: std::sync::Barrier,
    }

    fn serve(
        mut s: UnixStream,
        sh: Arc<Shared>,
        quirk: Quirk,
        vallen: usize,
        log: Arc<Mutex<Vec<String>>>,
    ) {
        let mut rd = BufReader::new(s.try_clone().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            if rd.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            log.lock().unwrap().push(line.trim_end().to_string());
            let r = parse_line(&line).unwrap();
            let reply = match r.cmd.as_str() {
                "init" => match quirk {
                    Quirk::BadInitRc => "cmd=response_to_init rc=-1 msg=unsupported\n".into(),
                    Quirk::WrongReply => "cmd=barrier_out\n".into(),
                    Quirk::Silent => {
                        std::thread::sleep(Duration::from_secs(3));
                        return;
                    }
                    Quirk::CloseAfterInit => return,
                    _ => "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n".into(),
                },
                "get_maxes" if quirk == Quirk::GarbageMaxes => {
                    "cmd=maxes kvsname_max=256 keylen_max=6x4\n".to_string()
                }
                "get_maxes" => {
                    format!("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max={vallen}\n")
                }
                "get_appnum" => "cmd=appnum appnum=0\n".into(),
                "get_my_kvsname" => "cmd=my_kvsname kvsname=kvs_42_0\n".into(),
                "put" => {
                    assert_eq!(r.get("kvsname"), Some("kvs_42_0"));
                    let v = r.get("value").unwrap();
                    assert!(v.len() < vallen, "value longer than vallen_max");
                    sh.kvs
                        .lock()
                        .unwrap()
                        .insert(r.get("key").unwrap().into(), v.into());
                    "cmd=put_result rc=0 msg=success\n".into()
                }
                "barrier_in" => {
                    sh.barrier.wait();
                    "cmd=barrier_out\n".into()
                }
                "get" => match sh.kvs.lock().unwrap().get(r.get("key").unwrap()) {
                    Some(v) => format!("cmd=get_result rc=0 value={v} msg=success\n"),
                    None => "cmd=get_result rc=-1 msg=key_not_found\n".into(),
                },
                "finalize" => "cmd=finalize_ack\n".into(),
                "abort" => return,
                other => format!("cmd={other}_unknown rc=-1\n"),
            };
            if s.write_all(reply.as_bytes()).is_err() {
                return;
            }
        }
    }

    fn start(n: usize, quirk: Quirk, vallen: usize) -> (Vec<UnixStream>, Arc<Mutex<Vec<String>>>) {
        let sh = Arc::new(Shared {
            kvs: Mutex::new(HashMap::new()),
            barrier: std::sync::Barrier::new(n),
        });
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut clients = Vec::new();
        for _ in 0..n {
            let (a, b) = UnixStream::pair().unwrap();
            let (sh, log) = (sh.clone(), log.clone());
            std::thread::spawn(move || serve(b, sh, quirk, vallen, log));
            clients.push(a);
        }
        (clients, log)
    }

    #[test]
    fn job_over_a_fake_server() {
        let n = 4;
        let (clients, log) = start(n, Quirk::None, 64);
        let hs: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(rank, s)| {
                std::thread::spawn(move || {
                    let b =
                        Pmi1::handshake(Box::new(s), Some((rank, n)), None, Duration::from_secs(5))
                            .unwrap();
                    assert_eq!((b.rank(), b.size(), b.appnum()), (rank, n, 0));
                    assert_eq!(b.job_id(), "p-kvs-42-0");
                    let long: Vec<u8> = (0..1000).map(|i| (i * rank) as u8).collect();
                    b.put("short", format!("v{rank}").as_bytes());
                    b.put("long", &long);
                    b.put("odd key=1", b"");
                    b.fence().unwrap();
                    for q in 0..n {
                        assert_eq!(b.get(q, "short").unwrap(), format!("v{q}").as_bytes());
                        let want: Vec<u8> = (0..1000).map(|i| (i * q) as u8).collect();
                        assert_eq!(b.get(q, "long").unwrap(), want);
                        assert_eq!(b.get(q, "odd key=1").unwrap(), b"");
                    }
                    assert!(b.get(0, "missing").is_err());
                    assert!(b.get(n, "short").is_err());
                    // All ranks run on this host.
                    assert_eq!(b.node_ranks(), (0..n).collect::<Vec<_>>());
                    assert_eq!((b.local_rank(), b.local_size()), (rank, n));
                    b.fence().unwrap();
                    b.finalize().unwrap();
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let log = log.lock().unwrap();
        assert!(log
            .iter()
            .any(|l| l == "cmd=init pmi_version=1 pmi_subversion=1"));
        assert_eq!(log.iter().filter(|l| *l == "cmd=barrier_in").count(), 2 * n);
    }

    /// Ranks whose launcher names their nodes (hydra's `PMI_HOSTNAME`) are grouped by those
    /// names, whatever their host name: 4 ranks on "a", "a", "b", "b".
    #[test]
    fn nodes_from_the_launchers_host_names() {
        let n = 4;
        let (clients, _) = start(n, Quirk::None, 64);
        let hs: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(rank, s)| {
                std::thread::spawn(move || {
                    let host = if rank < 2 { "a" } else { " b " };
                    let b = Pmi1::handshake_on(
                        Box::new(s),
                        Some((rank, n)),
                        None,
                        Duration::from_secs(5),
                        Some(host.into()),
                    )
                    .unwrap();
                    b.fence().unwrap();
                    let want: Vec<usize> = if rank < 2 { vec![0, 1] } else { vec![2, 3] };
                    assert_eq!(b.node_ranks(), want);
                    assert_eq!((b.local_rank(), b.local_size()), (rank % 2, 2));
                    assert_eq!(b.node_name().as_deref(), Some(host.trim()));
                    b.finalize().unwrap();
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    }

    fn handshake_err(quirk: Quirk) -> String {
        let (mut c, _) = start(1, quirk, 64);
        match Pmi1::handshake(
            Box::new(c.remove(0)),
            Some((0, 2)),
            None,
            Duration::from_secs(1),
        ) {
            Ok(_) => panic!("handshake succeeded with quirk"),
            Err(e) => e.msg,
        }
    }

    #[test]
    fn bad_servers_are_errors_not_hangs_or_panics() {
        let e = handshake_err(Quirk::BadInitRc);
        assert!(e.contains("rc=-1") && e.contains("unsupported"), "{e}");
        let e = handshake_err(Quirk::WrongReply);
        assert!(e.contains("expected cmd=response_to_init"), "{e}");
        // "no reply within" proves the 1 s timeout fired (the silent server closes after 3 s).
        let e = handshake_err(Quirk::Silent);
        assert!(e.contains("no reply within"), "{e}");
        let e = handshake_err(Quirk::CloseAfterInit);
        assert!(e.contains("closed"), "{e}");
        let e = handshake_err(Quirk::GarbageMaxes);
        assert!(e.contains("keylen_max"), "{e}");
        // Rank not below size.
        let (mut c, _) = start(1, Quirk::None, 64);
        assert!(Pmi1::handshake(
            Box::new(c.remove(0)),
            Some((2, 2)),
            None,
            Duration::from_secs(1)
        )
        .is_err());
    }

    #[test]
    fn raw_garbage_and_overlong_lines() {
        for reply in [
            &b"\xff\xfe\n"[..],
            b"no equals here\n",
            b"cmd=response_to_init rc=0",
        ] {
            let (a, mut b) = UnixStream::pair().unwrap();
            let reply = reply.to_vec();
            let h = std::thread::spawn(move || {
                let mut buf = [0u8; 256];
                let _ = b.read(&mut buf);
                let _ = b.write_all(&reply);
                drop(b);
            });
            let r = Pmi1::handshake(Box::new(a), Some((0, 1)), None, Duration::from_secs(1));
            assert!(r.is_err());
            h.join().unwrap();
        }
    }

    #[test]
    fn pmi_port_initack() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let h = std::thread::spawn(move || {
            let mut rd = BufReader::new(b.try_clone().unwrap());
            let mut l = String::new();
            rd.read_line(&mut l).unwrap();
            assert_eq!(l, "cmd=initack pmiid=7\n");
            b.write_all(b"cmd=initack\ncmd=set size=3\ncmd=set rank=2\ncmd=set debug=0\n")
                .unwrap();
            for reply in [
                "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
                "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n",
                "cmd=appnum appnum=1\n",
                "cmd=my_kvsname kvsname=singinit_kvs_1\n",
            ] {
                l.clear();
                rd.read_line(&mut l).unwrap();
                b.write_all(reply.as_bytes()).unwrap();
            }
        });
        let p = Pmi1::handshake(Box::new(a), None, Some("7"), Duration::from_secs(2)).unwrap();
        assert_eq!((p.rank(), p.size(), p.appnum()), (2, 3, 1));
        h.join().unwrap();
    }

    #[test]
    fn pmi_fd_that_is_not_a_socket() {
        let f = std::fs::File::open("/dev/null").unwrap();
        use std::os::unix::io::AsRawFd;
        let e = socket_from_fd(f.as_raw_fd()).unwrap_err();
        assert!(e.msg.contains("is not a socket"), "{}", e.msg);
        let e = socket_from_fd(987_654).unwrap_err();
        assert!(e.msg.contains("not an open file descriptor"), "{}", e.msg);
    }
}
