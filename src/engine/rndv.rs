//! Which way the data of a host rendezvous travels: a pure function of what was measured about
//! the machine and the peer, so the choice is the same wherever the measurements are, and is
//! unit-tested on fixture machines.
//!
//! Two ways exist for a host receive buffer:
//! - **Read**: the receiver copies straight out of the sender's memory (CMA
//!   `process_vm_readv`): one copy, done by the receiver alone. The sender need not be on a core.
//! - **Stream**: the sender copies through the shared ring and the receiver copies out of it
//!   (CTS, then DATA frames): two copies running at once on two cores, each at cache speed,
//!   with a handoff per frame. It is only as fast as the slower of the two ranks gets a core:
//!   when either is descheduled, everything stops (each frame waits for a time slice).
//!
//! The model: streaming is worth it only where both ranks can be assumed to run at the same
//! time (each bound to a core of its own, not oversubscribed), where its two concurrent copies
//! cost no more CPU time per byte than the single read (`copy >= 2 x read` rate, both measured
//! at start-up), and where no streamed message from that peer has yet run slower than the read
//! would have (measured while running: a peer that was descheduled mid-stream is read from
//! then on). Everything else reads. Without CMA, everything streams.
//!
//! A read of a message whose sender offered a shared-copy slot ([`super::coop`]) is a
//! **shared read** wherever [`super::coop::share`] allows it (the ranks do not outnumber the
//! CPUs): both ranks copy chunks of it, each chunk once, so it uses two cores like the stream
//! with half the copying, and needs no more of the sender than the plain read (a sender that is
//! not in an MPI call leaves every chunk to the receiver). It is preferred to the stream.

use super::coop;
use crate::transport::CopyRates;

/// How the receiver gets a rendezvous message into a host buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RndvPath {
    /// Single copy out of the sender's memory (CMA).
    Read,
    /// Single copies in chunks, claimed by both ranks ([`super::coop`]).
    SharedRead,
    /// The sender streams it through the ring (CTS/DATA).
    Stream,
}

/// What is known about one peer, measured at start-up and while running.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct PeerFacts {
    /// Single-copy reads from this peer work (probed at start-up).
    pub can_read: bool,
    /// This rank and the peer are each bound to one core of their own and the ranks do not
    /// outnumber the cores: both can be assumed on a core at once.
    pub own_cores: bool,
    /// A streamed message from this peer ran slower than the single read would have.
    pub stream_stalled: bool,
    /// The ranks of this node outnumber its CPUs.
    pub crowded: bool,
}

/// The rendezvous path for a message of `len` bytes from a peer with `facts`, on a machine
/// whose copy rates were measured as `rates` (`None`: not measured); `offered`: the sender
/// offered a shared-copy slot. `forced_read_min` is the user's `GPUMPI_SHM_CMA_MIN` (read from
/// that size on, stream below), which overrides the model but never reads where reads do not
/// work.
pub fn choose(
    rates: Option<CopyRates>,
    facts: PeerFacts,
    forced_read_min: Option<usize>,
    len: usize,
    offered: bool,
) -> RndvPath {
    if !facts.can_read {
        return RndvPath::Stream;
    }
    let read = if offered && coop::share(len, facts.crowded) {
        RndvPath::SharedRead
    } else {
        RndvPath::Read
    };
    if let Some(min) = forced_read_min {
        return if len >= min { read } else { RndvPath::Stream };
    }
    if read == RndvPath::SharedRead || !facts.own_cores || facts.stream_stalled {
        return read;
    }
    match rates {
        Some(r) if r.copy_gbps >= 2.0 * r.read_gbps => RndvPath::Stream,
        _ => RndvPath::Read,
    }
}

/// The two ends of a rendezvous from a peer on another node, as the receiver knows them: for
/// each, whether its buffer is device memory and whether its transport takes device memory in
/// bulk transfers (the sender's from its RTS, the receiver's from
/// [`crate::transport::Transport::bulk_device`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkEnds {
    pub send_dev: bool,
    pub send_ok: bool,
    pub recv_dev: bool,
    pub recv_ok: bool,
}

/// Whether a rendezvous of `want` bytes from a peer on another node moves as one bulk
/// transfer (`min`: the transport's threshold for that peer, `None`: no bulk transfers with
/// it): from the threshold on, where every device end's transport takes device memory
/// (GPUDirect RDMA; otherwise the pipeline through host memory). Empty messages need no
/// transfer.
pub fn bulk(min: Option<usize>, want: usize, ends: BulkEnds) -> bool {
    want > 0
        && min.is_some_and(|m| want >= m)
        && (!ends.send_dev || ends.send_ok)
        && (!ends.recv_dev || ends.recv_ok)
}

/// Why [`bulk`] says no, for the log.
pub fn why_not_bulk(min: Option<usize>, want: usize, ends: BulkEnds) -> &'static str {
    match min {
        None => "no bulk transfers with that rank",
        Some(m) if want < m => "below GPUMPI_NET_BULK_MIN",
        _ if ends.send_dev && !ends.send_ok => {
            "the sender offered no GPUDirect RDMA: its network backend cannot send from device \
             memory, or not from this buffer"
        }
        _ if ends.recv_dev && !ends.recv_ok => {
            "this rank's network backend cannot receive into device memory"
        }
        _ => "empty message",
    }
}

/// Whether a streamed message of `bytes` that took `secs` from CTS to its last byte ran slower
/// than the single read would have at the measured `rates` (unmeasured: any stream that took
/// longer than a copy at 1 GB/s).
pub fn stream_stalled(rates: Option<CopyRates>, bytes: usize, secs: f64) -> bool {
    let read_gbps = rates.map_or(1.0, |r| r.read_gbps);
    secs > 0.0 && (bytes as f64 / secs / 1e9) < read_gbps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(copy: f64, read: f64) -> Option<CopyRates> {
        Some(CopyRates {
            copy_gbps: copy,
            read_gbps: read,
            near_read_gbps: read,
        })
    }

    const DEDICATED: PeerFacts = PeerFacts {
        can_read: true,
        own_cores: true,
        stream_stalled: false,
        crowded: false,
    };
    const SHARED: PeerFacts = PeerFacts {
        can_read: true,
        own_cores: false,
        stream_stalled: false,
        crowded: false,
    };

    /// Unbound ranks (the default of most launchers, and any loaded machine) always read,
    /// whatever the copy rates say.
    #[test]
    fn unbound_ranks_read_at_every_size() {
        for r in [rates(40.0, 5.0), rates(10.0, 10.0), None] {
            for len in [16 << 10, 64 << 10, 1 << 20, 64 << 20] {
                assert_eq!(choose(r, SHARED, None, len, false), RndvPath::Read);
            }
        }
    }

    /// Bound ranks stream only where the concurrent copies are at least twice the read rate.
    #[test]
    fn bound_ranks_stream_where_copies_beat_the_read() {
        // A machine with cache-speed copies far above process_vm_readv.
        assert_eq!(
            choose(rates(40.0, 8.0), DEDICATED, None, 1 << 20, false),
            RndvPath::Stream
        );
        assert_eq!(
            choose(rates(16.0, 8.0), DEDICATED, None, 1 << 20, false),
            RndvPath::Stream
        );
        // A machine where the read is nearly as fast as a copy.
        assert_eq!(
            choose(rates(15.9, 8.0), DEDICATED, None, 1 << 20, false),
            RndvPath::Read
        );
        assert_eq!(
            choose(rates(12.0, 11.0), DEDICATED, None, 64 << 10, false),
            RndvPath::Read
        );
        // Unmeasured rates: the read (needs only the receiver on a core).
        assert_eq!(
            choose(None, DEDICATED, None, 1 << 20, false),
            RndvPath::Read
        );
    }

    #[test]
    fn a_stalled_stream_turns_a_peer_to_reads() {
        let stalled = PeerFacts {
            stream_stalled: true,
            ..DEDICATED
        };
        assert_eq!(
            choose(rates(40.0, 8.0), stalled, None, 1 << 20, false),
            RndvPath::Read
        );
    }

    #[test]
    fn without_cma_everything_streams() {
        let no_cma = PeerFacts {
            can_read: false,
            ..SHARED
        };
        for forced in [None, Some(0), Some(1 << 20)] {
            assert_eq!(
                choose(rates(40.0, 8.0), no_cma, forced, 8 << 20, false),
                RndvPath::Stream
            );
        }
    }

    #[test]
    fn the_users_threshold_overrides_the_model() {
        assert_eq!(
            choose(rates(40.0, 8.0), SHARED, Some(1 << 20), 64 << 10, false),
            RndvPath::Stream
        );
        assert_eq!(
            choose(rates(40.0, 8.0), SHARED, Some(1 << 20), 1 << 20, false),
            RndvPath::Read
        );
        assert_eq!(
            choose(rates(40.0, 8.0), DEDICATED, Some(0), 16 << 10, false),
            RndvPath::Read
        );
    }

    const HOST: BulkEnds = BulkEnds {
        send_dev: false,
        send_ok: false,
        recv_dev: false,
        recv_ok: false,
    };

    #[test]
    fn bulk_takes_host_messages_from_the_threshold_on() {
        let min = Some(256 << 10);
        assert!(!bulk(min, (256 << 10) - 1, HOST));
        assert!(bulk(min, 256 << 10, HOST));
        assert!(bulk(min, 64 << 20, HOST));
        // A threshold of 0 takes every non-empty message; none is ever taken without one.
        assert!(bulk(Some(0), 1, HOST));
        assert!(!bulk(Some(0), 0, HOST));
        assert!(!bulk(None, 64 << 20, HOST));
        assert_eq!(
            why_not_bulk(None, 64 << 20, HOST),
            "no bulk transfers with that rank"
        );
        assert_eq!(why_not_bulk(min, 1000, HOST), "below GPUMPI_NET_BULK_MIN");
    }

    /// A device end takes the bulk transfer (GPUDirect RDMA) only where its own transport
    /// takes device memory; a host end needs nothing of its transport; every mix of the two.
    #[test]
    fn bulk_takes_device_ends_only_where_their_transport_can() {
        let min = Some(64 << 10);
        let big = 1 << 20;
        for send_dev in [false, true] {
            for recv_dev in [false, true] {
                for send_ok in [false, true] {
                    for recv_ok in [false, true] {
                        let e = BulkEnds {
                            send_dev,
                            send_ok,
                            recv_dev,
                            recv_ok,
                        };
                        let want = (!send_dev || send_ok) && (!recv_dev || recv_ok);
                        assert_eq!(bulk(min, big, e), want, "{e:?}");
                        // Below the threshold, the pipeline (or frames) whatever the ends.
                        assert!(!bulk(min, (64 << 10) - 1, e), "{e:?}");
                        if !want {
                            let why = why_not_bulk(min, big, e);
                            let side = if send_dev && !send_ok {
                                "sender"
                            } else {
                                "this rank"
                            };
                            assert!(why.contains(side), "{e:?}: {why}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn stall_is_a_rate_below_the_read() {
        let r = rates(40.0, 8.0);
        // 1 MiB in 100 us = 10.5 GB/s: faster than the read.
        assert!(!stream_stalled(r, 1 << 20, 100e-6));
        // 1 MiB in 1 ms = 1 GB/s (a time slice lost): stalled.
        assert!(stream_stalled(r, 1 << 20, 1e-3));
        assert!(!stream_stalled(None, 1 << 20, 100e-6));
        assert!(stream_stalled(None, 1 << 20, 5e-3));
    }

    /// A sender's offer turns every read of two chunks or more into a shared read (and a
    /// stream on bound ranks too: two cores with half the copying), except where the ranks
    /// outnumber the CPUs; without CMA it streams all the same.
    #[test]
    fn an_offered_slot_makes_a_shared_read() {
        let big = coop::MIN_BYTES;
        for facts in [DEDICATED, SHARED] {
            for r in [rates(40.0, 8.0), rates(10.0, 10.0), None] {
                assert_eq!(choose(r, facts, None, big, true), RndvPath::SharedRead);
                assert_eq!(choose(r, facts, None, 64 << 20, true), RndvPath::SharedRead);
                assert_eq!(choose(r, facts, Some(0), big, true), RndvPath::SharedRead);
            }
        }
        // Below two chunks: the choice without an offer.
        assert_eq!(
            choose(rates(40.0, 8.0), DEDICATED, None, big - 1, true),
            RndvPath::Stream
        );
        assert_eq!(
            choose(rates(40.0, 8.0), SHARED, None, big - 1, true),
            RndvPath::Read
        );
        let crowded = PeerFacts {
            crowded: true,
            ..SHARED
        };
        assert_eq!(
            choose(rates(40.0, 8.0), crowded, None, 64 << 20, true),
            RndvPath::Read
        );
        let no_cma = PeerFacts {
            can_read: false,
            ..DEDICATED
        };
        assert_eq!(
            choose(rates(40.0, 8.0), no_cma, None, 64 << 20, true),
            RndvPath::Stream
        );
        // The user's threshold still streams below it.
        assert_eq!(
            choose(rates(40.0, 8.0), SHARED, Some(1 << 30), 64 << 20, true),
            RndvPath::Stream
        );
    }
}
