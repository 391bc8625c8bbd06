//! Worker processes: this test binary started again, each copy running one
//! ignored test of its own (a worker that the test proper sets up through
//! its environment).

use std::ffi::OsStr;
use std::process::{Child, Command};

/// This test binary, started to run only the ignored test `test` (its path
/// in the binary, as `processes::worker_process`) with `envs` set.
pub fn worker<I, K, V>(test: &str, envs: I) -> Child
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    worker_command(test, envs)
        .spawn()
        .expect("spawn a worker process")
}

/// The command of [`worker`], not yet started (to pipe its output).
pub fn worker_command<I, K, V>(test: &str, envs: I) -> Command
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    let exe = std::env::current_exe().expect("the test binary");
    let mut command = Command::new(exe);
    command
        .args([
            "--exact",
            test,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(envs);
    command
}

/// Waits for every worker, and asserts that each one succeeded.
pub fn all_succeed(workers: Vec<Child>) {
    for mut child in workers {
        assert!(child.wait().unwrap().success(), "a worker failed");
    }
}
