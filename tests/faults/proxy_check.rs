//! The fault proxy itself does what the scenarios rely on.

use std::time::{Duration, Instant};

use crate::support::{FaultProxy, ProxyMode, RedisServer};

fn connect(proxy: &FaultProxy) -> redis::RedisResult<redis::Connection> {
    let con =
        redis::Client::open(proxy.url())?.get_connection_with_timeout(Duration::from_secs(1))?;
    con.set_read_timeout(Some(Duration::from_millis(500)))?;
    Ok(con)
}

fn ping(con: &mut redis::Connection) -> redis::RedisResult<String> {
    redis::cmd("PING").query(con)
}

#[test]
fn proxy_modes() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let mut con = connect(&proxy).expect("connect through the proxy");
    assert_eq!(ping(&mut con).expect("pass"), "PONG");

    proxy.set_mode(ProxyMode::Latency(Duration::from_millis(100)));
    let sent = Instant::now();
    assert_eq!(ping(&mut con).expect("latency"), "PONG");
    assert!(
        sent.elapsed() >= Duration::from_millis(200),
        "each way held 100 ms"
    );

    proxy.set_mode(ProxyMode::Blackhole);
    assert!(ping(&mut con).is_err(), "no answer through a blackhole");
    // A new connection is accepted (TCP) but answers nothing either.
    let mut fresh = connect(&proxy);
    if let Ok(fresh) = fresh.as_mut() {
        assert!(ping(fresh).is_err(), "no answer on a new connection either");
    }

    proxy.set_mode(ProxyMode::Pass);
    let mut con = connect(&proxy).expect("connect after the blackhole");
    assert_eq!(ping(&mut con).expect("pass again"), "PONG");

    proxy.set_mode(ProxyMode::Reset);
    std::thread::sleep(Duration::from_millis(50));
    assert!(ping(&mut con).is_err(), "an open connection is reset");
    assert!(
        connect(&proxy).and_then(|mut c| ping(&mut c)).is_err(),
        "a new connection is reset"
    );

    proxy.set_mode(ProxyMode::Pass);
    let mut con = connect(&proxy).expect("connect after the reset");
    assert_eq!(ping(&mut con).expect("pass after reset"), "PONG");
    assert!(proxy.accepted() >= 4);
}
