//! Redis Cluster: each primary is a server of its own, with its own
//! identity. A primary restarts empty (same node id, same slots, a new
//! `run_id`) or is replaced by a promoted replica without touching the
//! others, so the gate keeps, per primary, what it keeps for one server:
//! its `run_id`, when it may grant again (`restart_grace`), when this
//! client saw it change, and whether its identity was read since the
//! client's connections could have changed. Keys are placed on primaries
//! by their slot, through the slot map read with the identities.
#![cfg_attr(not(feature = "cluster"), allow(dead_code))]

use tokio::time::Instant;

use super::identity::Identity;

/// One primary as a check saw it: its node id, address, slots, and
/// identity (`None`: it did not answer).
#[derive(Debug)]
pub(crate) struct Seen {
    pub(crate) id: String,
    pub(crate) slots: Vec<(u16, u16)>,
    pub(crate) identity: Option<Identity>,
}

/// What the gate keeps of one primary.
#[derive(Debug, Clone)]
pub(super) struct Node {
    pub(super) id: String,
    pub(super) run_id: Option<String>,
    /// No grants there before this instant (the restart grace).
    pub(super) young_until: Option<Instant>,
    /// When this client saw it restart or take over slots.
    pub(super) changed_at: Option<Instant>,
    /// Its identity was read since the connections could have changed.
    pub(super) verified: bool,
}

impl Node {
    pub(super) fn new(id: String) -> Node {
        Node {
            id,
            run_id: None,
            young_until: None,
            changed_at: None,
            verified: false,
        }
    }
}

/// The primaries and the slots each serves.
#[derive(Debug, Default)]
pub(super) struct Nodes {
    pub(super) nodes: Vec<Node>,
    /// `(first slot, last slot, index in nodes)`, sorted by first slot.
    ranges: Vec<(u16, u16, usize)>,
}

impl Nodes {
    pub(super) fn add(&mut self, node: Node, slots: &[(u16, u16)]) {
        let index = self.nodes.len();
        self.nodes.push(node);
        self.ranges
            .extend(slots.iter().map(|&(first, last)| (first, last, index)));
        self.ranges.sort_unstable_by_key(|&(first, _, _)| first);
    }

    /// The primary serving `slot`, as the last check saw it.
    pub(super) fn owner(&self, slot: u16) -> Option<&Node> {
        let at = self.ranges.partition_point(|&(first, _, _)| first <= slot);
        let &(_, last, index) = self.ranges.get(at.checked_sub(1)?)?;
        (slot <= last).then(|| &self.nodes[index])
    }

    pub(super) fn by_id(&self, id: &str) -> Option<&Node> {
        self.nodes.iter().find(|node| node.id == id)
    }

    /// The parts of `slots` that another primary served at the last check,
    /// one that is no primary now: slots taken over by a failover (a
    /// migration leaves its source a primary).
    pub(super) fn taken_over(
        &self,
        id: &str,
        slots: &[(u16, u16)],
        primaries: &[&str],
    ) -> Vec<(u16, u16)> {
        let mut taken = Vec::new();
        for &(first, last, index) in &self.ranges {
            let before = &self.nodes[index].id;
            if before == id || primaries.contains(&before.as_str()) {
                continue;
            }
            for &(a, b) in slots {
                let (from, to) = (a.max(first), b.min(last));
                if from <= to {
                    taken.push((from, to));
                }
            }
        }
        taken
    }
}

/// Whether `slot` is in one of `ranges`.
pub(crate) fn within(ranges: &[(u16, u16)], slot: u16) -> bool {
    ranges
        .iter()
        .any(|&(first, last)| first <= slot && slot <= last)
}

/// The Redis Cluster slot of a Redis name: CRC16 (XMODEM) of its hash tag
/// (the part between the first `{` and the next `}`, when not empty), or
/// of the whole name, modulo 16384.
pub(crate) fn slot_of(name: &[u8]) -> u16 {
    let hashed = name
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &name[open + 1..];
            let len = rest.iter().position(|&b| b == b'}')?;
            (len > 0).then(|| &rest[..len])
        })
        .unwrap_or(name);
    let crc = hashed.iter().fold(0u16, |crc, &byte| {
        (crc << 8) ^ CRC16[usize::from((crc >> 8) as u8 ^ byte)]
    });
    crc % 16384
}

/// CRC16-XMODEM (polynomial 0x1021) of each byte value: one lookup per
/// byte of a name, on every acquisition on Redis Cluster.
const CRC16: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_hash_tags() {
        // Known values (`CLUSTER KEYSLOT`), and redis-rs's own.
        for name in ["leasehold:{order:42}:lock", "x", "{}", "a{b}c{d}", ""] {
            let theirs = redis::cluster_routing::Slot::for_key(name.as_bytes());
            assert_eq!(
                Some(theirs),
                redis::cluster_routing::Slot::new(slot_of(name.as_bytes())),
                "{name}"
            );
        }
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        // CRC16-XMODEM check value.
        assert_eq!(slot_of(b"123456789"), 0x31C3);
    }

    #[test]
    fn owners_by_slot_and_failovers_by_vanished_primaries() {
        let mut nodes = Nodes::default();
        nodes.add(Node::new("a".into()), &[(0, 99), (200, 299)]);
        nodes.add(Node::new("b".into()), &[(100, 199)]);
        assert_eq!(nodes.owner(0).map(|n| n.id.as_str()), Some("a"));
        assert_eq!(nodes.owner(150).map(|n| n.id.as_str()), Some("b"));
        assert_eq!(nodes.owner(299).map(|n| n.id.as_str()), Some("a"));
        assert!(nodes.owner(300).is_none());
        // "c" took a's slots 50..=120: from a (gone) a failover; from b
        // (still a primary) a migration.
        assert_eq!(
            nodes.taken_over("c", &[(50, 120)], &["b", "c"]),
            vec![(50, 99)]
        );
        assert!(
            nodes
                .taken_over("c", &[(50, 120)], &["a", "b", "c"])
                .is_empty()
        );
    }
}
