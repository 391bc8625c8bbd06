//! A clock shared by every process on the machine: `CLOCK_MONOTONIC`.
//! (`std::time::Instant` reads the same clock but cannot be exchanged
//! between processes.) Read with the raw system call, not libc's
//! `clock_gettime`: a worker whose clocks are faked (libfaketime preloaded,
//! see `scenarios::FakeClock`) still logs the machine's real time.

use std::time::Duration;

/// Nanoseconds of `CLOCK_MONOTONIC`: comparable across the processes of one
/// machine, never goes backwards, not affected by wall-clock changes.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the clock_gettime system call writes into the timespec we
    // pass; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clock_gettime,
            libc::CLOCK_MONOTONIC,
            &mut ts as *mut libc::timespec,
        )
    };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `now_ns() + d`.
pub fn after(d: Duration) -> u64 {
    now_ns() + d.as_nanos() as u64
}
