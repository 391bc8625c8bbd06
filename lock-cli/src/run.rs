//! `leasehold run KEY -- CMD ARGS…`: a cluster-wide `flock` for shell
//! scripts, cron jobs, CI steps and Kubernetes CronJobs.
//!
//! The lock is taken with renewal, the command runs with `LEASEHOLD_KEY` and
//! `LEASEHOLD_FENCING_TOKEN` in its environment, and the lock is released
//! once it has exited. A lease lost meanwhile stops the command (SIGTERM,
//! then SIGKILL after `--kill-after`); SIGINT and SIGTERM sent to `leasehold
//! run` go to the command, and the lock is released after it exits.
//!
//! Exit codes follow sysexits(3) where the command did not run: 75
//! (`EX_TEMPFAIL`) busy or lost, 69 (`EX_UNAVAILABLE`) the servers could not
//! grant it, 78 (`EX_CONFIG`) the setup is wrong, 70 (`EX_SOFTWARE`) anything
//! else; 126/127 as a shell does when the command cannot be started.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use clap::Args;
use leasehold::{LockClient, LockError, LockGuard};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::connect::{Global, Open, for_operators, open};
use crate::duration;

/// Exit code: the command ran and exited 0, or `--skip-if-locked` skipped it.
const OK: u8 = 0;
/// Exit code (`EX_UNAVAILABLE`): the servers could not be reached or grant
/// nothing for now.
const UNAVAILABLE: u8 = 69;
/// Exit code (`EX_SOFTWARE`): any other failure.
const SOFTWARE: u8 = 70;
/// Exit code (`EX_TEMPFAIL`): busy after `--wait`, or the lease was lost
/// while the command ran.
const TEMPFAIL: u8 = 75;
/// Exit code (`EX_CONFIG`): a wrong password, certificate, URL or key.
const CONFIG: u8 = 78;
/// Exit code: the command was found but could not be started.
const CANNOT_EXECUTE: u8 = 126;
/// Exit code: the command was not found.
const NOT_FOUND: u8 = 127;

/// How long an interrupted wait lets its background cleanup run.
const CLEANUP: Duration = Duration::from_millis(300);

/// The options of `leasehold run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The lock key (without prefix). The command runs while it is held.
    pub(crate) key: String,
    /// Lease length: renewed every third of it while the command runs; a
    /// crashed `leasehold run` frees the key after this long.
    #[arg(long, default_value = "30s", value_parser = parse_ttl)]
    ttl: Duration,
    /// How long to wait for a busy lock (default: one try).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    wait: Duration,
    /// Exit 0 instead of 75 when the lock is still busy after --wait (the
    /// command does not run).
    #[arg(long)]
    skip_if_locked: bool,
    /// When the lease is lost, the command gets SIGTERM, then SIGKILL after
    /// this long.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    kill_after: Duration,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// SIGINT and SIGTERM, caught from before the connection on.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// The next of them to arrive.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: `Signal::recv` is.
    async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
        }
    }
}

/// Runs `leasehold run`; the exit code.
pub(crate) async fn run(global: &Global, args: RunArgs) -> u8 {
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(error) => return fail(SOFTWARE, &format!("cannot catch signals: {error}")),
    };
    // An application's client: a server whose eviction policy could drop
    // the key is refused (misconfigured), not used with a warning.
    let client = tokio::select! {
        opened = open(global, false) => match opened {
            Ok(client) => client,
            Err(Open::Usage(message)) => return fail(CONFIG, &message),
            Err(Open::Lock(error)) => return lock_failure(&error),
        },
        signo = signals.next() => return interrupted(signo),
    };
    let acquired = tokio::select! {
        acquired = acquire(&client, &args) => acquired,
        signo = signals.next() => {
            // `acquire` is dropped by now: being cancel safe, it removes its
            // place in line in the background. Give that round trip a moment
            // to reach the server before the process (and its runtime)
            // ends, so that the next waiter is not held up until the place
            // expires.
            tokio::time::sleep(CLEANUP).await;
            return interrupted(signo);
        }
    };
    let guard = match acquired {
        Ok(guard) => guard,
        Err(error) if error.is_busy() => {
            return if args.skip_if_locked {
                eprintln!(
                    "leasehold: `{}` is held by another owner; skipped",
                    args.key
                );
                OK
            } else {
                fail(TEMPFAIL, &error.to_string())
            };
        }
        Err(error) => return lock_failure(&error),
    };
    supervise(guard, &args, &mut signals).await
}

async fn acquire(client: &LockClient, args: &RunArgs) -> Result<LockGuard, LockError> {
    client
        .lock(args.key.as_str())
        .ttl(args.ttl)
        .renew(true)
        .wait(args.wait)
        .acquire()
        .await
}

/// Runs the command under `guard`, and gives the lock back after it exited.
async fn supervise(guard: LockGuard, args: &RunArgs, signals: &mut Signals) -> u8 {
    let Some((program, rest)) = args.command.split_first() else {
        return fail(CONFIG, "no command to run: give it after `--`");
    };
    let spawned = tokio::process::Command::new(program)
        .args(rest)
        .env("LEASEHOLD_KEY", &args.key)
        .env("LEASEHOLD_FENCING_TOKEN", guard.fencing_token().to_string())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => {
            let code = if error.kind() == std::io::ErrorKind::NotFound {
                NOT_FOUND
            } else {
                CANNOT_EXECUTE
            };
            let _ = guard.release().await;
            return fail(
                code,
                &format!("cannot run {}: {error}", program.to_string_lossy()),
            );
        }
    };
    // The child is reaped only by `wait` below, so its pid stays its own
    // (a zombie at worst) for as long as signals may be sent to it.
    let pid = child.id();
    let send = |signo: i32| {
        if let Some(pid) = pid.and_then(|pid| libc::pid_t::try_from(pid).ok()) {
            // SAFETY: kill(2) takes plain integers and touches no memory of
            // ours; the pid is our unreaped child's.
            unsafe {
                libc::kill(pid, signo);
            }
        }
    };
    // At a terminal, Ctrl-C already reached the command (it runs in the
    // terminal's foreground process group): sending it again could read as
    // a second, forceful interrupt.
    let interactive = std::io::stdin().is_terminal();

    let mut lost = false;
    let kill_timer = tokio::time::sleep(Duration::MAX);
    tokio::pin!(kill_timer);
    let mut kill_armed = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            () = guard.lost(), if !lost => {
                lost = true;
                let cause = guard
                    .lost_cause()
                    .map_or_else(|| "lost".to_owned(), |cause| cause.to_string());
                eprintln!(
                    "leasehold: the lease on `{}` was lost ({cause}); stopping the command \
                     (SIGTERM, then SIGKILL after {:?})",
                    args.key, args.kill_after
                );
                send(libc::SIGTERM);
                kill_timer
                    .as_mut()
                    .reset(tokio::time::Instant::now() + args.kill_after);
                kill_armed = true;
            }
            () = &mut kill_timer, if kill_armed => {
                kill_armed = false;
                send(libc::SIGKILL);
            }
            signo = signals.next() => {
                if !(signo == libc::SIGINT && interactive) {
                    send(signo);
                }
            }
        }
    };
    let status = match status {
        Ok(status) => status,
        Err(error) => {
            drop(guard);
            return fail(SOFTWARE, &format!("lost track of the command: {error}"));
        }
    };
    if lost || !guard.is_held() {
        if !lost {
            eprintln!(
                "leasehold: the lease on `{}` was lost while the command ran",
                args.key
            );
        }
        drop(guard);
        return TEMPFAIL;
    }
    if let Err(error) = guard.release().await {
        if error.is_lost() {
            eprintln!(
                "leasehold: the lease on `{}` was lost while the command ran: {error}",
                args.key
            );
            return TEMPFAIL;
        }
        // The command ran under the lease; the key expires by itself.
        eprintln!("leasehold: warning: the release failed ({error}); the key expires after --ttl");
    }
    exit_code(status)
}

/// The command's exit code; 128 + the signal's number when a signal ended it.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(SOFTWARE),
        (None, Some(signo)) => by_signal(signo),
        (None, None) => SOFTWARE,
    }
}

/// Stopped by a signal before the command started: as if it had ended us.
fn interrupted(signo: i32) -> u8 {
    eprintln!("leasehold: interrupted (signal {signo}) before the command started");
    by_signal(signo)
}

/// The exit code of a process ended by signal `signo`, as a shell reports it.
fn by_signal(signo: i32) -> u8 {
    u8::try_from(128 + (signo & 0x7f)).unwrap_or(SOFTWARE)
}

/// The exit code of a failure to connect or to take the lock.
fn lock_failure(error: &LockError) -> u8 {
    let code = if error.is_unavailable() {
        UNAVAILABLE
    } else if error.is_misconfigured() || matches!(error, LockError::InvalidArgument { .. }) {
        CONFIG
    } else {
        SOFTWARE
    };
    fail(code, &for_operators(&error.to_string()))
}

fn fail(code: u8, message: &str) -> u8 {
    eprintln!("leasehold: {message}");
    code
}

/// `--ttl`: a duration within the library's bounds.
fn parse_ttl(text: &str) -> Result<Duration, String> {
    let ttl = parse_duration(text)?;
    if ttl < leasehold::MIN_TTL || ttl > leasehold::MAX_TTL {
        return Err(format!(
            "`{text}`: the lease must be from {:?} to {} days",
            leasehold::MIN_TTL,
            leasehold::MAX_TTL.as_secs() / 86_400
        ));
    }
    Ok(ttl)
}

/// `500ms`, `10s`, `5m`, `1h`, or a plain number of seconds; zero allowed.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let units = [("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)];
    let seconds = duration::seconds(text, &units, "500ms, 10s, 5m or 1h", "ms, s, m or h")?;
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("`{}` is out of range", text.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("1d").is_err());
        assert!(parse_ttl("5ms").is_err());
        assert!(parse_ttl("9000h").is_err());
        assert_eq!(parse_ttl("30s"), Ok(Duration::from_secs(30)));
    }

    #[test]
    fn exit_codes_of_the_command() {
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        // Killed by SIGTERM (15) and by SIGKILL (9).
        assert_eq!(exit_code(ExitStatus::from_raw(15)), 143);
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
    }

    #[test]
    fn failures_map_to_sysexits() {
        let busy_free = [
            (
                LockError::Backend {
                    server: "redis://h:1".into(),
                    key: None,
                    message: "refused".into(),
                },
                UNAVAILABLE,
            ),
            (
                LockError::Misconfigured {
                    server: "redis://h:1".into(),
                    key: None,
                    message: "WRONGPASS".into(),
                },
                CONFIG,
            ),
            (
                LockError::InvalidArgument {
                    name: "url",
                    reason: "no host".into(),
                },
                CONFIG,
            ),
            (
                LockError::WrongType {
                    key: "k".into(),
                    redis_key: "leasehold:{k}:lock".into(),
                },
                SOFTWARE,
            ),
        ];
        for (error, code) in busy_free {
            assert_eq!(lock_failure(&error), code, "{error}");
        }
    }
}
