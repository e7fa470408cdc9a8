//! libc socket calls that std does not offer: interface enumeration (`getifaddrs`), a
//! nonblocking `connect`, `send`/`recv` that never raise `SIGPIPE`, `poll`, and an `eventfd`
//! used to wake a thread blocked in `poll`. Safe wrappers; the network transport
//! (`transport::net`) uses nothing else from libc.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// One address of one network interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfAddr {
    pub name: String,
    pub addr: IpAddr,
    /// IPv6 scope (the interface index) of a link-local address, else 0.
    pub scope_id: u32,
    pub up: bool,
    pub loopback: bool,
}

/// Every IPv4 and IPv6 address of every interface, in the kernel's order.
pub fn interfaces() -> io::Result<Vec<IfAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we own and free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: p is a node of the list getifaddrs returned, valid until freeifaddrs.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr is non-null and points at a sockaddr whose family field is valid.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let (addr, scope_id) = match family {
            libc::AF_INET => {
                // SAFETY: family AF_INET means the sockaddr is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                (
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))),
                    0,
                )
            }
            libc::AF_INET6 => {
                // SAFETY: family AF_INET6 means the sockaddr is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                (
                    IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)),
                    sin6.sin6_scope_id,
                )
            }
            _ => continue,
        };
        let flags = ifa.ifa_flags;
        out.push(IfAddr {
            name,
            addr,
            scope_id,
            up: flags & libc::IFF_UP as u32 != 0,
            loopback: flags & libc::IFF_LOOPBACK as u32 != 0,
        });
    }
    // SAFETY: head came from getifaddrs and is freed once; no reference into it survives.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// Starts a TCP connection to `addr` without waiting for it: the returned stream is nonblocking
/// and the connection is established when it polls writable with no `take_error()`. With
/// `from`, the socket is bound to that local address first (port 0: any), so that its packets
/// leave with that source address (and, under source routing, through its interface).
pub fn connect_nonblocking(addr: &SocketAddr, from: Option<&SocketAddr>) -> io::Result<TcpStream> {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket(2) call; the descriptor is owned by the OwnedFd right after.
    let fd = unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    if let Some(from) = from {
        let (ss, len) = sockaddr(from);
        // SAFETY: ss holds a sockaddr of `len` bytes; fd is a valid socket.
        let r = unsafe { libc::bind(fd, &ss as *const _ as *const libc::sockaddr, len as u32) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let (ss, len) = sockaddr(addr);
    // SAFETY: ss holds a sockaddr of `len` bytes; fd is a valid socket.
    let r = unsafe { libc::connect(fd, &ss as *const _ as *const libc::sockaddr, len as u32) };
    if r != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    Ok(TcpStream::from(owned))
}

/// `addr` as a C socket address and its length.
fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, usize) {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
            let sin = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above.
            let sin6 = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_scope_id = a.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len)
}

/// `send` without blocking and without `SIGPIPE` (a closed peer is an `EPIPE` error, never a
/// signal that would kill an application linking the library). `Ok(0)` only for an empty `buf`;
/// a full socket buffer is `ErrorKind::WouldBlock`.
pub fn send_nb(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: buf is a valid readable slice of buf.len() bytes.
    let r = unsafe {
        libc::send(
            fd,
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// [`send_nb`] of `a` followed by `b` in one `sendmsg` (a message header and its payload leave
/// in one segment where they fit). Returns the bytes written from `a` then `b` together.
pub fn send2_nb(fd: RawFd, a: &[u8], b: &[u8]) -> io::Result<usize> {
    let mut iov = [
        libc::iovec {
            iov_base: a.as_ptr() as *mut libc::c_void,
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        },
    ];
    // SAFETY: a zeroed msghdr is valid; it points at two iovecs describing readable slices
    // that outlive the call; sendmsg does not write through iov_base.
    let r = unsafe {
        let mut m: libc::msghdr = std::mem::zeroed();
        m.msg_iov = iov.as_mut_ptr();
        m.msg_iovlen = 2;
        libc::sendmsg(fd, &m, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT)
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// [`send_nb`] of the slices of `bufs` in order, in one `sendmsg` (at most [`MAX_IOV`] of
/// them): the headers and payloads of several queued messages leave in one call. Returns the
/// bytes written, counted across the slices in order.
pub fn sendv_nb(fd: RawFd, bufs: &[&[u8]]) -> io::Result<usize> {
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; MAX_IOV];
    let n = bufs.len().min(MAX_IOV);
    for (v, b) in iov.iter_mut().zip(&bufs[..n]) {
        v.iov_base = b.as_ptr() as *mut libc::c_void;
        v.iov_len = b.len();
    }
    // SAFETY: a zeroed msghdr is valid; it points at n iovecs describing readable slices that
    // outlive the call; sendmsg does not write through iov_base.
    let r = unsafe {
        let mut m: libc::msghdr = std::mem::zeroed();
        m.msg_iov = iov.as_mut_ptr();
        m.msg_iovlen = n as _;
        libc::sendmsg(fd, &m, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT)
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Most slices one [`sendv_nb`] writes.
pub const MAX_IOV: usize = 64;

/// [`recv_nb`] into `a`, then (once `a` is full) into `b`, in one `readv`: a payload read
/// straight into its receive buffer and the header behind it. Returns the bytes read into
/// `a` then `b` together; `Ok(0)` means the peer closed the connection.
pub fn recv2_nb(fd: RawFd, a: &mut [u8], b: &mut [u8]) -> io::Result<usize> {
    let mut iov = [
        libc::iovec {
            iov_base: a.as_mut_ptr().cast(),
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        },
    ];
    // SAFETY: a zeroed msghdr is valid; it points at two iovecs describing writable slices
    // that outlive the call.
    let r = unsafe {
        let mut m: libc::msghdr = std::mem::zeroed();
        m.msg_iov = iov.as_mut_ptr();
        m.msg_iovlen = 2;
        libc::recvmsg(fd, &mut m, libc::MSG_DONTWAIT)
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `recv` without blocking. `Ok(0)` for a non-empty `buf` means the peer closed the connection.
pub fn recv_nb(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is a valid writable slice of buf.len() bytes.
    let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

pub use libc::pollfd as PollFd;
pub const POLLIN: i16 = libc::POLLIN;
pub const POLLOUT: i16 = libc::POLLOUT;
pub const POLLERR: i16 = libc::POLLERR | libc::POLLHUP;

/// `poll(2)`: waits until one of `fds` is ready or `timeout_ms` passed (-1: no limit).
/// Returns how many are ready; an interrupted wait is `Ok(0)`.
pub fn poll(fds: &mut [PollFd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: fds is a valid array of fds.len() pollfd structures.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    ready_count(r)
}

/// The result of a `poll`-like call: the number of ready descriptors, an interrupted wait
/// as none.
fn ready_count(r: libc::c_int) -> io::Result<usize> {
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(r as usize)
}

/// `ppoll(2)` with a timeout of `timeout` (rounded down to whole nanoseconds): like [`poll`]
/// for waits shorter than a millisecond.
pub fn ppoll(fds: &mut [PollFd], timeout: std::time::Duration) -> io::Result<usize> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: fds is a valid array of fds.len() pollfd structures; ts a valid timespec; a
    // null signal mask keeps the thread's mask.
    let r = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    ready_count(r)
}

/// A Linux `eventfd`: [`EventFd::signal`] makes it poll readable until [`EventFd::clear`].
pub struct EventFd(OwnedFd);

impl EventFd {
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain eventfd(2) call; the descriptor is owned right after.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn signal(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a valid buffer to our eventfd; a full counter (EAGAIN)
        // still leaves it readable, which is all a signal needs.
        unsafe { libc::write(self.0.as_raw_fd(), one.as_ptr().cast(), 8) };
    }

    pub fn clear(&self) {
        let mut v = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a valid buffer; EAGAIN (not signalled) is fine.
        unsafe { libc::read(self.0.as_raw_fd(), v.as_mut_ptr().cast(), 8) };
    }

    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}
