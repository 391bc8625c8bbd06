//! A setup mistake is not an outage (README, Errors): a wrong password or
//! user, no password for a server that wants one, a database the server
//! does not have, a refused eviction policy. Each is `is_misconfigured()`
//! and never `is_unavailable()` (an HTTP service answers 500, not 503 "retry
//! later"), its message says what to change, and it holds no password.
//! A server that is down stays `is_unavailable()`.

use std::time::Duration;

use leasehold::{LockClient, LockError};

use crate::support::{RedisServer, free_port};

const PASSWORD: &str = "M1sconf-s3cret";

async fn connect(url: &str) -> LockError {
    LockClient::builder()
        .connect_timeout(Duration::from_secs(2))
        .connect(url)
        .await
        .expect_err("the setup is wrong: connect must fail")
}

/// Misconfigured, not unavailable, password-free; returns the message.
fn assert_misconfigured(what: &str, err: &LockError) -> String {
    let text = format!("{err} | {err:?}");
    eprintln!("{what}: {err}");
    assert!(err.is_misconfigured(), "{what}: not misconfigured: {text}");
    assert!(!err.is_unavailable(), "{what}: said unavailable: {text}");
    assert!(!err.is_busy(), "{what}: said busy: {text}");
    assert!(!text.contains(PASSWORD), "{what}: password leaked: {text}");
    err.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_or_missing_password_is_a_misconfiguration() {
    let server = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let port = server.port();

    let wrong = connect(&format!("redis://:{PASSWORD}-wrong@127.0.0.1:{port}")).await;
    let text = assert_misconfigured("wrong password", &wrong);
    assert!(text.contains("WRONGPASS"), "{text}");

    let user = connect(&format!("redis://nobody:{PASSWORD}@127.0.0.1:{port}")).await;
    assert_misconfigured("unknown user", &user);

    // NOAUTH: the message says where the password goes.
    let none = connect(&server.url()).await;
    let text = assert_misconfigured("no password", &none);
    assert!(
        text.contains("NOAUTH") && text.contains("redis://:password@host"),
        "says where the password goes: {text}"
    );
    assert!(text.contains("redis://user:password@host"), "{text}");

    // The right one connects.
    let client = LockClient::connect(&format!("redis://:{PASSWORD}@127.0.0.1:{port}"))
        .await
        .expect("the right password connects");
    drop(client);

    // The same mistake through a Cluster client's seed URL is no outage either.
    let cluster = LockClient::connect_cluster([format!("redis://:x@127.0.0.1:{port}")]).await;
    match cluster {
        Err(err) => {
            assert_misconfigured("cluster, wrong password", &err);
        }
        Ok(_) => panic!("a cluster client with a wrong password connected"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_with_a_wrong_password_is_a_misconfiguration() {
    let server = RedisServer::start();
    server.cmd(&[
        "ACL",
        "SETUSER",
        "locker",
        "on",
        &format!(">{PASSWORD}"),
        "~*",
        "&*",
        "+@all",
    ]);
    let port = server.port();
    let err = connect(&format!("redis://locker:{PASSWORD}x@127.0.0.1:{port}")).await;
    assert_misconfigured("ACL user, wrong password", &err);
    let err = connect(&format!("redis://lockr:{PASSWORD}@127.0.0.1:{port}")).await;
    assert_misconfigured("ACL user, misspelt name", &err);
    LockClient::connect(&format!("redis://locker:{PASSWORD}@127.0.0.1:{port}"))
        .await
        .expect("the right user and password connect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_out_of_range_is_a_misconfiguration() {
    let server = RedisServer::start_with(&["--databases", "4"]);
    let port = server.port();
    for db in ["4", "99"] {
        let err = connect(&format!("redis://127.0.0.1:{port}/{db}")).await;
        let text = assert_misconfigured(&format!("database {db}"), &err);
        assert!(text.contains("database"), "{text}");
    }
    LockClient::connect(&format!("redis://127.0.0.1:{port}/3"))
        .await
        .expect("database 3 of 4 exists");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_eviction_policy_is_a_misconfiguration() {
    let server =
        RedisServer::start_with(&["--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"]);
    let err = connect(&server.url()).await;
    let text = assert_misconfigured("volatile-lru", &err);
    assert!(text.contains("volatile-lru"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_down_is_unavailable_not_misconfigured() {
    let err = connect(&format!("redis://:{PASSWORD}@127.0.0.1:{}", free_port())).await;
    assert!(err.is_unavailable(), "{err:?}");
    assert!(!err.is_misconfigured(), "{err:?}");
}

/// Redlock masters that refuse the password: the setup mistake, not a
/// quorum failure (which reads like an outage).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_masters_refusing_the_password_are_a_misconfiguration() {
    let nodes: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_with(&["--requirepass", PASSWORD]))
        .collect();
    let urls: Vec<String> = nodes
        .iter()
        .map(|n| format!("redis://:{PASSWORD}-wrong@127.0.0.1:{}", n.port()))
        .collect();
    let err = LockClient::builder()
        .connect_timeout(Duration::from_secs(2))
        .connect_redlock(&urls)
        .await
        .map(|_| ())
        .expect_err("every master refuses the password");
    let text = assert_misconfigured("redlock, wrong password", &err);
    assert!(text.contains("WRONGPASS"), "{text}");
}

/// A listener on `port` that is not Redis: to every connection it sends
/// `greeting` at once (an SSH-like banner), or, when `greeting` is empty,
/// reads the request and answers like an HTTP server. Runs until the test
/// process ends.
fn not_redis(greeting: &'static str) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a plain TCP port");
    let port = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                if greeting.is_empty() {
                    let mut request = [0u8; 1024];
                    let _ = stream.read(&mut request);
                    let _ = stream.write_all(
                        b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\
                          Content-Length: 11\r\nConnection: close\r\n\r\nBad Request",
                    );
                } else {
                    let _ = stream.write_all(greeting.as_bytes());
                    let mut request = [0u8; 1024];
                    let _ = stream.read(&mut request);
                }
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_that_does_not_speak_redis_is_a_misconfiguration() {
    for (what, greeting) in [
        ("an HTTP server", ""),
        (
            "an SSH-like banner",
            "SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n",
        ),
    ] {
        let port = not_redis(greeting);
        let url = format!("redis://:{PASSWORD}@127.0.0.1:{port}");
        let err = connect(&url).await;
        let text = assert_misconfigured(what, &err);
        let shown = format!("redis://:***@127.0.0.1:{port}");
        assert!(
            text.contains(&format!(
                "the server at {shown} does not speak the Redis protocol: wrong port?"
            )),
            "{what}: says the port is wrong: {text}"
        );
        assert!(!text.contains('\n'), "{what}: one line: {text}");
    }

    // The same port as a Cluster client's seed is the same mistake.
    let port = not_redis("");
    let seed = format!("redis://:{PASSWORD}@127.0.0.1:{port}");
    match LockClient::builder()
        .connect_timeout(Duration::from_secs(2))
        .connect_cluster([seed])
        .await
    {
        Err(err) => {
            let text = assert_misconfigured("cluster seed on an HTTP port", &err);
            assert!(text.contains("wrong port?"), "{text}");
        }
        Ok(_) => panic!("a cluster client connected to an HTTP server"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_path_that_is_not_a_database_number_is_an_invalid_argument() {
    for path in ["abc", "1x", "db0"] {
        let url = format!("redis://:{PASSWORD}@127.0.0.1:{}/{path}", free_port());
        let err = connect(&url).await;
        let text = format!("{err} | {err:?}");
        eprintln!("path /{path}: {err}");
        assert!(
            matches!(err, LockError::InvalidArgument { name: "url", .. }),
            "path /{path}: {text}"
        );
        assert!(
            text.contains("the path must be a database number"),
            "path /{path}: {text}"
        );
        assert!(!text.contains(PASSWORD), "password leaked: {text}");
    }
}
