//! Finding the primary of a monitored set: the sentinel URLs read (the
//! sentinels' addresses, and the template of the primary's URL: its
//! credentials, database and query), each sentinel asked in turn for the
//! primary's address, the server it names checked to be a primary, and, for
//! `restart_grace`, how long it has been one.

use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionManager;
use tokio::sync::mpsc;

use crate::backend::connect::{Address, backend_error, connect_manager, within_connect_timeout};
use crate::config::ConnectSettings;
use crate::error::{LockError, redact_url};

/// How to build the primary's URL from the address a sentinel gives.
#[derive(Clone)]
pub(super) struct PrimaryTemplate {
    scheme: String,
    /// `user:password` as written (percent-encoded), if any.
    userinfo: Option<String>,
    /// `/db`, or empty.
    path: String,
    /// The query left once leasehold's own parameters are taken out.
    query: Option<String>,
}

impl PrimaryTemplate {
    pub(super) fn url(&self, host: &str, port: u16) -> String {
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let userinfo = self
            .userinfo
            .as_deref()
            .map(|u| format!("{u}@"))
            .unwrap_or_default();
        let query = self
            .query
            .as_deref()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        format!(
            "{}://{userinfo}{host}:{port}{}{query}",
            self.scheme, self.path
        )
    }
}

/// Split a sentinel URL into the sentinel's own URL (no path, none of
/// leasehold's parameters) and the template of the primary's.
pub(super) fn split_sentinel_url(url: &str) -> Result<(String, PrimaryTemplate), LockError> {
    let bad = || {
        LockError::invalid(
            "sentinels",
            format!(
                "`{}` is not a sentinel URL; expected redis://[user:password@]host:port",
                // Redacted whole: a password may contain a `?`.
                redact_url(url)
            ),
        )
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(bad)?;
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let (authority, path) = match before_query.find('/') {
        Some(slash) => before_query.split_at(slash),
        None => (before_query, ""),
    };
    if authority.is_empty() {
        return Err(bad());
    }
    let (userinfo, _host) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    let mut primary_user = None;
    let mut primary_password = None;
    let mut kept = Vec::new();
    for pair in query.into_iter().flat_map(|q| q.split('&')) {
        match pair.split_once('=') {
            Some(("primary_password", value)) => primary_password = Some(value),
            Some(("primary_username", value)) => primary_user = Some(value),
            _ if pair.is_empty() => {}
            _ => kept.push(pair),
        }
    }
    let query = (!kept.is_empty()).then(|| kept.join("&"));
    let primary_userinfo = match primary_password {
        Some("") => None,
        Some(password) => Some(format!("{}:{password}", primary_user.unwrap_or(""))),
        None => userinfo.map(str::to_owned),
    };
    let sentinel_url = match &query {
        Some(q) => format!("{scheme}://{authority}?{q}"),
        None => format!("{scheme}://{authority}"),
    };
    let path = if path == "/" { "" } else { path }.to_owned();
    Ok((
        sentinel_url,
        PrimaryTemplate {
            scheme: scheme.to_owned(),
            userinfo: primary_userinfo,
            path,
            query,
        },
    ))
}

/// The sentinels' addresses, and the template of the primary's URL (from
/// the first sentinel URL).
pub(super) fn parse_sentinels(
    urls: &[String],
) -> Result<(Vec<Address>, PrimaryTemplate), LockError> {
    let mut sentinels = Vec::new();
    let mut template = None;
    for url in urls {
        let (sentinel_url, primary) = split_sentinel_url(url)?;
        sentinels.push(Address::parse(&sentinel_url)?);
        template.get_or_insert(primary);
    }
    let Some(template) = template else {
        return Err(LockError::invalid("sentinels", "no sentinel URL given"));
    };
    Ok((sentinels, template))
}

/// Ask each sentinel in turn for the primary; the first answer wins. When
/// every sentinel (or the primary it named) refused this client's setup
/// (a wrong password...), the error is [`LockError::Misconfigured`].
pub(super) async fn resolve(
    master_name: &str,
    sentinels: &[Address],
    template: &PrimaryTemplate,
    settings: &ConnectSettings,
    shown: &str,
) -> Result<Address, LockError> {
    let mut errors = Vec::new();
    let mut setup_errors = 0;
    let mut failed = |error: LockError, errors: &mut Vec<String>| {
        setup_errors += usize::from(error.is_misconfigured());
        errors.push(error.to_string());
    };
    for sentinel in sentinels {
        match ask(master_name, sentinel, settings).await {
            Ok(Some((host, port))) => {
                let address = Address::parse(&template.url(&host, port))?;
                // A sentinel may name a primary that was just demoted.
                match is_primary(&address, settings).await {
                    Ok(true) => return Ok(address),
                    Ok(false) => errors.push(format!("{} is not a primary", address.shown)),
                    Err(e) => failed(e, &mut errors),
                }
            }
            Ok(None) => errors.push(format!(
                "{} knows no primary named `{master_name}`",
                sentinel.shown
            )),
            Err(e) => failed(e, &mut errors),
        }
    }
    let message = format!("no primary found: {}", errors.join("; "));
    Err(if setup_errors > 0 && setup_errors == errors.len() {
        LockError::misconfigured(shown, message)
    } else {
        LockError::backend(shown, message)
    })
}

/// One sentinel's answer to `SENTINEL get-master-addr-by-name`.
pub(super) async fn ask(
    master_name: &str,
    sentinel: &Address,
    settings: &ConnectSettings,
) -> Result<Option<(String, u16)>, LockError> {
    let client = sentinel.client(settings)?;
    let mut con = within_connect_timeout(
        client.get_multiplexed_async_connection(),
        settings,
        &sentinel.shown,
    )
    .await?;
    let mut cmd = redis::cmd("SENTINEL");
    cmd.arg("get-master-addr-by-name").arg(master_name);
    let asking = cmd.query_async::<Option<(String, u16)>>(&mut con);
    match tokio::time::timeout(settings.response_timeout, asking).await {
        Ok(answer) => answer.map_err(|e| backend_error(&sentinel.shown, e)),
        Err(_) => Err(LockError::backend(&sentinel.shown, "no answer in time")),
    }
}

/// How long `primary` has been the set's primary, as the first sentinel
/// that answers `SENTINEL MASTER` knows it: its `role-reported-time`, the
/// time since it switched to this primary (or, if it started monitoring
/// later, since then: shorter, the safe side). Zero if that sentinel still
/// names another primary (it has not heard of the failover yet); `None` if
/// no sentinel says.
pub(super) async fn primary_age(
    master_name: &str,
    sentinels: &[Address],
    template: &PrimaryTemplate,
    primary: &Address,
    settings: &ConnectSettings,
) -> Option<Duration> {
    for sentinel in sentinels {
        let Ok(client) = sentinel.client(settings) else {
            continue;
        };
        let Ok(mut con) = within_connect_timeout(
            client.get_multiplexed_async_connection(),
            settings,
            &sentinel.shown,
        )
        .await
        else {
            continue;
        };
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("MASTER").arg(master_name);
        let asking = cmd.query_async::<Value>(&mut con);
        let Ok(Ok(reply)) = tokio::time::timeout(settings.response_timeout, asking).await else {
            continue;
        };
        let named = match (
            field(&reply, "ip"),
            field(&reply, "port").and_then(|p| p.parse::<u16>().ok()),
        ) {
            (Some(ip), Some(port)) => redact_url(&template.url(&ip, port)),
            _ => continue,
        };
        if named != primary.shown {
            return Some(Duration::ZERO);
        }
        if let Some(ms) = field(&reply, "role-reported-time").and_then(|v| v.parse().ok()) {
            return Some(Duration::from_millis(ms));
        }
    }
    None
}

/// A field of a `SENTINEL MASTER` reply: a flat array of names and values
/// (RESP2) or a map (RESP3).
pub(super) fn field(reply: &Value, name: &str) -> Option<String> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    };
    match reply {
        Value::Array(items) => items
            .chunks(2)
            .find(|pair| text(&pair[0]).as_deref() == Some(name))
            .and_then(|pair| pair.get(1).and_then(text)),
        Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| text(k).as_deref() == Some(name))
            .and_then(|(_, v)| text(v)),
        _ => None,
    }
}

/// Whether the server at `address` says `ROLE` master.
pub(super) async fn is_primary(
    address: &Address,
    settings: &ConnectSettings,
) -> Result<bool, LockError> {
    let client = address.client(settings)?;
    let mut con = within_connect_timeout(
        client.get_multiplexed_async_connection(),
        settings,
        &address.shown,
    )
    .await?;
    let cmd = redis::cmd("ROLE");
    let asking = cmd.query_async::<Value>(&mut con);
    let role = match tokio::time::timeout(settings.response_timeout, asking).await {
        Ok(role) => role.map_err(|e| backend_error(&address.shown, e))?,
        Err(_) => return Err(LockError::backend(&address.shown, "no answer in time")),
    };
    Ok(match role {
        Value::Array(items) => match items.first() {
            Some(Value::BulkString(role)) => role == b"master",
            Some(Value::SimpleString(role)) => role == "master",
            _ => false,
        },
        _ => false,
    })
}

/// The command connection to a primary (RESP3, so it reports disconnections).
pub(super) async fn open_primary(
    address: &Address,
    settings: &ConnectSettings,
    pushes: mpsc::UnboundedSender<redis::PushInfo>,
) -> Result<ConnectionManager, LockError> {
    connect_manager(
        address.resp3_client(settings)?,
        settings,
        &address.shown,
        Some(pushes),
        false,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_master_field_is_read_from_either_protocol() {
        let flat = Value::Array(vec![
            Value::BulkString(b"name".to_vec()),
            Value::BulkString(b"mymaster".to_vec()),
            Value::BulkString(b"role-reported-time".to_vec()),
            Value::BulkString(b"1234".to_vec()),
        ]);
        assert_eq!(field(&flat, "role-reported-time").as_deref(), Some("1234"));
        let map = Value::Map(vec![(
            Value::BulkString(b"role-reported-time".to_vec()),
            Value::Int(99),
        )]);
        assert_eq!(field(&map, "role-reported-time").as_deref(), Some("99"));
        assert_eq!(field(&map, "num-slaves"), None);
        assert_eq!(field(&Value::Nil, "role-reported-time"), None);
    }

    #[test]
    fn sentinel_urls_split_into_the_sentinel_and_the_primary() -> Result<(), LockError> {
        let (sentinel, primary) =
            split_sentinel_url("redis://:spw@s1:26379/2?primary_password=ppw&protocol=resp3")?;
        assert_eq!(sentinel, "redis://:spw@s1:26379?protocol=resp3");
        assert_eq!(
            primary.url("10.0.0.1", 6380),
            "redis://:ppw@10.0.0.1:6380/2?protocol=resp3"
        );

        let (sentinel, primary) = split_sentinel_url("redis://u:pw@s1:26379")?;
        assert_eq!(sentinel, "redis://u:pw@s1:26379");
        assert_eq!(primary.url("::1", 7000), "redis://u:pw@[::1]:7000");

        let (_, primary) = split_sentinel_url("redis://:spw@s1?primary_password=&x=1")?;
        assert_eq!(primary.url("h", 1), "redis://h:1?x=1");

        let Err(err) = split_sentinel_url("s1:26379?primary_password=secret") else {
            panic!("a URL without a scheme is refused");
        };
        let err = err.to_string();
        assert!(!err.contains("secret"), "{err}");
        Ok(())
    }
}
