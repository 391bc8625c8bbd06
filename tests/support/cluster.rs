//! A Redis Cluster of N masters (0 replicas, or replicas added with
//! `add_replica`) made of [`RedisServer`]s.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use redis::Value;

use super::server::{RedisServer, cli_bin, info_lookup, value_to_string};

/// How long formation and slot migration may take before panicking.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);
const SLOTS: u16 = 16384;
/// How long `manual_failover` waits before asking again.
const MANUAL_FAILOVER_RETRY: Duration = Duration::from_secs(5);

/// N cluster-enabled masters on 127.0.0.1 owning all 16384 slots, 0 replicas.
/// Dropping it kills every node.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `masters` nodes (`--cluster-enabled yes`, own `nodes.conf` in
    /// own dir, `--cluster-node-timeout 2000`), forms the cluster with
    /// `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes`
    /// (by hand with `CLUSTER ADDSLOTSRANGE` (`ADDSLOTS` before Redis 7)/`MEET`
    /// when `masters < 3`, which
    /// redis-cli refuses), and waits until every node reports
    /// `cluster_state:ok` and knows all nodes (30 s, then panics).
    pub fn start(masters: usize) -> RedisCluster {
        RedisCluster::start_with(masters, |_| Vec::new())
    }

    /// Like [`RedisCluster::start`], with extra `redis-server` arguments for
    /// node `i` (e.g. its own `--tls-port`).
    pub fn start_with(masters: usize, extra_args: impl Fn(usize) -> Vec<String>) -> RedisCluster {
        assert!(
            masters >= 1,
            "RedisCluster::start: need at least one master"
        );
        let nodes: Vec<RedisServer> = (0..masters)
            .map(|i| {
                let extra = extra_args(i);
                let mut args = vec![
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                ];
                args.extend(extra.iter().map(String::as_str));
                RedisServer::start_with(&args)
            })
            .collect();
        let cluster = RedisCluster { nodes };
        if masters >= 3 {
            cluster.create_with_redis_cli();
        } else {
            cluster.create_by_hand();
        }
        cluster.wait_until_ok();
        cluster
    }

    /// The nodes, in start order (index = what `node_for_slot` returns).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// One node, mutably (to `stop`, `restart`, ... it).
    pub fn node_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.nodes[index]
    }

    /// `redis://127.0.0.1:PORT` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Index of the node currently owning `slot`, as seen (`CLUSTER SLOTS`) by
    /// the first node that answers.
    pub fn node_for_slot(&self, slot: u16) -> usize {
        let mut errors = Vec::new();
        for i in 0..self.nodes.len() {
            match self.owner_seen_by(i, slot) {
                Ok(Some(owner)) => return owner,
                Ok(None) => errors.push(format!("node {i}: slot {slot} unassigned")),
                Err(e) => errors.push(format!("node {i}: {e}")),
            }
        }
        panic!(
            "node_for_slot({slot}): no node could tell: {}",
            errors.join("; ")
        );
    }

    /// Index of the node currently owning `key`'s slot.
    pub fn node_for_key(&self, key: &str) -> usize {
        self.node_for_slot(RedisCluster::key_slot(key))
    }

    /// The node id (`CLUSTER MYID`) of node `index`.
    pub fn node_id(&self, index: usize) -> String {
        value_to_string(&self.nodes[index].cmd(&["CLUSTER", "MYID"]))
    }

    /// Redis Cluster hash slot: CRC16-XMODEM of the key (or of its hash tag,
    /// the part between the first `{` and the next `}`, when non-empty) mod 16384.
    pub fn key_slot(key: &str) -> u16 {
        let bytes = key.as_bytes();
        let hashed = match bytes.iter().position(|&b| b == b'{') {
            Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
                Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
                _ => bytes,
            },
            None => bytes,
        };
        crc16_xmodem(hashed) % SLOTS
    }

    /// Opens a migration of `slot` from node `from` to node `to`:
    /// `SETSLOT IMPORTING` on the target, `SETSLOT MIGRATING` on the source.
    /// Until [`close_migration`](Self::close_migration), the source answers
    /// `ASK` for the keys it no longer has.
    pub fn open_migration(&self, slot: u16, from: usize, to: usize) {
        let slot_s = slot.to_string();
        let (src_id, dst_id) = (self.node_id(from), self.node_id(to));
        self.nodes[to].cmd(&["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &src_id]);
        self.nodes[from].cmd(&["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &dst_id]);
    }

    /// `MIGRATE`s `keys` from node `from` to node `to` (of a slot whose
    /// migration is open).
    pub fn migrate_keys(&self, from: usize, to: usize, keys: &[&str]) {
        let port = self.nodes[to].port().to_string();
        let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        args.extend_from_slice(keys);
        self.nodes[from].cmd(&args);
    }

    /// Ends the migration of `slot` to node `to`: `SETSLOT NODE` on the
    /// target first (it bumps its config epoch), then the source, then the
    /// rest. Returns without waiting for the nodes to agree.
    pub fn close_migration(&self, slot: u16, from: usize, to: usize) {
        let slot_s = slot.to_string();
        let dst_id = self.node_id(to);
        let mut order = vec![to, from];
        order.extend((0..self.nodes.len()).filter(|i| *i != to && *i != from));
        for i in order {
            self.nodes[i].cmd(&["CLUSTER", "SETSLOT", &slot_s, "NODE", &dst_id]);
        }
    }

    /// Moves `slot` (and its keys) from its current owner to node `to`:
    /// `SETSLOT IMPORTING` on the target, `SETSLOT MIGRATING` on the source,
    /// `MIGRATE` the keys in batches of 100 (`GETKEYSINSLOT`), then
    /// `SETSLOT NODE` on the target, the source and every other node; returns
    /// once every node reports `to` as the owner (30 s, then panics).
    pub fn migrate_slot(&self, slot: u16, to: usize) {
        assert!(slot < SLOTS, "migrate_slot: slot {slot} out of range");
        assert!(to < self.nodes.len(), "migrate_slot: no node {to}");
        let from = self.node_for_slot(slot);
        if from == to {
            return;
        }
        let (src, dst) = (&self.nodes[from], &self.nodes[to]);
        let slot_s = slot.to_string();
        self.open_migration(slot, from, to);
        loop {
            let keys = match src.cmd(&["CLUSTER", "GETKEYSINSLOT", &slot_s, "100"]) {
                Value::Array(keys) => keys,
                other => panic!("CLUSTER GETKEYSINSLOT {slot}: unexpected {other:?}"),
            };
            if keys.is_empty() {
                break;
            }
            let mut migrate = redis::cmd("MIGRATE");
            migrate
                .arg("127.0.0.1")
                .arg(dst.port())
                .arg("")
                .arg(0)
                .arg(10_000)
                .arg("REPLACE")
                .arg("KEYS");
            for key in &keys {
                match key {
                    Value::BulkString(bytes) => migrate.arg(bytes.as_slice()),
                    other => panic!("CLUSTER GETKEYSINSLOT {slot}: unexpected key {other:?}"),
                };
            }
            src.query(&migrate).unwrap_or_else(|e| {
                panic!(
                    "MIGRATE of {} keys of slot {slot} from node {from} to node {to} failed: {e}",
                    keys.len()
                )
            });
        }
        self.close_migration(slot, from, to);
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        loop {
            let views: Vec<Result<Option<usize>, String>> = (0..self.nodes.len())
                .map(|i| self.owner_seen_by(i, slot))
                .collect();
            if views
                .iter()
                .all(|v| matches!(v, Ok(Some(owner)) if *owner == to))
            {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "migrate_slot({slot}, {to}): nodes do not agree after {CLUSTER_TIMEOUT:?}: {views:?}"
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// Adds a replica of master `master`: a new cluster-enabled node that
    /// meets the cluster, replicates `master` (`CLUSTER REPLICATE`) and has
    /// finished its first sync; returns its index. The master's diskless
    /// sync delay is set to 0 first (the default waits 5 s).
    pub fn add_replica(&mut self, master: usize) -> usize {
        let node = RedisServer::start_with(&[
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "2000",
        ]);
        let master_id = self.node_id(master);
        self.nodes[master].cmd(&["CONFIG", "SET", "repl-diskless-sync-delay", "0"]);
        let first = self.nodes[master].port().to_string();
        node.cmd(&["CLUSTER", "MEET", "127.0.0.1", &first]);
        self.nodes.push(node);
        let index = self.nodes.len() - 1;
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        // The new node must know the master before it can replicate it.
        loop {
            let replicated = self.nodes[index].cmd_result(&["CLUSTER", "REPLICATE", &master_id]);
            if replicated.is_ok() {
                break;
            }
            if Instant::now() >= deadline {
                panic!("CLUSTER REPLICATE {master_id} on the new node: {replicated:?}");
            }
            std::thread::sleep(POLL);
        }
        loop {
            let info = self.nodes[index].info("replication");
            if info_lookup(&info, "master_link_status") == Some("up") {
                break;
            }
            if Instant::now() >= deadline {
                panic!("replica of node {master} not in sync after {CLUSTER_TIMEOUT:?}:\n{info}");
            }
            std::thread::sleep(POLL);
        }
        self.wait_until_ok();
        index
    }

    /// Kills master `master` (SIGKILL, it stays down) and promotes its
    /// replica `replica` at once with `CLUSTER FAILOVER TAKEOVER`; returns
    /// once every running node reports the replica as the owner of `slot`
    /// (one of the master's slots) and the replica reports `cluster_state:ok`.
    pub fn kill_and_fail_over(&mut self, master: usize, replica: usize, slot: u16) {
        self.nodes[master].stop();
        self.nodes[replica].cmd(&["CLUSTER", "FAILOVER", "TAKEOVER"]);
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        loop {
            let views: Vec<Result<Option<usize>, String>> = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].is_running())
                .map(|i| self.owner_seen_by(i, slot))
                .collect();
            let state = self.nodes[replica]
                .cmd_result(&["CLUSTER", "INFO"])
                .map(|v| value_to_string(&v))
                .unwrap_or_default();
            if views
                .iter()
                .all(|v| matches!(v, Ok(Some(o)) if *o == replica))
                && info_lookup(&state, "cluster_state") == Some("ok")
            {
                return;
            }
            if Instant::now() >= deadline {
                panic!("failover of slot {slot} to node {replica} not seen: {views:?}\n{state}");
            }
            std::thread::sleep(POLL);
        }
    }

    /// `CLUSTER FAILOVER` (the graceful, manual one) on replica `replica`:
    /// its master stops taking writes until the replica has caught up, the
    /// replica takes over and the old master becomes its replica. Returns
    /// once every node reports the replica as the owner of `slot` (one of
    /// the master's slots) and says `cluster_state:ok` (30 s, then panics).
    ///
    /// A manual failover that has not happened within 5 s (Redis gives up
    /// on it then; masters also refuse to vote twice within two node
    /// timeouts for replicas of the same master) is asked for again.
    pub fn manual_failover(&self, replica: usize, slot: u16) {
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        let mut asked: Option<Instant> = None;
        loop {
            if asked.is_none_or(|at| at.elapsed() >= MANUAL_FAILOVER_RETRY) {
                let reply = self.nodes[replica].cmd_result(&["CLUSTER", "FAILOVER"]);
                // Asked again, it may have become master meanwhile, and refuse.
                if asked.is_none()
                    && let Err(e) = reply
                {
                    panic!("CLUSTER FAILOVER on node {replica}: {e}");
                }
                asked = Some(Instant::now());
            }
            let views: Vec<Result<Option<usize>, String>> = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].is_running())
                .map(|i| self.owner_seen_by(i, slot))
                .collect();
            let all_ok = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].is_running())
                .all(|i| {
                    let info = self.nodes[i]
                        .cmd_result(&["CLUSTER", "INFO"])
                        .map(|v| value_to_string(&v))
                        .unwrap_or_default();
                    info_lookup(&info, "cluster_state") == Some("ok")
                });
            if all_ok
                && views
                    .iter()
                    .all(|v| matches!(v, Ok(Some(o)) if *o == replica))
            {
                return;
            }
            if Instant::now() >= deadline {
                panic!("manual failover of slot {slot} to node {replica} not seen: {views:?}");
            }
            std::thread::sleep(POLL);
        }
    }

    fn create_with_redis_cli(&self) {
        let addrs: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new(cli_bin())
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", cli_bin()));
        if !out.status.success() {
            panic!(
                "redis-cli --cluster create {} failed ({}):\n{}\n{}",
                addrs.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// What `redis-cli --cluster create` does, for 1 or 2 masters.
    fn create_by_hand(&self) {
        let n = self.nodes.len();
        for (i, node) in self.nodes.iter().enumerate() {
            let start = (usize::from(SLOTS) * i / n).to_string();
            let end = (usize::from(SLOTS) * (i + 1) / n - 1).to_string();
            if node.is_redis7() {
                node.cmd(&["CLUSTER", "ADDSLOTSRANGE", &start, &end]);
            } else {
                // Redis < 7 has no ADDSLOTSRANGE: every slot, one by one.
                let first: usize = SLOTS as usize * i / n;
                let last: usize = SLOTS as usize * (i + 1) / n - 1;
                let slots: Vec<String> = (first..=last).map(|s| s.to_string()).collect();
                let mut args = vec!["CLUSTER", "ADDSLOTS"];
                args.extend(slots.iter().map(String::as_str));
                node.cmd(&args);
            }
            node.cmd(&["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()]);
        }
        let first = self.nodes[0].port().to_string();
        for node in &self.nodes[1..] {
            node.cmd(&["CLUSTER", "MEET", "127.0.0.1", &first]);
        }
    }

    /// Waits until every node reports `cluster_state:ok`, all 16384 slots
    /// assigned and all nodes known (30 s, then panics with each node's
    /// `CLUSTER INFO`). Useful after `nodes()[i].restart()`: a restarted
    /// master keeps its `nodes.conf` but reports `ok` only ~2 s after start.
    pub fn wait_until_ok(&self) {
        let n = self.nodes.len().to_string();
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        loop {
            let infos: Vec<String> = self
                .nodes
                .iter()
                .map(|node| match node.cmd_result(&["CLUSTER", "INFO"]) {
                    Ok(v) => value_to_string(&v),
                    Err(e) => format!("error: {e}"),
                })
                .collect();
            let ok = infos.iter().all(|info| {
                info_lookup(info, "cluster_state") == Some("ok")
                    && info_lookup(info, "cluster_slots_assigned") == Some("16384")
                    && info_lookup(info, "cluster_known_nodes") == Some(n.as_str())
            });
            if ok {
                return;
            }
            if Instant::now() >= deadline {
                let report: Vec<String> = infos
                    .iter()
                    .zip(&self.nodes)
                    .map(|(info, node)| format!("--- node {} ---\n{info}", node.port()))
                    .collect();
                panic!(
                    "cluster of {n} not ok after {CLUSTER_TIMEOUT:?}:\n{}",
                    report.join("\n")
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// Owner of `slot` according to node `index`'s `CLUSTER SLOTS`.
    fn owner_seen_by(&self, index: usize, slot: u16) -> Result<Option<usize>, String> {
        let reply = self.nodes[index]
            .cmd_result(&["CLUSTER", "SLOTS"])
            .map_err(|e| e.to_string())?;
        let Value::Array(ranges) = reply else {
            return Err(format!("CLUSTER SLOTS: unexpected {reply:?}"));
        };
        for range in &ranges {
            let Value::Array(items) = range else {
                return Err(format!("CLUSTER SLOTS: unexpected range {range:?}"));
            };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
                (items.first(), items.get(1), items.get(2))
            else {
                return Err(format!("CLUSTER SLOTS: unexpected range {items:?}"));
            };
            if !(*start..=*end).contains(&i64::from(slot)) {
                continue;
            }
            let Some(Value::Int(port)) = master.get(1) else {
                return Err(format!("CLUSTER SLOTS: unexpected master {master:?}"));
            };
            return self
                .nodes
                .iter()
                .position(|n| i64::from(n.port()) == *port)
                .map(Some)
                .ok_or_else(|| format!("CLUSTER SLOTS: owner port {port} is not ours"));
        }
        Ok(None)
    }
}

impl std::fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCluster")
            .field("nodes", &self.nodes)
            .finish()
    }
}

/// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, no reflection.
fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}
