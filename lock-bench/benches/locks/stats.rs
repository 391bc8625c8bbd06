//! Small statistics helpers: percentiles of recorded durations, medians of
//! repeated runs, and the process' CPU time.

use std::time::Duration;

/// Latency samples of one run.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    values: Vec<Duration>,
    sorted: bool,
}

impl Samples {
    pub fn with_capacity(n: usize) -> Samples {
        Samples {
            values: Vec::with_capacity(n),
            sorted: true,
        }
    }

    pub fn push(&mut self, d: Duration) {
        self.values.push(d);
        self.sorted = false;
    }

    pub fn extend(&mut self, other: Samples) {
        self.values.extend(other.values);
        self.sorted = false;
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// The `q`-quantile (0.0..=1.0), nearest rank; `None` without samples.
    pub fn quantile(&mut self, q: f64) -> Option<Duration> {
        if self.values.is_empty() {
            return None;
        }
        if !self.sorted {
            self.values.sort_unstable();
            self.sorted = true;
        }
        let n = self.values.len();
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as usize).clamp(1, n);
        Some(self.values[rank - 1])
    }

    /// p50 in microseconds (NaN without samples).
    pub fn p50_us(&mut self) -> f64 {
        self.quantile(0.50).map_or(f64::NAN, us)
    }

    /// p99 in microseconds (NaN without samples).
    pub fn p99_us(&mut self) -> f64 {
        self.quantile(0.99).map_or(f64::NAN, us)
    }
}

/// A duration in (fractional) microseconds.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Events per second over `elapsed`.
pub fn rate(count: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        count as f64 / secs
    } else {
        f64::NAN
    }
}

/// The index of the median element of `values` by `key` (the lower median
/// for an even count). `None` when empty.
pub fn median_index<T>(values: &[T], key: impl Fn(&T) -> f64) -> Option<usize> {
    if values.is_empty() {
        return None;
    }
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| key(&values[a]).total_cmp(&key(&values[b])));
    Some(order[(values.len() - 1) / 2])
}

/// User + system CPU time of this process so far (`getrusage(RUSAGE_SELF)`).
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes into the zeroed struct we pass it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// The benchmark's global allocator: the system allocator, counting the
/// bytes currently allocated, so that S7 can report how much memory each
/// implementation keeps per held lease, and the allocations made, so that
/// S1, S2 and S6 can report them per acquire + release (a count, steadier
/// than CPU time on a shared machine).
pub struct Counting;

static LIVE_BYTES: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
static ALLOCATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn counted() {
    ALLOCATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// counter is only arithmetic on the sizes it was given.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let p = unsafe { std::alloc::System.alloc(layout) };
        counted();
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as i64, std::sync::atomic::Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        let p = unsafe { std::alloc::System.alloc_zeroed(layout) };
        counted();
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as i64, std::sync::atomic::Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size() as i64, std::sync::atomic::Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { std::alloc::System.realloc(ptr, layout, new_size) };
        counted();
        if !p.is_null() {
            LIVE_BYTES.fetch_add(
                new_size as i64 - layout.size() as i64,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        p
    }
}

/// Heap bytes allocated and not yet freed, process-wide.
pub fn live_heap_bytes() -> i64 {
    LIVE_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Heap allocations (and reallocations) made so far, process-wide.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Resident memory of this process (`/proc/self/statm`), bytes; 0 if unknown.
pub fn resident_bytes() -> i64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: i64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * i64::from(page.max(0) as i32)
}
