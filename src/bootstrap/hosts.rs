//! Where `mpirun` places ranks: host lists (`--host a:2,b:2`), hostfiles (Open MPI's
//! `host slots=N` lines and hydra's `host:N`), and the mapping of ranks onto slots
//! (`--map-by slot|node`). Pure functions, unit-tested without a network.
//!
//! Semantics (as Open MPI's): a host named without a count has one slot; naming a host again
//! adds its slots; without `-n` the job fills every slot; more ranks than slots is an error
//! unless oversubscription is allowed. Every name that means this machine (`localhost`, a
//! loopback address, the host name, its short form) is one node, the local one, whose ranks
//! mpirun forks itself; other hosts are started through the launch agent.

/// A host and its slots, in the order of first mention.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSlots {
    pub name: String,
    pub slots: usize,
}

/// How ranks are laid over the slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapBy {
    /// Fill each host's slots before moving to the next (Open MPI's default).
    Slot,
    /// One rank per host in turn, skipping hosts whose slots are full.
    Node,
}

impl MapBy {
    pub fn parse(s: &str) -> Result<MapBy, String> {
        match s.to_ascii_lowercase().as_str() {
            "slot" | "core" => Ok(MapBy::Slot),
            "node" => Ok(MapBy::Node),
            _ => Err(format!("--map-by {s:?}: must be slot or node")),
        }
    }
}

/// One node of a placed job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// The host name as listed (the machine's host name for the local node).
    pub name: String,
    /// Whether it is this machine (ranks forked by mpirun itself).
    pub local: bool,
    /// Its ranks, ascending.
    pub ranks: Vec<usize>,
}

/// Ranks placed on nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Nodes in the order of first mention; every node has at least one rank.
    pub nodes: Vec<Node>,
    /// The node index of each rank.
    pub node_of: Vec<usize>,
}

impl Placement {
    /// `(local rank, local size)` of `rank`: its position among its node's ranks.
    pub fn local(&self, rank: usize) -> (usize, usize) {
        let n = &self.nodes[self.node_of[rank]];
        (
            n.ranks.iter().position(|&r| r == rank).unwrap_or(0),
            n.ranks.len(),
        )
    }
}

fn check_name(name: &str, what: &str) -> Result<(), String> {
    if name.is_empty()
        || name.starts_with('-')
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._:[]%".contains(c))
    {
        return Err(format!("{what}: {name:?} is not a valid host name"));
    }
    Ok(())
}

fn parse_slots(v: &str, what: &str) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(k) if k > 0 => Ok(k),
        _ => Err(format!(
            "{what}: slot count {v:?} must be a positive integer"
        )),
    }
}

/// Splits `name:N` (N digits) from a bare name; IPv6 addresses go in brackets (`[::1]:2`).
fn split_count(entry: &str) -> (&str, Option<&str>) {
    if let Some(rest) = entry.strip_prefix('[') {
        if let Some((addr, tail)) = rest.split_once(']') {
            return (addr, tail.strip_prefix(':'));
        }
    }
    match entry.rsplit_once(':') {
        Some((h, n)) if !h.contains(':') => (h, Some(n)),
        _ => (entry, None),
    }
}

fn add(out: &mut Vec<HostSlots>, name: &str, slots: usize) {
    match out.iter_mut().find(|h| h.name == name) {
        Some(h) => h.slots += slots,
        None => out.push(HostSlots {
            name: name.to_string(),
            slots,
        }),
    }
}

/// Parses a `--host` value: comma-separated `name[:slots]` entries.
pub fn parse_host_list(s: &str, out: &mut Vec<HostSlots>) -> Result<(), String> {
    let what = format!("--host {s:?}");
    for e in s.split(',').map(str::trim) {
        if e.is_empty() {
            return Err(format!("{what}: empty host entry"));
        }
        let (name, count) = split_count(e);
        check_name(name, &what)?;
        let slots = match count {
            Some(c) => parse_slots(c, &what)?,
            None => 1,
        };
        add(out, name, slots);
    }
    Ok(())
}

/// Parses a hostfile's text (`path` only names it in errors): one host per line, `#` starts a
/// comment; `host`, `host slots=N` (also `max_slots=M`, which is accepted and ignored, and
/// `count=N` as an alias), or hydra's `host:N`.
pub fn parse_hostfile(text: &str, path: &str) -> Result<Vec<HostSlots>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let what = format!("hostfile {path}, line {}", i + 1);
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or_default();
        let (name, count) = split_count(first);
        check_name(name, &what)?;
        let mut slots = match count {
            Some(c) => Some(parse_slots(c, &what)?),
            None => None,
        };
        for w in words {
            match w.split_once('=') {
                Some(("slots" | "count", v)) => {
                    if slots.is_some() {
                        return Err(format!("{what}: the slot count is given twice"));
                    }
                    slots = Some(parse_slots(v, &what)?);
                }
                Some(("max_slots" | "max-slots", v)) => {
                    parse_slots(v, &what)?;
                }
                _ => return Err(format!("{what}: unknown field {w:?} (expected slots=N)")),
            }
        }
        add(&mut out, name, slots.unwrap_or(1));
    }
    if out.is_empty() {
        return Err(format!("hostfile {path} lists no host"));
    }
    Ok(out)
}

/// Whether `name` means this machine, whose host name is `hostname`.
pub fn is_local_name(name: &str, hostname: &str) -> bool {
    let short = |s: &str| s.split('.').next().unwrap_or(s).to_ascii_lowercase();
    let n = name.to_ascii_lowercase();
    if n == "localhost" || n == "localhost.localdomain" {
        return true;
    }
    if let Ok(ip) = n.parse::<std::net::IpAddr>() {
        return ip.is_loopback();
    }
    !hostname.is_empty() && (n == hostname.to_ascii_lowercase() || n == short(hostname))
}

/// Places `n` ranks (all slots when `None`) on `hosts`. The local names (per `is_local`)
/// merge into one node named `hostname`.
pub fn place(
    hosts: &[HostSlots],
    n: Option<usize>,
    map_by: MapBy,
    oversubscribe: bool,
    is_local: impl Fn(&str) -> bool,
    hostname: &str,
) -> Result<Placement, String> {
    let mut merged: Vec<(HostSlots, bool)> = Vec::new();
    for h in hosts {
        let local = is_local(&h.name);
        let name = if local { hostname } else { h.name.as_str() };
        match merged.iter_mut().find(|(m, _)| m.name == name) {
            Some((m, _)) => m.slots += h.slots,
            None => merged.push((
                HostSlots {
                    name: name.to_string(),
                    slots: h.slots,
                },
                local,
            )),
        }
    }
    if merged.is_empty() {
        return Err("no host to run on".into());
    }
    let total: usize = merged.iter().map(|(h, _)| h.slots).sum();
    let n = n.unwrap_or(total);
    if n > total && !oversubscribe {
        let list: Vec<String> = merged
            .iter()
            .map(|(h, _)| format!("{}:{}", h.name, h.slots))
            .collect();
        return Err(format!(
            "there are not enough slots available in the system to satisfy the {n} slots \
             requested: the hosts have {total} ({}). Either request fewer ranks, list more \
             slots, or use --oversubscribe to run more ranks than slots.",
            list.join(",")
        ));
    }
    let mut node_of = Vec::with_capacity(n);
    let mut used = vec![0usize; merged.len()];
    match map_by {
        MapBy::Slot => {
            for (i, (h, _)) in merged.iter().enumerate() {
                while used[i] < h.slots && node_of.len() < n {
                    used[i] += 1;
                    node_of.push(i);
                }
            }
        }
        MapBy::Node => {
            while node_of.len() < n.min(total) {
                for (i, (h, _)) in merged.iter().enumerate() {
                    if used[i] < h.slots && node_of.len() < n {
                        used[i] += 1;
                        node_of.push(i);
                    }
                }
            }
        }
    }
    // Beyond the slots (oversubscribed): one more rank per host in turn.
    let mut i = 0;
    while node_of.len() < n {
        node_of.push(i % merged.len());
        i += 1;
    }
    let mut nodes: Vec<Node> = merged
        .into_iter()
        .map(|(h, local)| Node {
            name: h.name,
            local,
            ranks: Vec::new(),
        })
        .collect();
    for (r, &i) in node_of.iter().enumerate() {
        nodes[i].ranks.push(r);
    }
    // Hosts that got no rank are not part of the job; renumber.
    let keep: Vec<usize> = (0..nodes.len())
        .filter(|&i| !nodes[i].ranks.is_empty())
        .collect();
    let node_of = node_of
        .iter()
        .map(|i| keep.iter().position(|k| k == i).unwrap())
        .collect();
    nodes.retain(|n| !n.ranks.is_empty());
    Ok(Placement { nodes, node_of })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hl(s: &str) -> Vec<HostSlots> {
        let mut v = Vec::new();
        parse_host_list(s, &mut v).unwrap();
        v
    }
    fn hs(list: &[(&str, usize)]) -> Vec<HostSlots> {
        list.iter()
            .map(|(n, s)| HostSlots {
                name: n.to_string(),
                slots: *s,
            })
            .collect()
    }

    #[test]
    fn host_lists() {
        assert_eq!(hl("a:2,b:2"), hs(&[("a", 2), ("b", 2)]));
        assert_eq!(hl("a,b,a"), hs(&[("a", 2), ("b", 1)]));
        assert_eq!(hl("n1.example.org:3"), hs(&[("n1.example.org", 3)]));
        assert_eq!(hl("198.18.0.2:4"), hs(&[("198.18.0.2", 4)]));
        assert_eq!(hl("[::1]:2,fe80::1"), hs(&[("::1", 2), ("fe80::1", 1)]));
        let mut v = hl("a:1");
        parse_host_list("a:2,c", &mut v).unwrap(); // a second --host adds
        assert_eq!(v, hs(&[("a", 3), ("c", 1)]));
        for (bad, why) in [
            ("a:0", "positive"),
            ("a:x", "positive"),
            ("a,,b", "empty"),
            ("", "empty"),
            ("-a", "valid host"),
            ("a b", "valid host"),
            ("a;rm", "valid host"),
        ] {
            let e = parse_host_list(bad, &mut Vec::new()).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn hostfiles() {
        let text = "# cluster\n\nnode1 slots=2\nnode2 slots=4 max_slots=8  # big one\n\
                    node3\nnode4:3\n  node1 slots=1\nnode5 count=2\n";
        assert_eq!(
            parse_hostfile(text, "hf").unwrap(),
            hs(&[
                ("node1", 3),
                ("node2", 4),
                ("node3", 1),
                ("node4", 3),
                ("node5", 2)
            ])
        );
        for (bad, why) in [
            ("a slots=0", "line 1"),
            ("\na slots=x", "line 2"),
            ("a slot=2", "unknown field"),
            ("a:2 slots=3", "twice"),
            ("# only comments\n", "lists no host"),
            ("a/b", "valid host"),
        ] {
            let e = parse_hostfile(bad, "hf").unwrap_err();
            assert!(e.contains(why) && e.contains("hf"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn local_names() {
        for n in [
            "localhost",
            "LOCALHOST",
            "127.0.0.1",
            "127.1.2.3",
            "::1",
            "box",
            "box.lan",
        ] {
            assert!(is_local_name(n, "box.lan"), "{n}");
        }
        for n in ["box2", "198.18.0.1", "other.lan", "lan"] {
            assert!(!is_local_name(n, "box.lan"), "{n}");
        }
    }

    fn placed(hosts: &str, n: Option<usize>, m: MapBy, over: bool) -> Result<Placement, String> {
        place(&hl(hosts), n, m, over, |h| is_local_name(h, "me"), "me")
    }

    #[test]
    fn mapping_by_slot_and_by_node() {
        let p = placed("a:2,b:2", None, MapBy::Slot, false).unwrap();
        assert_eq!(p.node_of, [0, 0, 1, 1]);
        assert_eq!(p.local(3), (1, 2));
        let p = placed("a:2,b:2", Some(4), MapBy::Node, false).unwrap();
        assert_eq!(p.node_of, [0, 1, 0, 1]);
        assert_eq!(p.nodes[1].ranks, [1, 3]);
        assert_eq!(p.local(2), (1, 2));
        let p = placed("a:3,b:1", None, MapBy::Node, false).unwrap();
        assert_eq!(p.node_of, [0, 1, 0, 0]);
        // Fewer ranks than slots: hosts without a rank drop out.
        let p = placed("a:2,b:2", Some(2), MapBy::Slot, false).unwrap();
        assert_eq!(p.nodes.len(), 1);
        assert_eq!(p.node_of, [0, 0]);
        // Local names merge into one local node named by the host name.
        let p = placed("localhost:1,x:1,me:1", None, MapBy::Slot, false).unwrap();
        assert_eq!(p.nodes.len(), 2);
        assert_eq!((p.nodes[0].name.as_str(), p.nodes[0].local), ("me", true));
        assert_eq!(p.nodes[0].ranks, [0, 1]);
        assert_eq!((p.nodes[1].name.as_str(), p.nodes[1].local), ("x", false));
        // Oversubscription needs consent, then wraps over the hosts.
        let e = placed("a:1,b:1", Some(3), MapBy::Slot, false).unwrap_err();
        assert!(
            e.contains("not enough slots") && e.contains("a:1,b:1"),
            "{e}"
        );
        let p = placed("a:1,b:1", Some(5), MapBy::Slot, true).unwrap();
        assert_eq!(p.node_of, [0, 1, 0, 1, 0]);
        assert_eq!(MapBy::parse("NODE").unwrap(), MapBy::Node);
        assert!(MapBy::parse("socket").is_err());
    }
}
