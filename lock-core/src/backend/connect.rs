//! Connection settings and the helpers every Redis backend uses to open
//! connections: URL parsing (with passwords redacted from every message),
//! the connect timeout, and the conversion of redis-rs errors.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{IntoConnectionInfo, ProtocolVersion, RedisError};
use tokio::sync::mpsc;

use crate::config::ConnectSettings;
use crate::error::{LockError, redact_url};

/// A parsed server address: what redis-rs connects to, and how messages
/// show it (without any password).
#[derive(Debug, Clone)]
pub(crate) struct Address {
    pub(crate) info: redis::ConnectionInfo,
    pub(crate) shown: String,
}

impl Address {
    /// Parse a URL; the error shows it redacted.
    pub(crate) fn parse(url: &str) -> Result<Address, LockError> {
        let shown = redact_url(url);
        if url.starts_with("rediss://") && !cfg!(feature = "tls") {
            return Err(LockError::invalid(
                "url",
                format!("`{shown}` needs TLS: enable leasehold's `tls` feature"),
            ));
        }
        #[cfg(feature = "tls")]
        if url.starts_with("rediss://") {
            install_crypto_provider();
        }
        let info = url.into_connection_info().map_err(|e| {
            let reason = if e.to_string().contains("Invalid database number") {
                if url.starts_with("unix://") || url.starts_with("redis+unix://") {
                    format!("`{shown}`: the `db` parameter must be a database number (`?db=0`)")
                } else {
                    format!(
                        "`{shown}`: the path must be a database number (`/0`, `/1`, …) \
                         or empty (database 0)"
                    )
                }
            } else {
                format!(
                    "`{shown}` is not a Redis URL ({:?}); expected redis://, rediss:// or unix://",
                    e.kind()
                )
            };
            LockError::invalid("url", reason)
        })?;
        Ok(Address { info, shown })
    }

    /// The address of an application's own redis-rs client: its connection
    /// info as it is (host, TLS and its certificates, user, password,
    /// database); messages show it as a URL without credentials.
    pub(crate) fn of_client(client: &redis::Client) -> Result<Address, LockError> {
        let info = client.get_connection_info().clone();
        let db = info.redis_settings().db();
        let shown = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) => format!("redis://{host}:{port}/{db}"),
            redis::ConnectionAddr::TcpTls { host, port, .. } => {
                format!("rediss://{host}:{port}/{db}")
            }
            redis::ConnectionAddr::Unix(path) => format!("unix://{}?db={db}", path.display()),
            other => other.to_string(),
        };
        let tls = matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. });
        if tls && !cfg!(feature = "tls") {
            return Err(LockError::invalid(
                "client",
                format!("`{shown}` needs TLS: enable leasehold's `tls` feature"),
            ));
        }
        #[cfg(feature = "tls")]
        if tls {
            install_crypto_provider();
        }
        Ok(Address { info, shown })
    }

    /// Whether connections to this address are encrypted.
    #[cfg(feature = "tls")]
    pub(crate) fn is_tls(&self) -> bool {
        matches!(self.info.addr(), redis::ConnectionAddr::TcpTls { .. })
    }

    /// A redis-rs client for this address speaking RESP3 (push messages),
    /// with the custom TLS certificates of `settings` for `rediss://`.
    pub(crate) fn resp3_client(
        &self,
        settings: &ConnectSettings,
    ) -> Result<redis::Client, LockError> {
        let resp3 = self
            .info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        self.open(self.info.clone().set_redis_settings(resp3), settings)
    }

    /// A redis-rs client for this address as the URL says (a sentinel's),
    /// with the custom TLS certificates of `settings` for `rediss://`.
    #[cfg(feature = "sentinel")]
    pub(crate) fn client(&self, settings: &ConnectSettings) -> Result<redis::Client, LockError> {
        self.open(self.info.clone(), settings)
    }

    fn open(
        &self,
        info: redis::ConnectionInfo,
        settings: &ConnectSettings,
    ) -> Result<redis::Client, LockError> {
        #[cfg(feature = "tls")]
        if let (Some(certs), redis::ConnectionAddr::TcpTls { .. }) = (&settings.tls, info.addr()) {
            return redis::Client::build_with_tls(info, certs.clone())
                .map_err(|e| backend_error(&self.shown, e));
        }
        #[cfg(not(feature = "tls"))]
        let _ = settings;
        redis::Client::open(info).map_err(|e| backend_error(&self.shown, e))
    }
}

/// Parse every URL of a deployment; the first error shows its URL redacted.
pub(crate) fn parse_all(urls: &[String]) -> Result<Vec<Address>, LockError> {
    urls.iter().map(|url| Address::parse(url)).collect()
}

/// The addresses as messages show them, joined by `separator`.
#[cfg(any(feature = "cluster", feature = "sentinel"))]
pub(crate) fn shown_all<'a>(
    addresses: impl IntoIterator<Item = &'a Address>,
    separator: &str,
) -> String {
    let shown: Vec<&str> = addresses.into_iter().map(|a| a.shown.as_str()).collect();
    shown.join(separator)
}

/// Make rustls usable: install the `ring` provider as the process default
/// unless the application installed one already (then that one is kept).
/// Without a default, rustls panics when redis-rs builds its TLS settings.
#[cfg(feature = "tls")]
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // An `Err` means another thread installed one meanwhile: fine too.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The first connection, within the connect timeout.
pub(crate) async fn within_connect_timeout<T>(
    connecting: impl std::future::Future<Output = redis::RedisResult<T>>,
    settings: &ConnectSettings,
    server: &str,
) -> Result<T, LockError> {
    match tokio::time::timeout(settings.connect_timeout, connecting).await {
        Ok(result) => result.map_err(|e| backend_error(server, e)),
        Err(_) => Err(LockError::backend(
            server,
            format!("could not connect within {:?}", settings.connect_timeout),
        )),
    }
}

/// The error for a first connection to `address` that did not come up within
/// the connect timeout. For `rediss://`, a plain probe tells the cases
/// apart: nothing accepts connections there (could not connect), the server
/// answers plain-text Redis (a setup mistake: it does not use TLS), or it
/// accepts but never answers the TLS handshake.
pub(crate) async fn connect_timed_out(address: &Address, settings: &ConnectSettings) -> LockError {
    let waited = settings.connect_timeout;
    #[cfg(feature = "tls")]
    if let redis::ConnectionAddr::TcpTls { host, port, .. } = address.info.addr() {
        let within = waited.min(Duration::from_secs(1));
        match plain_probe(host.clone(), *port, within).await {
            Probe::Unreachable => {}
            Probe::PlainRedis => {
                return LockError::misconfigured(
                    &address.shown,
                    format!(
                        "no TLS handshake came back within {waited:?}: the server may not use TLS \
                         (it answers plain-text Redis on this port); use redis:// for it, \
                         or the port of its TLS listener (`tls-port`)"
                    ),
                );
            }
            Probe::Silent => {
                return LockError::backend(
                    &address.shown,
                    format!(
                        "no TLS handshake came back within {waited:?}: the server may not use TLS \
                         on this port, or it does not answer"
                    ),
                );
            }
        }
    }
    LockError::backend(
        &address.shown,
        format!("could not connect within {waited:?}"),
    )
}

/// What a plain-text probe of a `rediss://` address found.
#[cfg(feature = "tls")]
enum Probe {
    /// No TCP connection could be made.
    Unreachable,
    /// It answered an inline `PING` the way Redis does (`+PONG`, `-NOAUTH …`).
    PlainRedis,
    /// It accepted the connection but sent nothing back.
    Silent,
}

/// Connect to `host:port` without TLS and send an inline `PING` (no
/// credentials: they never cross the network in clear text), reading the
/// first byte of the answer, each step within `within`.
#[cfg(feature = "tls")]
async fn plain_probe(host: String, port: u16, within: Duration) -> Probe {
    let probing = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        use std::net::ToSocketAddrs;
        let Ok(addrs) = (host.as_str(), port).to_socket_addrs() else {
            return Probe::Unreachable;
        };
        for addr in addrs {
            let Ok(mut stream) = std::net::TcpStream::connect_timeout(&addr, within) else {
                continue;
            };
            let mut first = [0u8; 1];
            let answered = stream.set_read_timeout(Some(within)).is_ok()
                && stream.write_all(b"PING\r\n").is_ok()
                && matches!(stream.read(&mut first), Ok(1));
            return if answered && matches!(first[0], b'+' | b'-') {
                Probe::PlainRedis
            } else {
                Probe::Silent
            };
        }
        Probe::Unreachable
    });
    probing.await.unwrap_or(Probe::Unreachable)
}

/// Open a reconnecting connection; the first connection must succeed within
/// the connect timeout. Pushes (pub/sub messages, disconnections) go to `push`.
pub(crate) async fn connect_manager(
    client: redis::Client,
    settings: &ConnectSettings,
    server: &str,
    push: Option<mpsc::UnboundedSender<redis::PushInfo>>,
    resubscribe: bool,
) -> Result<ConnectionManager, LockError> {
    let mut config = manager_config(settings);
    if let Some(push) = push {
        config = config.set_push_sender(push);
    }
    if resubscribe {
        config = config.set_automatic_resubscription();
    }
    within_connect_timeout(
        ConnectionManager::new_with_config(client, config),
        settings,
        server,
    )
    .await
}

/// The reconnection policy of every single-server connection.
pub(crate) fn manager_config(settings: &ConnectSettings) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(settings.connect_timeout))
        .set_response_timeout(Some(settings.response_timeout))
        .set_number_of_retries(settings.reconnect_retries)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_secs(1))
}

/// A redis-rs error as a [`LockError::Backend`] naming `server` (redacted),
/// or as a [`LockError::Misconfigured`] when it tells of a setup mistake.
pub(crate) fn backend_error(server: &str, err: RedisError) -> LockError {
    if let Some(message) = misconfiguration(server, &err) {
        return LockError::misconfigured(server, message);
    }
    if err.is_timeout() {
        LockError::backend(server, format!("no answer in time ({err})"))
    } else {
        LockError::backend(server, err.to_string())
    }
}

/// What to tell the user when `err` says the setup is wrong (a retry
/// cannot help), or `None`. Redis's texts never contain the password;
/// `server` is already redacted.
fn misconfiguration(server: &str, err: &RedisError) -> Option<String> {
    let text = err.to_string();
    let code = err.code().unwrap_or_default();
    let message = if err.kind() == redis::ErrorKind::Parse
        || text.contains("Incompatible type - Parse error")
    {
        // The peer answered with bytes that are no Redis reply at all (an
        // HTTP server, an SSH banner): another service listens there. (The
        // Cluster client wraps the parse error in its own, hence the text.)
        not_redis(server)
    } else if text.contains("InvalidContentType") {
        // rustls got bytes that are no TLS record in place of the handshake.
        format!(
            "no TLS handshake came back: the server may not use TLS (it answered something else, \
             {text}); use redis:// for a plain-text server, or the port of its TLS listener"
        )
    } else if is_certificate_error(&text) {
        format!(
            "TLS: the server's certificate was not accepted ({text}); \
             trust its CA with LockClientBuilder::tls_ca"
        )
    } else if text.contains("CertificateRequired") {
        format!(
            "TLS: the server requires a client certificate ({text}); \
             present one with LockClientBuilder::tls_client_cert"
        )
    } else if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm) {
        format!(
            "{ACL_REFUSED} ({text}); see the minimal ACL rule in docs/topologies.md (TLS and ACL users)"
        )
    } else if code == "NOAUTH" || text.contains("NOAUTH") {
        NO_PASSWORD.to_owned()
    } else if code == "WRONGPASS"
        || err.kind() == redis::ErrorKind::AuthenticationFailed
        || text.contains("WRONGPASS")
        || text.contains("Password authentication failed")
        || text.contains("without any password configured")
    {
        let why = err.detail().unwrap_or(&text);
        format!(
            "WRONGPASS: the server refused the user name or password of the URL ({why}); \
             {WHERE_THE_PASSWORD_GOES}"
        )
    } else if text.contains("DB index is out of range") {
        format!(
            "the database of the URL (its path, `/N`) does not exist on this server ({text}); \
             use one below the server's `databases` setting (16 by default)"
        )
    } else {
        return None;
    };
    Some(message)
}

/// The message for a peer whose reply is not the Redis protocol.
pub(crate) fn not_redis(server: &str) -> String {
    format!("the server at {server} does not speak the Redis protocol: wrong port?")
}

/// The message of a `NOAUTH` refusal: the server wants a password the URL
/// does not give.
const NO_PASSWORD: &str = concat!(
    "NOAUTH: the server requires a password and the URL gives none; ",
    "put it in the URL: redis://:password@host:port, or redis://user:password@host:port ",
    "for an ACL user (rediss:// with TLS; percent-encode `@`, `:`, `/`, `?` and `#` in it)"
);

/// Where credentials go, for the messages about refused ones.
const WHERE_THE_PASSWORD_GOES: &str = "credentials go in the URL: redis://:password@host:port, \
     or redis://user:password@host:port for an ACL user (percent-encode `@`, `:`, `/`, `?` and `#` in them)";

/// How every [`LockError::Misconfigured`] message about an ACL refusal starts.
pub(crate) const ACL_REFUSED: &str = "NOPERM: refused by the server's ACL";

/// Whether redis-rs's message tells of a server certificate rustls refused.
fn is_certificate_error(text: &str) -> bool {
    text.contains("invalid peer certificate") || text.contains("UnknownIssuer")
}

/// Whether a failed command may simply be sent again: the connection broke
/// (and the manager reconnects), or the server asked to retry. Every lock
/// script is safe to send twice.
pub(crate) fn is_retryable(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || matches!(
            err.kind(),
            redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain)
        )
}

/// Whole milliseconds, at least 1 (Redis rejects a zero expiry).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
