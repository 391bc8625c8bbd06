//! The connection options every subcommand shares, and the client they open.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use leasehold::{LockClient, LockError};

/// Options accepted before or after the subcommand.
#[derive(Debug, Args)]
pub(crate) struct Global {
    /// Redis URL (redis://, rediss:// for TLS, unix://); with --cluster,
    /// --redlock or --sentinel, several (repeat the option or separate with
    /// commas).
    #[arg(
        long,
        global = true,
        env = "REDIS_URL",
        hide_env_values = true,
        value_delimiter = ',',
        default_value = "redis://127.0.0.1:6379"
    )]
    pub(crate) url: Vec<String>,

    /// Treat the URLs as seed nodes of a Redis Cluster.
    #[arg(long, global = true, conflicts_with_all = ["redlock", "sentinel"])]
    pub(crate) cluster: bool,

    /// Treat the URLs as the independent masters of a Redlock deployment.
    #[arg(long, global = true, conflicts_with = "sentinel")]
    pub(crate) redlock: bool,

    /// Treat the URLs as Sentinels, and use the primary of the set MASTER
    /// they monitor (e.g. `--sentinel mymaster --url redis://s1:26379`; the
    /// primary's password goes in `?primary_password=`).
    #[arg(long, global = true, value_name = "MASTER")]
    pub(crate) sentinel: Option<String>,

    /// Trust the CA certificate(s) in this PEM file for rediss:// servers
    /// (instead of the web PKI roots).
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) tls_ca: Option<PathBuf>,

    /// Present this client certificate (PEM) to rediss:// servers that
    /// require one; needs --tls-key.
    #[arg(long, global = true, value_name = "FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,

    /// The private key (PEM) of --tls-cert.
    #[arg(long, global = true, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,

    /// The key prefix the applications use.
    #[arg(long, global = true, default_value = leasehold::DEFAULT_PREFIX)]
    pub(crate) prefix: String,

    /// Print JSON (fields: key, holder, ttl_ms, fencing_token, waiters, kind
    /// — lock, semaphore, read, write or election — and holders, each with
    /// holder, ttl_ms and fencing_token).
    #[arg(long, global = true)]
    pub(crate) json: bool,
}

/// Why a client could not be made: the command line, or the library.
pub(crate) enum Open {
    Usage(String),
    Lock(LockError),
}

impl From<LockError> for Open {
    fn from(error: LockError) -> Open {
        Open::Lock(error)
    }
}

/// A client connected as `global` says.
pub(crate) async fn open(global: &Global, allow_eviction: bool) -> Result<LockClient, Open> {
    let mut builder = LockClient::builder()
        .prefix(global.prefix.clone())
        .name(format!("leasehold-cli:{}", std::process::id()))
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(5))
        .allow_eviction(allow_eviction);
    if let Some(path) = &global.tls_ca {
        builder = builder.tls_ca(read_pem("--tls-ca", path)?);
    }
    if let (Some(cert), Some(key)) = (&global.tls_cert, &global.tls_key) {
        builder =
            builder.tls_client_cert(read_pem("--tls-cert", cert)?, read_pem("--tls-key", key)?);
    }
    let urls = &global.url;
    let client = if global.cluster {
        builder.connect_cluster(urls).await?
    } else if global.redlock {
        builder.connect_redlock(urls).await?
    } else if let Some(master) = &global.sentinel {
        builder.connect_sentinel(master, urls).await?
    } else {
        match urls.as_slice() {
            [url] => builder.connect(url).await?,
            _ => {
                return Err(Open::Usage(
                    "several URLs need --cluster (seed nodes), --redlock (masters) or --sentinel (sentinels)"
                        .to_owned(),
                ));
            }
        }
    };
    Ok(client)
}

/// The library's advice names its builder methods; an operator sets the
/// command's options instead.
pub(crate) fn for_operators(message: &str) -> String {
    message
        .replace("LockClientBuilder::tls_ca", "--tls-ca")
        .replace(
            "LockClientBuilder::tls_client_cert",
            "--tls-cert and --tls-key",
        )
}

/// The contents of a PEM file given as `option`.
fn read_pem(option: &str, path: &Path) -> Result<Vec<u8>, Open> {
    std::fs::read(path).map_err(|e| Open::Usage(format!("{option} {}: {e}", path.display())))
}
