//! One Redis server (standalone, or the primary of a replicated set).
//!
//! Commands go through redis-rs's [`ConnectionManager`], which reconnects by
//! itself after a restart. It reports the error of the command that hit the
//! broken connection instead of resending it, so every script here is safe to
//! send again (see [`crate::scripts`]); the retry policy lives in the request.
//!
//! Release notifications arrive on one extra RESP3 connection per client,
//! opened on the first wait, shared by all waiters, resubscribed after
//! reconnects, and subscribed per lock only while someone waits for it (see
//! [`super::subscriber`]).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{IntoConnectionInfo, ProtocolVersion, RedisError};
use tokio::sync::mpsc;

use super::subscriber::{Listening, Subscriber};
use super::{
    Acquired, Backend, BoxFuture, FENCE_MEMORY, LockKeys, Owned, PLACE_GRACE, Renewal, wrong_type,
};
use crate::client::ConnectOptions;
use crate::error::{LockError, redact_url};
use crate::scripts;
use crate::waiting::{Announcement, WaitList};

/// Leases per renewal script call: large enough that 10,000 leases cost a
/// handful of calls, small enough that one call stays well under a millisecond
/// of server time.
const RENEW_CHUNK: usize = 1000;

pub(crate) struct RedisBackend {
    conn: ConnectionManager,
    /// For the subscriber connection, opened on the first wait.
    client: redis::Client,
    options: ConnectOptions,
    server: String,
    listening: Listening,
}

impl RedisBackend {
    /// Connect; release notifications go to `waiters` (shared by the nodes
    /// of a Redlock client).
    pub(crate) async fn connect(
        url: &str,
        options: &ConnectOptions,
        waiters: Arc<WaitList>,
    ) -> Result<RedisBackend, LockError> {
        let server = redact_url(url);
        let client = open_client(url, &server)?;
        let conn = connect_manager(client.clone(), options, &server, None).await?;
        Ok(RedisBackend::with_connection(
            conn, client, options, server, waiters,
        ))
    }

    /// Like [`connect`](Self::connect), but without waiting for the first
    /// connection: a node that is down now is used once it comes back.
    pub(crate) fn connect_lazy(
        url: &str,
        options: &ConnectOptions,
        waiters: Arc<WaitList>,
    ) -> Result<RedisBackend, LockError> {
        let server = redact_url(url);
        let client = open_client(url, &server)?;
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), manager_config(options))
            .map_err(|e| backend_error(&server, e))?;
        Ok(RedisBackend::with_connection(
            conn, client, options, server, waiters,
        ))
    }

    fn with_connection(
        conn: ConnectionManager,
        client: redis::Client,
        options: &ConnectOptions,
        server: String,
        waiters: Arc<WaitList>,
    ) -> RedisBackend {
        RedisBackend {
            conn,
            client,
            options: options.clone(),
            server,
            listening: Listening::new(waiters),
        }
    }

    /// The command connection, for commands beyond the lock scripts.
    pub(crate) fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// The server, credentials redacted.
    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    fn error(&self, err: RedisError) -> LockError {
        backend_error(&self.server, err)
    }

    /// The release listener: one RESP3 connection, opened on the first wait.
    async fn start_listener(&self) -> Result<Subscriber, LockError> {
        let (push_tx, push_rx) = mpsc::unbounded_channel();
        let conn = connect_manager(
            resp3(&self.client, &self.server)?,
            &self.options,
            &self.server,
            Some(push_tx),
        )
        .await?;
        Ok(Subscriber::spawn(
            conn,
            push_rx,
            self.server.clone(),
            self.listening.waiters.clone(),
        ))
    }
}

/// Parse a URL into a client, with any error message redacted.
pub(crate) fn open_client(url: &str, server: &str) -> Result<redis::Client, LockError> {
    redis::Client::open(parse_url(url, server)?).map_err(|e| backend_error(server, e))
}

/// Parse a URL; the error shows it as `shown` (redacted).
pub(crate) fn parse_url(url: &str, shown: &str) -> Result<redis::ConnectionInfo, LockError> {
    url.into_connection_info().map_err(|e| {
        LockError::invalid(
            "url",
            format!(
                "`{shown}` is not a Redis URL ({:?}); expected redis://, rediss:// or unix://",
                e.kind()
            ),
        )
    })
}

/// The first connection, within the connect timeout.
pub(crate) async fn within_connect_timeout<T>(
    connecting: impl std::future::Future<Output = redis::RedisResult<T>>,
    options: &ConnectOptions,
    server: &str,
) -> Result<T, LockError> {
    match tokio::time::timeout(options.connect_timeout, connecting).await {
        Ok(result) => result.map_err(|e| backend_error(server, e)),
        Err(_) => Err(LockError::backend(
            server,
            format!("could not connect within {:?}", options.connect_timeout),
        )),
    }
}

fn resp3(client: &redis::Client, server: &str) -> Result<redis::Client, LockError> {
    let info = client.get_connection_info().clone();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    redis::Client::open(info.set_redis_settings(settings)).map_err(|e| backend_error(server, e))
}

/// Open a reconnecting connection; the first connection must succeed within
/// the connect timeout.
pub(crate) async fn connect_manager(
    client: redis::Client,
    options: &ConnectOptions,
    server: &str,
    push: Option<mpsc::UnboundedSender<redis::PushInfo>>,
) -> Result<ConnectionManager, LockError> {
    let mut config = manager_config(options);
    if let Some(push) = push {
        config = config.set_push_sender(push).set_automatic_resubscription();
    }
    within_connect_timeout(
        ConnectionManager::new_with_config(client, config),
        options,
        server,
    )
    .await
}

fn manager_config(options: &ConnectOptions) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(options.connect_timeout))
        .set_response_timeout(Some(options.response_timeout))
        .set_number_of_retries(options.reconnect_retries)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_secs(1))
}

pub(crate) fn backend_error(server: &str, err: RedisError) -> LockError {
    let message = if err.is_timeout() {
        format!("no answer in time ({err})")
    } else {
        err.to_string()
    };
    LockError::backend(server, message)
}

// The scripts, on any async connection (a single server, one Redlock node, or
// a cluster connection that routes by key). Cluster and Redlock reuse these.

pub(crate) async fn acquire_on<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
    token: &str,
    ttl: Duration,
    in_line: bool,
) -> Result<Acquired, Result<LockError, RedisError>> {
    let mut cmd = scripts::evalsha(&scripts::ACQUIRE, 4);
    cmd.arg(&keys.lock)
        .arg(&keys.fence)
        .arg(&keys.queue)
        .arg(&keys.places)
        .arg(token)
        .arg(millis(ttl))
        .arg(millis(ttl + FENCE_MEMORY))
        .arg(if in_line { millis(PLACE_GRACE) } else { 0 });
    let (code, value): (i64, i64) = scripts::invoke(&scripts::ACQUIRE, &cmd, con)
        .await
        .map_err(Err)?;
    match code {
        1 => Ok(Acquired::Yes {
            fence: u64::try_from(value).unwrap_or(0),
        }),
        0 => Ok(Acquired::Busy {
            expires_in: u64::try_from(value).ok().map(Duration::from_millis),
        }),
        _ => Err(Ok(wrong_type(
            keys,
            match value {
                2 => &keys.fence,
                3 => &keys.queue,
                4 => &keys.places,
                _ => &keys.lock,
            },
        ))),
    }
}

pub(crate) async fn release_on<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
    token: &str,
    keep: Duration,
    publish: &str,
) -> Result<Released, RedisError> {
    let mut cmd = scripts::evalsha(&scripts::RELEASE, 3);
    cmd.arg(&keys.lock)
        .arg(&keys.queue)
        .arg(&keys.places)
        .arg(token)
        .arg(if keep.is_zero() { 0 } else { millis(keep) })
        .arg(&keys.channel)
        .arg(publish);
    let (code, next): (i64, Option<String>) = scripts::invoke(&scripts::RELEASE, &cmd, con).await?;
    Ok(Released {
        owned: Owned::from_code(code),
        next,
    })
}

/// What `release.lua` did.
pub(crate) struct Released {
    pub(crate) owned: Owned,
    /// The first waiter in line, told it is next.
    pub(crate) next: Option<String>,
}

/// `leave.lua`: give up a place in line. Best effort: a place that is not
/// given up lapses by itself, so a failure is only logged.
pub(crate) async fn leave_with<C: ConnectionLike>(
    mut con: C,
    keys: &LockKeys,
    token: &str,
    publish: &str,
) {
    let mut cmd = scripts::evalsha(&scripts::LEAVE, 3);
    cmd.arg(&keys.lock)
        .arg(&keys.queue)
        .arg(&keys.places)
        .arg(token)
        .arg(&keys.channel)
        .arg(publish);
    if let Err(e) = scripts::invoke::<i64, _>(&scripts::LEAVE, &cmd, &mut con).await {
        tracing::debug!(error = %e, key = %keys.name, "leasehold: could not leave the line; the place lapses");
    }
}

pub(crate) async fn renew_on<C: ConnectionLike>(
    con: &mut C,
    batch: &[Renewal],
) -> Result<Vec<Owned>, RedisError> {
    let mut out = Vec::with_capacity(batch.len());
    for chunk in batch.chunks(RENEW_CHUNK) {
        let mut cmd = scripts::evalsha(&scripts::RENEW, chunk.len());
        for item in chunk {
            cmd.arg(&item.keys.lock);
        }
        for item in chunk {
            cmd.arg(&*item.token).arg(millis(item.ttl));
        }
        let codes: Vec<i64> = scripts::invoke(&scripts::RENEW, &cmd, con).await?;
        out.extend(codes.into_iter().map(Owned::from_code));
    }
    Ok(out)
}

/// [`acquire_on`] with errors named after `server`: the acquire of the
/// single-server and cluster backends.
pub(crate) async fn acquire_with<C: ConnectionLike>(
    mut con: C,
    server: &str,
    (keys, token, ttl): (&LockKeys, &str, Duration),
    in_line: bool,
) -> Result<Acquired, LockError> {
    acquire_on(&mut con, keys, token, ttl, in_line)
        .await
        .map_err(|e| e.unwrap_or_else(|e| backend_error(server, e)))
}

/// [`release_on`] with errors named after `server`, and the release
/// announced to this client's waiters at once (others hear it by pub/sub):
/// the first in line if it is ours, else, with nobody in line, our first
/// waiter. The release of the single-server and cluster backends.
pub(crate) async fn release_with<C: ConnectionLike>(
    mut con: C,
    server: &str,
    waiters: &WaitList,
    (keys, token, keep): (&LockKeys, &str, Duration),
    publish: &str,
) -> Result<Owned, LockError> {
    let released = release_on(&mut con, keys, token, keep, publish)
        .await
        .map_err(|e| backend_error(server, e))?;
    if released.owned == Owned::Yes && keep.is_zero() {
        let announcement = match &released.next {
            Some(next) => Announcement::Next(next),
            None => Announcement::Free(token),
        };
        waiters.announce(&keys.channel, announcement);
    }
    Ok(released.owned)
}

/// Whole milliseconds, at least 1 (Redis rejects a zero expiry).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl Backend for RedisBackend {
    fn acquire<'a>(
        &'a self,
        keys: &'a LockKeys,
        token: &'a str,
        ttl: Duration,
        in_line: bool,
    ) -> BoxFuture<'a, Result<Acquired, LockError>> {
        Box::pin(acquire_with(
            self.conn.clone(),
            &self.server,
            (keys, token, ttl),
            in_line,
        ))
    }

    fn release<'a>(
        &'a self,
        keys: &'a LockKeys,
        token: &'a str,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Owned, LockError>> {
        Box::pin(release_with(
            self.conn.clone(),
            &self.server,
            &self.listening.waiters,
            (keys, token, keep),
            "PUBLISH",
        ))
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal]) -> BoxFuture<'a, Result<Vec<Owned>, LockError>> {
        Box::pin(async move {
            let mut con = self.conn.clone();
            renew_on(&mut con, batch).await.map_err(|e| self.error(e))
        })
    }

    fn leave<'a>(&'a self, keys: &'a LockKeys, token: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(leave_with(self.conn.clone(), keys, token, "PUBLISH"))
    }

    fn sync_replicas<'a>(
        &'a self,
        _keys: &'a LockKeys,
        replicas: usize,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<usize, LockError>> {
        Box::pin(async move {
            // WAIT covers the writes of this connection: the acquisition was
            // sent on it just before.
            let mut con = self.conn.clone();
            let acked: i64 = redis::cmd("WAIT")
                .arg(replicas)
                .arg(millis(timeout))
                .query_async(&mut con)
                .await
                .map_err(|e| self.error(e))?;
            Ok(usize::try_from(acked).unwrap_or(0))
        })
    }

    fn watch<'a>(&'a self, keys: &'a LockKeys) -> BoxFuture<'a, Result<(), LockError>> {
        Box::pin(
            self.listening
                .watch(&keys.channel, || self.start_listener()),
        )
    }

    fn unwatch(&self, keys: &LockKeys) {
        self.listening.unwatch(&keys.channel);
    }

    fn waiters(&self) -> &WaitList {
        &self.listening.waiters
    }

    fn describe(&self) -> String {
        self.server.clone()
    }
}
