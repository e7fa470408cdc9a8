//! Passing file descriptors between the processes of one node over Unix stream sockets
//! (`SCM_RIGHTS`), and asking a socket's peer who it is (`SO_PEERCRED`). std has no stable API
//! for either; these are the only libc calls the cuMem IPC path needs (`gpu::fdshare`).
//!
//! Contract: [`send`] writes all of `data` with at most one descriptor attached to its first
//! byte; [`recv_exact`] reads exactly `buf.len()` bytes and returns the descriptor that came
//! with them, if any (received close-on-exec; a second one would be closed and reported).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// Room for one descriptor's control message.
const CMSG_SPACE: usize = 64;

/// A system call's byte count, retried when a signal interrupted it.
fn retry(mut call: impl FnMut() -> isize) -> io::Result<usize> {
    loop {
        let n = call();
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Write `data`, attaching `fd` (if any) to it.
pub fn send(s: &UnixStream, data: &[u8], fd: Option<RawFd>) -> io::Result<()> {
    if data.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a descriptor needs at least one byte of data",
        ));
    }
    let mut ctl = [0u64; CMSG_SPACE / 8];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain data; every pointer set below outlives the sendmsg call.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = &mut iov;
    m.msg_iovlen = 1;
    if let Some(fd) = fd {
        // SAFETY: CMSG_SPACE/CMSG_LEN only compute sizes; the buffer holds one int's message.
        let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
        assert!(space <= CMSG_SPACE);
        m.msg_control = ctl.as_mut_ptr() as *mut libc::c_void;
        m.msg_controllen = space as _;
        // SAFETY: msg_control points at `space` zeroed, aligned bytes: CMSG_FIRSTHDR is
        // non-null and CMSG_DATA has room for one RawFd.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&m);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut RawFd, fd);
        }
    }
    // SAFETY: `m` describes live buffers (above); MSG_NOSIGNAL: a closed peer is an error.
    let n = retry(|| unsafe { libc::sendmsg(s.as_raw_fd(), &m, libc::MSG_NOSIGNAL) })?;
    if n < data.len() {
        use std::io::Write;
        (&*s).write_all(&data[n..])?;
    }
    Ok(())
}

/// Read exactly `buf.len()` bytes (at least one); the descriptor sent with them, if any.
pub fn recv_exact(s: &UnixStream, buf: &mut [u8]) -> io::Result<Option<OwnedFd>> {
    if buf.is_empty() {
        return Ok(None);
    }
    let mut ctl = [0u64; CMSG_SPACE / 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: as in `send`.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = &mut iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl.as_mut_ptr() as *mut libc::c_void;
    m.msg_controllen = CMSG_SPACE as _;
    // SAFETY: `m` describes `buf` and `ctl`, both live and writable.
    let n = retry(|| unsafe { libc::recvmsg(s.as_raw_fd(), &mut m, libc::MSG_CMSG_CLOEXEC) })?;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the peer closed the socket",
        ));
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg_control/msg_controllen; CMSG_* walk only within them.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&m);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c) as *const u8;
                let bytes = (*c).cmsg_len as usize - (data as usize - c as usize);
                for k in 0..bytes / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(
                        data.add(k * std::mem::size_of::<RawFd>()) as *const RawFd
                    );
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            c = libc::CMSG_NXTHDR(&m, c);
        }
    }
    if m.msg_flags & libc::MSG_CTRUNC != 0 || fds.len() > 1 {
        return Err(io::Error::other(
            "more than one descriptor (or a truncated control message) received",
        ));
    }
    if n < buf.len() {
        use std::io::Read;
        (&*s).read_exact(&mut buf[n..])?;
    }
    Ok(fds.pop())
}

/// The user id of the process at the other end of `s`.
pub fn peer_uid(s: &UnixStream) -> io::Result<u32> {
    // SAFETY: ucred is plain data; getsockopt writes at most `len` bytes into it.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// This process's real user id.
pub fn my_uid() -> u32 {
    // SAFETY: getuid has no failure mode.
    unsafe { libc::getuid() }
}

/// Test helper: an open, already unlinked temporary file holding `data` (`tag` keeps the names
/// of concurrent tests apart).
#[cfg(test)]
pub(crate) fn unlinked_file(tag: &str, data: &[u8]) -> io::Result<std::fs::File> {
    use std::io::Write;
    let p = std::env::temp_dir().join(format!("gpumpi-{tag}-{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)?;
    std::fs::remove_file(&p)?;
    f.write_all(data)?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};

    #[test]
    fn a_descriptor_crosses_with_its_data() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut f = unlinked_file("fdpass", b"through the socket").unwrap();
        f.rewind().unwrap();
        send(&a, b"hello", Some(f.as_raw_fd())).unwrap();
        drop(f);
        let mut buf = [0u8; 5];
        let fd = recv_exact(&b, &mut buf).unwrap().expect("a descriptor");
        assert_eq!(&buf, b"hello");
        let mut got = String::new();
        let mut g = std::fs::File::from(fd);
        g.rewind().unwrap();
        g.read_to_string(&mut got).unwrap();
        assert_eq!(got, "through the socket");
    }

    #[test]
    fn data_without_a_descriptor_and_split_reads() {
        let (a, b) = UnixStream::pair().unwrap();
        send(&a, b"abc", None).unwrap();
        (&a).write_all(b"def").unwrap();
        let mut buf = [0u8; 6];
        assert!(recv_exact(&b, &mut buf).unwrap().is_none());
        assert_eq!(&buf, b"abcdef");
        drop(a);
        assert_eq!(
            recv_exact(&b, &mut buf).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }

    #[test]
    fn peer_is_this_user() {
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(peer_uid(&a).unwrap(), my_uid());
    }
}
