//! `leasehold`: see and operate leasehold's distributed locks on Redis.
//!
//! ```text
//! leasehold list 'order:*'            # held locks whose keys match
//! leasehold show order:42             # holder, lease left, fencing token, waiters
//! leasehold release order:42 --force  # an operator's release (asks first)
//! leasehold watch order:42            # a live view, refreshed in place
//! leasehold --sentinel mymaster --url redis://s1:26379,redis://s2:26379 list
//! leasehold --url rediss://:pw@redis.internal:6380 --tls-ca ca.crt list
//! leasehold run nightly-backup --ttl 1m -- ./backup.sh   # a cluster-wide flock
//! ```
//!
//! Exit codes: 0 done, 1 not found (`show` or `release` of a free lock),
//! 2 usage (including a release refused without confirmation), 3 connection
//! or server error. `run` exits with its command's code, or its own (see
//! `run.rs`).

mod connect;
mod duration;
mod format;
mod run;

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use leasehold::{LockClient, LockError, LockInfo};

use connect::{Global, Open, for_operators, open};
use format::{info_json, info_text, table};

/// Exit code: done.
const OK: u8 = 0;
/// Exit code: `show` or `release` of a lock that is not held.
const NOT_FOUND: u8 = 1;
/// Exit code: bad usage, or a release refused without confirmation.
const USAGE: u8 = 2;
/// Exit code: the server(s) could not be reached, or failed.
const CONNECTION: u8 = 3;

/// See and operate leasehold's distributed locks on Redis, and run commands
/// under one.
///
/// Exit codes: 0 done, 1 not found (show or release of a free lock),
/// 2 usage, 3 connection or server error; `run` has its own.
#[derive(Debug, Parser)]
#[command(
    name = "leasehold",
    version,
    about = "See and operate leasehold's distributed locks on Redis, and run commands under one",
    long_about = None,
    after_help = "Exit codes: 0 done, 1 not found (show or release of a free lock), 2 usage, 3 connection or server error. `leasehold run` exits with its command's code, or 75/69/78/70 (see `leasehold run --help`)."
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the held locks whose keys match PATTERN (a Redis glob; SCAN, never KEYS).
    List {
        /// Glob over lock keys as the applications name them (without prefix).
        #[arg(default_value = "*")]
        pattern: String,
    },
    /// Show who holds KEY, the lease left, its fencing token and its waiters.
    Show {
        /// The lock key (without prefix).
        key: String,
    },
    /// Release KEY whoever holds it, waking the next waiter. The old holder
    /// learns it at its next renewal.
    Release {
        /// The lock key (without prefix).
        key: String,
        /// Required: this takes the lock away from a running holder.
        #[arg(long)]
        force: bool,
        /// Do not ask for confirmation (required when not on a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Watch KEY: holder, lease left and waiters, refreshed in place.
    Watch {
        /// The lock key (without prefix).
        key: String,
        /// Stop after this many refreshes (default: until interrupted).
        #[arg(long)]
        count: Option<u64>,
        /// Time between refreshes: `500ms`, `2s`, `1m` (plain numbers are seconds).
        #[arg(long, default_value = "1s", value_parser = parse_interval)]
        interval: Duration,
    },
    /// Run a command while holding KEY, renewed, released when it exits: a
    /// cluster-wide flock for cron jobs, CI steps and deploy scripts.
    ///
    /// The command gets LEASEHOLD_KEY and LEASEHOLD_FENCING_TOKEN in its
    /// environment, and leasehold exits with its code (128 + the signal's
    /// number when a signal ended it). SIGINT and SIGTERM go to the command;
    /// the lock is released after it exits. If the lease is lost meanwhile,
    /// the command gets SIGTERM, then SIGKILL after --kill-after.
    #[command(after_help = concat!(
        "Exit codes: the command's own; 75 busy after --wait (0 with --skip-if-locked, ",
        "the command not run) or the lease lost while it ran; 69 the servers unreachable ",
        "or granting nothing for now; 78 misconfigured (password, certificate, URL, key); ",
        "70 any other failure; 126/127 the command cannot be started / was not found; ",
        "2 a wrong command line.\n\n",
        "Example: leasehold --url redis://redis:6379 run nightly-backup --ttl 1m --skip-if-locked -- ./backup.sh",
    ))]
    Run(run::RunArgs),
}

/// A failure with its exit code; the message is already redacted by the
/// library (no password appears in a `LockError`).
struct Failure {
    code: u8,
    message: String,
    /// The server was refused for a `maxmemory-policy` that can evict keys.
    evicting: bool,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: USAGE,
            message: message.into(),
            evicting: false,
        }
    }
}

impl From<LockError> for Failure {
    fn from(error: LockError) -> Failure {
        let message = error.to_string();
        // The refusal names the policy (SPEC 13), whatever its variant.
        let evicting = error.is_misconfigured() && message.contains("maxmemory-policy");
        let code = match error {
            LockError::InvalidArgument { .. } if !evicting => USAGE,
            _ => CONNECTION,
        };
        Failure {
            code,
            message: for_operators(&message),
            evicting,
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // A usage error may quote a misplaced URL: never its password.
        Err(error) if error.use_stderr() => {
            let args: Vec<String> = std::env::args_os()
                .map(|arg| arg.to_string_lossy().into_owned())
                .collect();
            eprint!("{}", without_secrets(&error.to_string(), &args));
            return ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(USAGE));
        }
        // Help and version exit 0.
        Err(error) => error.exit(),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("leasehold: cannot start: {error}");
            return ExitCode::from(CONNECTION);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("leasehold: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

async fn run(cli: Cli) -> Result<u8, Failure> {
    // Checked before connecting: a usage error needs no server.
    if let Command::Release { force: false, .. } = cli.command {
        return Err(Failure::usage(
            "release takes the lock away from its holder: add --force to confirm that this is meant",
        ));
    }
    if let Command::Run(args) = cli.command {
        return Ok(run::run(&cli.global, args).await);
    }
    let client = connect(&cli.global, &cli.command).await?;
    let json = cli.global.json;
    match cli.command {
        // Handled above, with its own exit codes.
        Command::Run(_) => Ok(OK),
        Command::List { pattern } => list(&client, &pattern, json).await,
        Command::Show { key } => show(&client, &key, json).await,
        Command::Release { key, yes, .. } => release(&client, &key, yes, json).await,
        Command::Watch {
            key,
            count,
            interval,
        } => watch(&client, &key, count, interval, json).await,
    }
}

/// Connect as `global` says. A server whose `maxmemory-policy` can evict
/// keys, which applications refuse, is used anyway with a warning: an
/// operator must be able to see (and release) the locks there.
async fn connect(global: &Global, command: &Command) -> Result<LockClient, Failure> {
    match connect_with(global, false).await {
        Err(Failure {
            evicting: true,
            message,
            ..
        }) => {
            let doing = match command {
                Command::Release { .. } => "releasing",
                _ => "reading the locks",
            };
            // The library's advice names its Rust API; an operator's is the
            // server's setting.
            let message = message.replace(
                ", or accept the risk with LockClientBuilder::allow_eviction(true)",
                "",
            );
            eprintln!(
                "leasehold: warning: {message}\nleasehold: {doing} anyway (an evicted lock key lets a second holder in)"
            );
            connect_with(global, true).await
        }
        other => other,
    }
}

async fn connect_with(global: &Global, allow_eviction: bool) -> Result<LockClient, Failure> {
    open(global, allow_eviction)
        .await
        .map_err(|error| match error {
            Open::Usage(message) => Failure::usage(message),
            Open::Lock(error) => Failure::from(error),
        })
}

/// `text` with every command-line argument (or `--option=value` value) that
/// may hold a password masked: anything with an `@` keeps only what follows
/// its last `@`, anything naming a password is hidden whole.
fn without_secrets(text: &str, args: &[String]) -> String {
    let mut values: Vec<&str> = args
        .iter()
        .flat_map(|arg| [Some(arg.as_str()), arg.split_once('=').map(|(_, v)| v)])
        .flatten()
        .filter(|value| !value.is_empty())
        .collect();
    // Longest first, so that a value is masked before a part of it.
    values.sort_by_key(|value| std::cmp::Reverse(value.len()));
    let mut text = text.to_owned();
    for value in values {
        let masked = if value.to_ascii_lowercase().contains("pass") {
            "***".to_owned()
        } else if let Some(at) = value.rfind('@') {
            format!("***{}", &value[at..])
        } else {
            continue;
        };
        text = text.replace(value, &masked);
    }
    text
}

async fn list(client: &LockClient, pattern: &str, json: bool) -> Result<u8, Failure> {
    let infos = client.list(pattern).await?;
    let mut out = std::io::stdout().lock();
    if json {
        let all: Vec<serde_json::Value> = infos.iter().map(info_json).collect();
        write_line(&mut out, &serde_json::Value::Array(all).to_string());
    } else if infos.is_empty() {
        write_line(
            &mut out,
            &format!(
                "no held locks match `{pattern}` under the prefix `{}` (--prefix)",
                client.prefix()
            ),
        );
    } else {
        write_line(&mut out, table(&infos).trim_end());
    }
    Ok(OK)
}

async fn show(client: &LockClient, key: &str, json: bool) -> Result<u8, Failure> {
    let info = client.inspect(key).await?;
    let mut out = std::io::stdout().lock();
    match info {
        Some(info) if json => write_line(&mut out, &info_json(&info).to_string()),
        Some(info) => write_line(&mut out, info_text(&info).trim_end()),
        None => {
            if json {
                write_line(&mut out, "null");
            }
            eprintln!("leasehold: `{key}` is not held");
            return Ok(NOT_FOUND);
        }
    }
    Ok(OK)
}

async fn release(client: &LockClient, key: &str, yes: bool, json: bool) -> Result<u8, Failure> {
    let before = client.inspect(key).await?;
    if !yes {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::usage(format!(
                "not releasing `{key}`: no terminal to confirm on; add --yes"
            )));
        }
        let Some(info) = &before else {
            eprintln!("leasehold: `{key}` is not held");
            return Ok(NOT_FOUND);
        };
        if !confirm(info) {
            return Err(Failure::usage(format!("`{key}` left as it is")));
        }
    }
    let released = client.force_release(key).await?;
    let holder = before.as_ref().map(|info| info.holder.as_str());
    let mut out = std::io::stdout().lock();
    if json {
        let report = serde_json::json!({
            "key": key,
            "released": released,
            "holder": if released { holder } else { None },
        });
        write_line(&mut out, &report.to_string());
    }
    if !released {
        eprintln!("leasehold: `{key}` is not held");
        return Ok(NOT_FOUND);
    }
    if !json {
        let line = match holder {
            Some(holder) => format!(
                "released `{key}` (held by {holder}; it learns at its next renewal); the next waiter was woken"
            ),
            None => format!("released `{key}`; the next waiter was woken"),
        };
        write_line(&mut out, &line);
    }
    Ok(OK)
}

/// Ask on the terminal; true on `y` or `yes`.
fn confirm(info: &LockInfo) -> bool {
    eprint!(
        "Force-release `{}` held by {} ({} left, fencing token {}, {} waiting)? [y/N] ",
        info.key,
        info.holder,
        format::ttl(info.ttl),
        info.fencing_token,
        info.waiters
    );
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

async fn watch(
    client: &LockClient,
    key: &str,
    count: Option<u64>,
    interval: Duration,
    json: bool,
) -> Result<u8, Failure> {
    let in_place = !json && std::io::stdout().is_terminal();
    let mut shown_lines = 0;
    let mut refreshes = 0u64;
    loop {
        let info = client.inspect(key).await?;
        let mut out = std::io::stdout().lock();
        if json {
            let value = info.as_ref().map_or(serde_json::Value::Null, info_json);
            write_line(&mut out, &value.to_string());
        } else {
            let text = match &info {
                Some(info) => format::watch_line(info),
                None => format!("{key}  free"),
            };
            if in_place {
                // Back over what was shown, clear it, draw anew.
                if shown_lines > 0 {
                    let _ = write!(out, "\x1b[{shown_lines}F\x1b[J");
                }
                shown_lines = text.lines().count().max(1);
            }
            write_line(&mut out, &text);
        }
        drop(out);
        refreshes += 1;
        if count.is_some_and(|n| refreshes >= n) {
            return Ok(OK);
        }
        tokio::time::sleep(interval).await;
    }
}

fn write_line(out: &mut impl Write, text: &str) {
    // A closed pipe (`leasehold list | head`) is not an error worth a message.
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

/// `500ms`, `2s`, `1m`, or a plain number of seconds.
fn parse_interval(text: &str) -> Result<Duration, String> {
    let units = [("ms", 0.001), ("s", 1.0), ("m", 60.0)];
    let seconds = duration::seconds(text, &units, "500ms, 2s or 1m", "ms, s or m")?;
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("`{}` must be above zero", text.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn usage_errors_mask_passwords() {
        let args: Vec<String> = [
            "leasehold",
            "show",
            "k",
            "redis://u:pw@h:1",
            "--url=unix:///s?pass=x",
        ]
        .map(String::from)
        .to_vec();
        let text = "unexpected 'redis://u:pw@h:1' and 'unix:///s?pass=x' for k";
        assert_eq!(
            without_secrets(text, &args),
            "unexpected '***@h:1' and '***' for k"
        );
    }

    #[test]
    fn intervals_parse() {
        assert_eq!(parse_interval("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_interval("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_interval("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_interval("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_interval("0s").is_err());
        assert!(parse_interval("fast").is_err());
        assert!(parse_interval("2h").is_err());
    }

    #[test]
    fn global_options_go_before_or_after_the_subcommand() -> Result<(), clap::Error> {
        let before = Cli::try_parse_from(["leasehold", "--json", "--prefix", "p:", "show", "k"])?;
        let after = Cli::try_parse_from(["leasehold", "show", "k", "--json", "--prefix", "p:"])?;
        for cli in [before, after] {
            assert!(cli.global.json);
            assert_eq!(cli.global.prefix, "p:");
        }
        Ok(())
    }
}
