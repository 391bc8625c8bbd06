//! Where a client's locks live, and the one place that turns that into a
//! [`Backend`]: the client sees only the trait.

use std::sync::Arc;

use super::Backend;
use super::connect::{Address, parse_all};
use super::redis::redlock::RedlockBackend;
use super::redis::server::Server;
use crate::config::{ConnectSettings, GateSettings};
use crate::error::LockError;

/// The Redis deployment a client connects to.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// One server (or a replicated set's primary at a fixed address).
    Server(String),
    /// One server, at the address of an application's redis-rs client.
    Client(Box<Address>),
    /// Independent masters, by majority.
    Redlock(Vec<String>),
    /// A Redis Cluster, from the URLs of some of its nodes.
    #[cfg(feature = "cluster")]
    Cluster(Vec<String>),
    /// The primary of a Sentinel-monitored set, through its sentinels.
    #[cfg(feature = "sentinel")]
    Sentinel {
        master_name: String,
        sentinels: Vec<String>,
    },
}

impl Target {
    /// The URLs given: the server's, the masters', the nodes' or the
    /// sentinels'.
    pub(crate) fn urls(&self) -> &[String] {
        match self {
            Target::Server(url) => std::slice::from_ref(url),
            Target::Client(_) => &[],
            Target::Redlock(urls) => urls,
            #[cfg(feature = "cluster")]
            Target::Cluster(urls) => urls,
            #[cfg(feature = "sentinel")]
            Target::Sentinel { sentinels, .. } => sentinels,
        }
    }

    /// Check what can be checked without a server: every URL parses, the
    /// lists are not empty. The errors show URLs redacted.
    pub(crate) fn check(&self) -> Result<(), LockError> {
        let urls = match self {
            Target::Server(url) => std::slice::from_ref(url),
            // Made from a client: nothing left to parse.
            Target::Client(_) => return Ok(()),
            Target::Redlock(urls) => {
                if urls.is_empty() {
                    return Err(LockError::invalid(
                        "urls",
                        "Redlock needs at least one master",
                    ));
                }
                urls.as_slice()
            }
            #[cfg(feature = "cluster")]
            Target::Cluster(urls) => {
                if urls.is_empty() {
                    return Err(LockError::invalid(
                        "urls",
                        "a Redis Cluster needs the URL of at least one of its nodes",
                    ));
                }
                urls.as_slice()
            }
            #[cfg(feature = "sentinel")]
            Target::Sentinel {
                master_name,
                sentinels,
            } => {
                if master_name.is_empty() {
                    return Err(LockError::invalid(
                        "master_name",
                        "the name of the monitored set is empty",
                    ));
                }
                if sentinels.is_empty() {
                    return Err(LockError::invalid(
                        "sentinels",
                        "Sentinel needs the URL of at least one sentinel",
                    ));
                }
                sentinels.as_slice()
            }
        };
        parse_all(urls).map(drop)
    }

    /// The servers, credentials redacted, for messages before a connection.
    pub(crate) fn describe(&self) -> String {
        let shown = |urls: &[String]| {
            urls.iter()
                .map(|url| crate::error::redact_url(url))
                .collect::<Vec<_>>()
                .join(",")
        };
        match self {
            Target::Server(url) => crate::error::redact_url(url),
            Target::Client(address) => address.shown.clone(),
            Target::Redlock(urls) => format!("redlock {}", shown(urls)),
            #[cfg(feature = "cluster")]
            Target::Cluster(urls) => format!("cluster {}", shown(urls)),
            #[cfg(feature = "sentinel")]
            Target::Sentinel {
                master_name,
                sentinels,
            } => format!("sentinel `{master_name}` via {}", shown(sentinels)),
        }
    }

    /// Connect, and check the server(s) within the connect timeout. What
    /// [`check`](Self::check) refuses is refused here too, before any
    /// connection: the backends take the target as checked.
    pub(crate) async fn open(
        &self,
        settings: &ConnectSettings,
        gate_settings: GateSettings,
    ) -> Result<Arc<dyn Backend>, LockError> {
        self.check()?;
        Ok(match self {
            Target::Server(url) => Arc::new(
                Server::connect(
                    Address::parse(url)?,
                    settings,
                    gate_settings,
                    Arc::default(),
                )
                .await?,
            ),
            Target::Client(address) => Arc::new(
                Server::connect((**address).clone(), settings, gate_settings, Arc::default())
                    .await?,
            ),
            Target::Redlock(urls) => {
                Arc::new(RedlockBackend::connect(urls, settings, gate_settings).await?)
            }
            #[cfg(feature = "cluster")]
            Target::Cluster(urls) => Arc::new(
                super::redis::cluster::Cluster::connect(urls, settings, gate_settings).await?,
            ),
            #[cfg(feature = "sentinel")]
            Target::Sentinel {
                master_name,
                sentinels,
            } => Arc::new(
                super::redis::sentinel::Sentinel::connect(
                    master_name,
                    sentinels,
                    settings,
                    gate_settings,
                )
                .await?,
            ),
        })
    }
}
