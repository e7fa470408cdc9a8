//! Interface selection (`GPUMPI_NET_IFNAME`, the syntax of `NCCL_SOCKET_IFNAME`): a
//! comma-separated list of name prefixes (`eth,ib`); a leading `^` excludes the listed ones
//! instead (`^docker,lo`); a leading `=` (after `^` if both) matches names exactly (`=eth0`).
//! Pure functions over the address list, tested without a network.

use crate::sys::socket::IfAddr;
use std::net::IpAddr;

/// A parsed interface filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfFilter {
    pub exclude: bool,
    pub exact: bool,
    pub names: Vec<String>,
}

impl IfFilter {
    pub fn parse(spec: &str) -> IfFilter {
        let mut s = spec.trim();
        let exclude = s.starts_with('^');
        if exclude {
            s = &s[1..];
        }
        let exact = s.starts_with('=');
        if exact {
            s = &s[1..];
        }
        let names = s
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect();
        IfFilter {
            exclude,
            exact,
            names,
        }
    }

    pub fn matches(&self, name: &str) -> bool {
        let hit = self.names.iter().any(|n| {
            if self.exact {
                name == n
            } else {
                name.starts_with(n.as_str())
            }
        });
        hit != self.exclude
    }
}

/// Address family restriction (`GPUMPI_NET_FAMILY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Any,
    V4,
    V6,
}

impl Family {
    pub fn parse(s: &str) -> Option<Family> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "any" => Some(Family::Any),
            "4" | "ipv4" | "inet" | "af_inet" => Some(Family::V4),
            "6" | "ipv6" | "inet6" | "af_inet6" => Some(Family::V6),
            _ => None,
        }
    }

    fn allows(self, a: &IpAddr) -> bool {
        match self {
            Family::Any => true,
            Family::V4 => a.is_ipv4(),
            Family::V6 => a.is_ipv6(),
        }
    }
}

/// Prefixes of container and VM bridges the default selection skips.
const BRIDGE_PREFIXES: &[&str] = &["docker", "virbr", "br-", "veth"];

/// Picks one address per interface, interfaces in the system's order. With `spec`, the
/// interfaces it selects; without, every interface that is up except loopback and container
/// bridges, falling back to loopback when nothing else exists. Per interface, IPv4 comes
/// before IPv6, and a global IPv6 address before a link-local one.
pub fn select(addrs: &[IfAddr], spec: Option<&str>, family: Family) -> Vec<IfAddr> {
    let usable = |a: &&IfAddr| a.up && family.allows(&a.addr);
    let picked: Vec<&IfAddr> = match spec {
        Some(s) => {
            let f = IfFilter::parse(s);
            addrs
                .iter()
                .filter(usable)
                .filter(|a| f.matches(&a.name))
                .collect()
        }
        None => {
            let normal: Vec<&IfAddr> = addrs
                .iter()
                .filter(usable)
                .filter(|a| !a.loopback && !BRIDGE_PREFIXES.iter().any(|p| a.name.starts_with(p)))
                .collect();
            if normal.is_empty() {
                addrs.iter().filter(usable).filter(|a| a.loopback).collect()
            } else {
                normal
            }
        }
    };
    let rank = |a: &IfAddr| match a.addr {
        IpAddr::V4(_) => 0,
        IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 != 0xfe80 => 1,
        IpAddr::V6(_) => 2,
    };
    let mut out: Vec<IfAddr> = Vec::new();
    for a in picked {
        match out.iter_mut().find(|o| o.name == a.name) {
            Some(o) if rank(a) < rank(o) => *o = a.clone(),
            Some(_) => {}
            None => out.push(a.clone()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(name: &str, addr: &str, loopback: bool) -> IfAddr {
        IfAddr {
            name: name.into(),
            addr: addr.parse().unwrap(),
            scope_id: 0,
            up: true,
            loopback,
        }
    }

    fn fixture() -> Vec<IfAddr> {
        vec![
            a("lo", "127.0.0.1", true),
            a("lo", "::1", true),
            a("eth0", "fe80::1", false),
            a("eth0", "fd00::2", false),
            a("eth0", "192.0.2.2", false),
            a("docker0", "172.17.0.1", false),
            a("virbr0", "192.168.122.1", false),
            a("ib0", "10.0.0.1", false),
            a("eth10", "10.1.0.1", false),
        ]
    }

    fn names(v: &[IfAddr]) -> Vec<String> {
        v.iter().map(|a| format!("{}={}", a.name, a.addr)).collect()
    }

    #[test]
    fn parse_forms() {
        assert_eq!(
            IfFilter::parse("^=eth0, lo"),
            IfFilter {
                exclude: true,
                exact: true,
                names: vec!["eth0".into(), "lo".into()]
            }
        );
        let f = IfFilter::parse("eth");
        assert!(f.matches("eth0") && f.matches("eth10") && !f.matches("ib0"));
        let f = IfFilter::parse("=eth1");
        assert!(f.matches("eth1") && !f.matches("eth10"));
        let f = IfFilter::parse("^docker,lo");
        assert!(f.matches("eth0") && !f.matches("docker0") && !f.matches("lo"));
    }

    #[test]
    fn default_skips_loopback_and_bridges_and_prefers_ipv4() {
        let s = select(&fixture(), None, Family::Any);
        assert_eq!(
            names(&s),
            ["eth0=192.0.2.2", "ib0=10.0.0.1", "eth10=10.1.0.1"]
        );
        let s = select(&fixture(), None, Family::V6);
        assert_eq!(
            names(&s),
            ["eth0=fd00::2"],
            "a global IPv6 address before link-local"
        );
    }

    #[test]
    fn default_falls_back_to_loopback() {
        let only_lo: Vec<_> = fixture().into_iter().filter(|a| a.loopback).collect();
        assert_eq!(
            names(&select(&only_lo, None, Family::Any)),
            ["lo=127.0.0.1"]
        );
        assert_eq!(names(&select(&only_lo, None, Family::V6)), ["lo=::1"]);
    }

    #[test]
    fn explicit_specs() {
        let f = fixture();
        assert_eq!(
            names(&select(&f, Some("=eth1"), Family::Any)),
            Vec::<String>::new()
        );
        assert_eq!(
            names(&select(&f, Some("=eth10"), Family::Any)),
            ["eth10=10.1.0.1"]
        );
        assert_eq!(
            names(&select(&f, Some("lo"), Family::Any)),
            ["lo=127.0.0.1"]
        );
        assert_eq!(
            names(&select(&f, Some("^eth,lo"), Family::Any)),
            ["docker0=172.17.0.1", "virbr0=192.168.122.1", "ib0=10.0.0.1"]
        );
        let mut down = f.clone();
        down[7].up = false;
        assert_eq!(
            names(&select(&down, Some("ib"), Family::Any)),
            Vec::<String>::new()
        );
    }
}
