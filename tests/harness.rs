//! Self-test of the integration-test harness in `tests/support/`.

mod support;

use std::time::{Duration, Instant};

use redis::Value;
use support::{RedisCluster, RedisServer, free_port, primary_with_replica};

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

#[test]
fn free_port_gives_distinct_ports_with_free_bus_port() {
    let a = free_port();
    let b = free_port();
    assert_ne!(a, b);
    for p in [a, b] {
        assert_ne!(p, 6379);
        assert!(u32::from(p) + 10_000 <= 65_535);
        assert!(std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
        assert!(std::net::TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok());
    }
}

#[test]
fn start_answers_ping_on_its_url() {
    let server = RedisServer::start();
    assert_ne!(server.port(), 6379);
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert_eq!(server.cmd(&["PING"]), Value::SimpleString("PONG".into()));

    // The url works with a plain redis client.
    let client = redis::Client::open(server.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");

    // No persistence configured.
    let save = server.cmd(&["CONFIG", "GET", "save"]);
    assert_eq!(save, Value::Array(vec![bulk("save"), bulk("")]));
    assert!(server.dir().is_dir());
}

#[tokio::test]
async fn usable_from_an_async_test() {
    let server = RedisServer::start();
    let client = redis::Client::open(server.url()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(server.cmd(&["GET", "k"]), bulk("v"));
    assert_eq!(server.keys("*"), vec!["k".to_owned()]);
    assert_eq!(server.dbsize(), 1);
    server.flushall();
    assert_eq!(server.dbsize(), 0);
}

#[test]
fn restart_keeps_the_port_and_loses_data() {
    let mut server = RedisServer::start();
    let port = server.port();
    let pid = server.pid();
    server.cmd(&["SET", "k", "v"]);
    assert_eq!(server.dbsize(), 1);
    server.restart();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), pid);
    assert_eq!(server.cmd(&["GET", "k"]), Value::Nil);
    assert_eq!(server.dbsize(), 0);
    assert!(server.keys("*").is_empty());
}

#[test]
fn stop_makes_connections_fail_and_restart_brings_it_back() {
    let mut server = RedisServer::start();
    let url = server.url();
    let client = redis::Client::open(url.clone()).unwrap();
    let mut con = client.get_connection().unwrap();
    server.stop();
    assert!(!server.is_running());
    assert_eq!(server.url(), url);
    assert!(server.cmd_result(&["PING"]).is_err());
    assert!(
        redis::cmd("PING").query::<String>(&mut con).is_err(),
        "an open connection must fail once the server is stopped"
    );
    assert!(client.get_connection().is_err());
    server.restart();
    assert_eq!(server.url(), url);
    assert_eq!(server.cmd(&["PING"]), Value::SimpleString("PONG".into()));
    let mut con = client.get_connection().unwrap();
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn pause_makes_reads_time_out_and_resume_fixes_it() {
    let server = RedisServer::start();
    let client = redis::Client::open(server.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    con.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");

    server.pause();
    let started = Instant::now();
    let err = redis::cmd("PING").query::<String>(&mut con).unwrap_err();
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "{err}: failed too early"
    );
    assert!(err.is_timeout(), "expected a timeout, got {err}");

    server.resume();
    let mut con = client.get_connection().unwrap();
    con.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    assert_eq!(server.cmd(&["PING"]), Value::SimpleString("PONG".into()));
}

#[test]
fn info_field_and_command_calls_count_commands() {
    let server = RedisServer::start();
    assert_eq!(server.command_calls("set"), 0);
    assert_eq!(server.command_calls("evalsha"), 0);

    let before = server.info_field("stats", "total_commands_processed");
    for i in 0..3 {
        server.cmd(&["SET", &format!("k{i}"), "v"]);
    }
    server.cmd(&["GET", "k0"]);
    let after = server.info_field("stats", "total_commands_processed");
    // 3 SET + 1 GET + the first INFO (each INFO is counted once it ran).
    assert_eq!(after - before, 5);

    assert_eq!(server.command_calls("set"), 3);
    assert_eq!(server.command_calls("SET"), 3);
    assert_eq!(server.command_calls("get"), 1);
    server.cmd(&["SCRIPT", "LOAD", "return 1"]);
    let sha = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db";
    server.cmd(&["EVALSHA", sha, "0"]);
    server.cmd(&["EVALSHA", sha, "0"]);
    assert_eq!(server.command_calls("evalsha"), 2);
    // Redis 7 counts subcommands apart (`script|load`); 6.2 only per command.
    if server.is_redis7() {
        assert_eq!(server.command_calls("script|load"), 1);
    } else {
        assert_eq!(server.command_calls("script"), 1);
    }
}

#[test]
fn requirepass_keeps_url_password_less_but_helpers_authenticate() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert_eq!(server.cmd(&["PING"]), Value::SimpleString("PONG".into()));
    let client = redis::Client::open(server.url()).unwrap();
    let denied = client
        .get_connection()
        .and_then(|mut con| redis::cmd("GET").arg("x").query::<Option<String>>(&mut con));
    assert!(denied.is_err(), "unauthenticated GET must fail");
    let client =
        redis::Client::open(format!("redis://:s3cret@127.0.0.1:{}", server.port())).unwrap();
    let mut con = client.get_connection().unwrap();
    let _: () = redis::cmd("SET").arg("x").arg("1").query(&mut con).unwrap();
    assert_eq!(server.dbsize(), 1);
}

#[test]
fn primary_with_replica_replicates_a_set() {
    let (primary, replica) = primary_with_replica();
    primary.cmd(&["SET", "replicated", "yes"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while replica.cmd(&["GET", "replicated"]) != bulk("yes") {
        assert!(Instant::now() < deadline, "SET did not reach the replica");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(replica.info_field("replication", "connected_slaves"), 0);
    assert_eq!(primary.info_field("replication", "connected_slaves"), 1);
}

#[test]
fn key_slot_reference_values() {
    // CRC16-XMODEM check value 0x31C3, and the Redis Cluster spec examples.
    assert_eq!(RedisCluster::key_slot("123456789"), 0x31C3); // < 16384
    assert_eq!(RedisCluster::key_slot("foo"), 12182);
    assert_eq!(
        RedisCluster::key_slot("{user1000}.following"),
        RedisCluster::key_slot("{user1000}.followers")
    );
    assert_eq!(
        RedisCluster::key_slot("{user1000}.following"),
        RedisCluster::key_slot("user1000")
    );
    // An empty tag does not count: the whole key is hashed.
    assert_ne!(
        RedisCluster::key_slot("foo{}{bar}"),
        RedisCluster::key_slot("bar")
    );
}

#[test]
fn cluster_forms_matches_keyslot_and_migrates_a_slot() {
    let started = Instant::now();
    let mut cluster = RedisCluster::start(3);
    eprintln!("3-master cluster formed in {:?}", started.elapsed());
    assert_eq!(cluster.nodes().len(), 3);
    assert_eq!(cluster.urls().len(), 3);
    for node in cluster.nodes() {
        let info = support_info(node, "CLUSTER", "INFO");
        assert!(info.contains("cluster_state:ok"), "{info}");
    }

    // key_slot agrees with CLUSTER KEYSLOT.
    let mut keys: Vec<String> = (0..30).map(|i| format!("lock:order:{i}")).collect();
    keys.extend(
        [
            "",
            "a",
            "foo",
            "123456789",
            "{user1000}.following",
            "{user1000}.followers",
            "foo{}{bar}",
            "foo{{bar}}zap",
            "foo{bar}{zap}",
            "{}",
            "{",
            "}",
            "}{",
            "{a",
            "a}b{c}",
            "leasehold:{draw:2026-01-01}:fence",
            "leasehold:{draw:2026-01-01}",
            "ünïcödé{ключ}",
            "x{y}z",
            "{{}}",
        ]
        .map(String::from),
    );
    for key in &keys {
        let expected = match cluster.nodes()[0].cmd(&["CLUSTER", "KEYSLOT", key]) {
            Value::Int(n) => n as u16,
            other => panic!("CLUSTER KEYSLOT {key:?}: {other:?}"),
        };
        assert_eq!(RedisCluster::key_slot(key), expected, "key {key:?}");
    }

    // Every slot has an owner, and the three nodes share them.
    let owners: std::collections::BTreeSet<usize> = (0..16384u16)
        .step_by(1000)
        .map(|s| cluster.node_for_slot(s))
        .collect();
    assert_eq!(owners.len(), 3);

    // Move a slot holding 150 keys (more than one MIGRATE batch).
    let tag = "{harness:migrate}";
    let slot = RedisCluster::key_slot(tag);
    let from = cluster.node_for_slot(slot);
    assert_eq!(cluster.node_for_key(&format!("k:{tag}")), from);
    for i in 0..150 {
        cluster.nodes()[from].cmd(&["SET", &format!("k{i}:{tag}"), &format!("v{i}")]);
    }
    let to = (from + 1) % 3;
    let started = Instant::now();
    cluster.migrate_slot(slot, to);
    eprintln!(
        "slot {slot} with 150 keys migrated in {:?}",
        started.elapsed()
    );
    assert_eq!(cluster.node_for_slot(slot), to);
    for (i, node) in cluster.nodes().iter().enumerate() {
        let owner = cluster.node_id(to);
        let nodes_text = support_info(node, "CLUSTER", "NODES");
        assert!(
            nodes_text.contains(&owner),
            "node {i} does not know {owner}"
        );
    }
    // Ask the new owner directly: the keys are there.
    let new_owner = &cluster.nodes()[to];
    assert_eq!(new_owner.cmd(&["GET", &format!("k7:{tag}")]), bulk("v7"));
    assert_eq!(
        new_owner.cmd(&["GET", &format!("k149:{tag}")]),
        bulk("v149")
    );
    assert_eq!(
        new_owner.cmd(&["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]),
        Value::Int(150)
    );
    // The old owner redirects.
    let err = cluster.nodes()[from]
        .cmd_result(&["GET", &format!("k7:{tag}")])
        .unwrap_err();
    assert!(err.to_string().to_uppercase().contains("MOVED"), "{err}");
    // The cluster is still healthy, and migrating back works too.
    cluster.migrate_slot(slot, from);
    assert_eq!(cluster.node_for_slot(slot), from);
    assert_eq!(
        cluster.nodes()[from].cmd(&["GET", &format!("k0:{tag}")]),
        bulk("v0")
    );

    // A restarted node keeps its identity and slots (nodes.conf), loses its data.
    let id = cluster.node_id(from);
    let started = Instant::now();
    cluster.node_mut(from).restart();
    cluster.wait_until_ok();
    eprintln!(
        "node restarted, cluster ok again in {:?}",
        started.elapsed()
    );
    assert_eq!(cluster.node_id(from), id);
    assert_eq!(cluster.node_for_slot(slot), from);
    assert_eq!(cluster.nodes()[from].dbsize(), 0);
}

#[test]
fn single_node_cluster_forms() {
    let started = Instant::now();
    let cluster = RedisCluster::start(1);
    eprintln!("1-node cluster formed in {:?}", started.elapsed());
    assert_eq!(cluster.node_for_slot(0), 0);
    assert_eq!(cluster.node_for_slot(16383), 0);
    cluster.nodes()[0].cmd(&["SET", "a", "1"]);
    assert_eq!(cluster.nodes()[0].cmd(&["GET", "a"]), bulk("1"));
}

fn support_info(node: &RedisServer, a: &str, b: &str) -> String {
    match node.cmd(&[a, b]) {
        Value::BulkString(bytes) => String::from_utf8(bytes).unwrap(),
        Value::VerbatimString { text, .. } => text,
        other => panic!("{a} {b}: {other:?}"),
    }
}

#[test]
#[should_panic(expected = "Bad directive")]
fn a_bad_argument_panics_with_the_server_output() {
    RedisServer::start_with(&["--no-such-directive", "1"]);
}

/// The real file a command name or path runs (`PATH` searched for a bare
/// name), symlinks resolved.
fn resolved_binary(bin: &str) -> std::path::PathBuf {
    let path = if bin.contains('/') {
        std::path::PathBuf::from(bin)
    } else {
        std::env::var_os("PATH")
            .and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|dir| dir.join(bin))
                    .find(|candidate| candidate.is_file())
            })
            .unwrap_or_else(|| panic!("{bin} is not on PATH"))
    };
    std::fs::canonicalize(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The running process' binary, from `/proc/<pid>/exe`.
fn binary_of(pid: u32) -> std::path::PathBuf {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/exe: {e}"))
}

/// One setting picks the server of every test: servers, replicas and the
/// sentinels of a Sentinel set all run `LEASEHOLD_REDIS_SERVER` (the
/// `.ci/servers.sh` matrix relies on it), and clusters form with it.
#[test]
fn every_process_runs_the_configured_server_binary() {
    let wanted = resolved_binary(&support::server_bin());
    let server = RedisServer::start();
    let pid = server.info_field("server", "process_id") as u32;
    assert_eq!(binary_of(pid), wanted, "a plain server");

    let set = support::SentinelSet::start();
    for port in set.sentinel_ports() {
        let reply = redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .and_then(|c| c.get_connection())
            .and_then(|mut con| redis::cmd("INFO").arg("server").query::<String>(&mut con))
            .unwrap_or_else(|e| panic!("INFO from sentinel {port}: {e}"));
        let pid: u32 = reply
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("sentinel {port}: no process_id in {reply}"));
        assert_eq!(binary_of(pid), wanted, "sentinel on {port}");
        assert!(
            reply.contains("redis_mode:sentinel") || reply.contains("server_mode:sentinel"),
            "{reply}"
        );
    }
    let primary = set.node(set.primary_port());
    let pid = primary.info_field("server", "process_id") as u32;
    assert_eq!(binary_of(pid), wanted, "the sentinels' primary");
}
