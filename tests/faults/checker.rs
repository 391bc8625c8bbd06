//! Reads the workers' logs and the fenced store's record and computes the
//! figures of a run.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use crate::workload::SectionRecord;

/// What a run did, and what went wrong in it.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    /// Critical sections that started (the lock was acquired).
    pub sections: usize,
    /// Worker processes with at least one section.
    pub workers_with_sections: usize,
    /// Sections whose body ran to the end.
    pub completed: usize,
    /// Sections whose body was dropped because the lease was lost.
    pub dropped: usize,
    /// Which primitive the sections took (`lock`, `semaphore`, `rw`,
    /// `all`): the family's figures are printed for the others.
    pub kind: &'static str,
    /// Pairs of sections that may not hold at once (see
    /// `SectionRecord::conflicts`) whose intervals overlap (two holders at
    /// once; for `lock_all`, two holders of one key).
    pub overlaps: usize,
    /// Sections whose counter write happened inside the interval of a
    /// section it conflicts with, neither of them the frozen one; for a
    /// semaphore: whose fenced write landed while `permits` others held.
    pub overlapping_writes: usize,
    /// Semaphore: its permits, the most sections inside their intervals at
    /// once, and the sections that started while `permits` others held.
    pub permits: u32,
    pub max_holders: usize,
    pub over_permits: usize,
    /// Two grants of one fence key (or of one key of `lock_all`) with the
    /// same token; for a semaphore, the store's `unique` fence counts them.
    pub token_duplicates: usize,
    /// The first overlapping pair, for the report.
    pub overlap_sample: String,
    /// The same, involving the frozen section (no lock prevents these).
    pub frozen_overlapping_writes: usize,
    /// Completed counter writes that the final counter does not show.
    pub lost_updates: u64,
    /// Counter writes sent but unanswered (the body was dropped meanwhile).
    pub writes_in_doubt: usize,
    pub fenced_accepted: usize,
    pub fenced_rejected: usize,
    /// Fenced writes applied after a later holder's write was accepted, and
    /// accepted all the same: the fencing failed.
    pub stale_accepted: usize,
    /// The same, rejected: the fencing worked.
    pub stale_rejected: usize,
    /// Fenced writes rejected although no later holder had written (the
    /// token went backwards).
    pub fresh_rejected: usize,
    /// Successive holders (in start order) whose token did not increase.
    pub token_regressions: usize,
    /// The frozen section's fenced write: `Some(false)` = rejected.
    pub frozen_fenced: Option<bool>,
    pub final_counter: u64,
    /// Keys left on the lock servers without an expiry once the workers
    /// stopped (set by the scenario, which reads the servers).
    pub persistent_keys: usize,
    pub err_busy: u64,
    pub err_backend: u64,
    pub err_lost: u64,
    pub err_other: u64,
    pub error_sample: String,
}

impl Figures {
    /// Sections plus the store's record, `fence_log` in apply order
    /// (`section-id token accepted`).
    /// `counters`: each lane's final counter (`-`: the scenario's own).
    pub fn compute(
        sections: &[SectionRecord],
        fence_log: &[String],
        counters: &HashMap<String, u64>,
    ) -> Figures {
        let kind = match sections.first().map_or("l", |s| s.role.as_str()) {
            r if r.starts_with('s') => "semaphore",
            "r" | "w" => "rw",
            r if r.starts_with("a:") => "all",
            _ => "lock",
        };
        let mut f = Figures {
            kind,
            sections: sections.len(),
            final_counter: counters.values().sum(),
            permits: sections
                .iter()
                .find_map(SectionRecord::permits)
                .unwrap_or(0),
            workers_with_sections: sections
                .iter()
                .map(|s| s.proc)
                .collect::<std::collections::HashSet<_>>()
                .len(),
            ..Figures::default()
        };
        for s in sections {
            if s.outcome == "ok" || s.frozen {
                f.completed += 1;
            } else {
                f.dropped += 1;
            }
            if s.set_sent && s.set_done == 0 {
                f.writes_in_doubt += 1;
            }
            match s.fenced {
                Some(true) => f.fenced_accepted += 1,
                Some(false) => f.fenced_rejected += 1,
                None => {}
            }
            if s.frozen {
                f.frozen_fenced = s.fenced;
            }
        }

        // Two holders at once, and writes made while another held.
        for (i, a) in sections.iter().enumerate() {
            for b in &sections[i + 1..] {
                if a.start < b.end && b.start < a.end && a.conflicts(b) {
                    f.overlaps += 1;
                    if f.overlap_sample.is_empty() {
                        f.overlap_sample = format!(
                            "{} {} [{}, {}) {} and {} {} [{}, {}) {}, {} ns together",
                            a.id(),
                            a.role,
                            a.start,
                            a.end,
                            a.outcome,
                            b.id(),
                            b.role,
                            b.start,
                            b.end,
                            b.outcome,
                            a.end.min(b.end) - a.start.max(b.start),
                        );
                    }
                }
            }
            for b in sections {
                if std::ptr::eq(a, b) || a.set_done == 0 || !a.conflicts(b) {
                    continue;
                }
                if b.start < a.set_done && a.set_done < b.end {
                    if a.frozen || b.frozen {
                        f.frozen_overlapping_writes += 1;
                    } else {
                        f.overlapping_writes += 1;
                    }
                }
            }
        }

        // A semaphore: how many inside at once, counted at each start, and
        // fenced writes landing while the bound was full without them.
        if f.permits > 0 {
            let bound = f.permits as usize;
            for a in sections {
                let inside = sections
                    .iter()
                    .filter(|b| b.start <= a.start && a.start < b.end)
                    .count();
                f.max_holders = f.max_holders.max(inside);
                if inside > bound {
                    f.over_permits += 1;
                }
                if a.fence_done != 0 {
                    let others = sections
                        .iter()
                        .filter(|b| {
                            !std::ptr::eq(a, *b) && b.start < a.fence_done && a.fence_done < b.end
                        })
                        .count();
                    if others >= bound {
                        f.overlapping_writes += 1;
                    }
                }
            }
        }

        // Per lane: completed counter writes the final counter does not show.
        let mut done: HashMap<String, u64> = HashMap::new();
        for s in sections.iter().filter(|s| s.set_done != 0) {
            for (lane, _) in s.lane_tokens() {
                *done.entry(lane).or_default() += 1;
            }
        }
        f.lost_updates = done
            .iter()
            .map(|(lane, n)| n.saturating_sub(counters.get(lane).copied().unwrap_or(0)))
            .sum();

        // One token per grant, per fence key.
        let mut seen: HashMap<(String, u64), usize> = HashMap::new();
        for s in sections {
            for (lane, token) in s.order_tokens() {
                if token != 0 {
                    *seen.entry((lane, token)).or_default() += 1;
                }
            }
        }
        f.token_duplicates = seen.values().map(|n| n - 1).sum();

        // Fencing, judged in the order the store applied the writes.
        // Per lane: a lane is one exclusive resource (the lock, the rw
        // lock's writers, one key of `lock_all`). A semaphore's fence is
        // `unique` (see workload.rs): a rejection there is a repeated token.
        let by_id: HashMap<String, &SectionRecord> = sections.iter().map(|s| (s.id(), s)).collect();
        let mut newest_accepted_start: HashMap<String, u64> = HashMap::new();
        for entry in fence_log {
            let mut parts = entry.split_whitespace();
            let (Some(id), Some(_token), Some(ok)) = (parts.next(), parts.next(), parts.next())
            else {
                panic!("bad fence log entry {entry:?}");
            };
            let lane = parts.next().unwrap_or("-").to_owned();
            let section = by_id
                .get(id)
                .unwrap_or_else(|| panic!("fence log names section {id} that no worker logged"));
            let accepted = ok == "1";
            if section.permits().is_some() {
                if !accepted {
                    f.token_duplicates += 1;
                }
                continue;
            }
            let start = section.start;
            let newest = newest_accepted_start.entry(lane).or_default();
            let stale = *newest > start;
            match (stale, accepted) {
                (true, true) => f.stale_accepted += 1,
                (true, false) => f.stale_rejected += 1,
                (false, false) => f.fresh_rejected += 1,
                (false, true) => {}
            }
            if accepted {
                *newest = (*newest).max(start);
            }
        }

        if kind == "lock" {
            let mut by_start: Vec<&SectionRecord> = sections.iter().collect();
            by_start.sort_by_key(|s| s.start);
            f.token_regressions = by_start
                .windows(2)
                .filter(|w| w[1].token <= w[0].token)
                .count();
        } else {
            // Sections that may not hold together, one ended before the
            // other started: the later one was granted later, so its token
            // of each fence key they share is higher. (Permits are not
            // ordered so: a grant's reply may arrive after a later grant's
            // section ended.)
            for a in sections {
                for b in sections {
                    if a.end == 0 || a.end > b.start || !a.conflicts(b) {
                        continue;
                    }
                    let later = b.order_tokens();
                    for (lane, token) in a.order_tokens() {
                        if later.iter().any(|(l, t)| *l == lane && *t <= token) {
                            f.token_regressions += 1;
                        }
                    }
                }
            }
        }
        f
    }

    /// Adds a worker's `E busy backend lost other sample...` line.
    pub fn add_errors(&mut self, line: &str) {
        let mut parts = line.splitn(6, ' ');
        let _ = parts.next();
        let mut n = || {
            parts
                .next()
                .and_then(|p| p.parse::<u64>().ok())
                .unwrap_or(0)
        };
        self.err_busy += n();
        self.err_backend += n();
        self.err_lost += n();
        self.err_other += n();
        // The first error of each kind (`[kind] message`, joined by ` | `).
        for one in parts.next().unwrap_or_default().split(" | ") {
            let one = one.trim();
            let kind = one.split_once(' ').map_or(one, |(k, _)| k);
            if !one.is_empty() && !self.error_sample.contains(kind) {
                if !self.error_sample.is_empty() {
                    self.error_sample.push_str(" | ");
                }
                self.error_sample.push_str(one);
            }
        }
    }
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sections={} completed={} dropped={} overlaps={} overlapping_writes={} \
             lost_updates={} fenced_accepted={} fenced_rejected={} stale_fenced_accepted={} stale_fenced_rejected={} \
             fresh_fenced_rejected={} token_regressions={}",
            self.sections,
            self.completed,
            self.dropped,
            self.overlaps,
            self.overlapping_writes,
            self.lost_updates,
            self.fenced_accepted,
            self.fenced_rejected,
            self.stale_accepted,
            self.stale_rejected,
            self.fresh_rejected,
            self.token_regressions,
        )?;
        if self.permits > 0 {
            write!(
                f,
                " permits={} max_holders={} over_permits={}",
                self.permits, self.max_holders, self.over_permits
            )?;
        }
        if self.kind != "lock" {
            write!(
                f,
                " token_duplicates={} persistent_keys={}",
                self.token_duplicates, self.persistent_keys
            )?;
        }
        if let Some(fenced) = self.frozen_fenced {
            write!(
                f,
                " frozen_overlapping_writes={} frozen_fenced_write={}",
                self.frozen_overlapping_writes,
                if fenced { "accepted" } else { "rejected" }
            )?;
        }
        write!(
            f,
            " counter={} writes_in_doubt={} errors(busy={} backend={} lost={} other={})",
            self.final_counter,
            self.writes_in_doubt,
            self.err_busy,
            self.err_backend,
            self.err_lost,
            self.err_other
        )
    }
}

/// Every worker log in `dir` (`worker-*.log`): sections, and error lines.
pub fn read_logs(dir: &Path) -> (Vec<SectionRecord>, Vec<String>) {
    let mut sections = Vec::new();
    let mut errors = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    entries.sort();
    for path in entries {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        for line in text.lines() {
            if let Some(s) = SectionRecord::from_line(line) {
                sections.push(s);
            } else if line.starts_with("E ") {
                errors.push(line.to_owned());
            } else if !line.trim().is_empty() {
                panic!("{}: unreadable line {line:?}", path.display());
            }
        }
    }
    (sections, errors)
}

/// The checker itself: each per-kind invariant counts a violation made up
/// for it, and nothing where the kind allows it.
#[test]
fn checker_counts_the_familys_violations() {
    let section = |proc: usize, role: &str, token: u64, start: u64, end: u64| SectionRecord {
        proc,
        seq: token,
        token,
        start,
        end,
        role: role.to_owned(),
        outcome: "ok".to_owned(),
        ..SectionRecord::default()
    };
    let no_counters = HashMap::new();

    // Three permits: three at once is fine, a fourth is one too many.
    let permits: Vec<_> = (0..4)
        .map(|i| section(i, "s3", 10 + i as u64, 100 + i as u64, 200))
        .collect();
    let f = Figures::compute(&permits[..3], &[], &no_counters);
    assert_eq!(
        (f.over_permits, f.max_holders, f.overlaps),
        (0, 3, 0),
        "{f}"
    );
    let f = Figures::compute(&permits, &[], &no_counters);
    assert_eq!((f.over_permits, f.max_holders), (1, 4), "{f}");

    // Readers share; a writer with a reader does not.
    let readers = [section(0, "r", 1, 100, 200), section(1, "r", 2, 150, 250)];
    assert_eq!(Figures::compute(&readers, &[], &no_counters).overlaps, 0);
    let mixed = [section(0, "r", 1, 100, 200), section(1, "w", 2, 150, 250)];
    let f = Figures::compute(&mixed, &[], &no_counters);
    assert_eq!(f.overlaps, 1, "{f}");
    // A writer after a reader with an older token: a regression.
    let back = [section(0, "r", 5, 100, 200), section(1, "w", 4, 300, 400)];
    assert_eq!(
        Figures::compute(&back, &[], &no_counters).token_regressions,
        1
    );

    // lock_all: two holders of `b` at once conflict; of `a` and `c`, not.
    let shared = [
        section(0, "a:a=1,b=2", 1, 100, 200),
        section(1, "a:b=3,c=4", 3, 150, 250),
    ];
    assert_eq!(Figures::compute(&shared, &[], &no_counters).overlaps, 1);
    let apart = [
        section(0, "a:a=1", 1, 100, 200),
        section(1, "a:c=4", 4, 150, 250),
    ];
    assert_eq!(Figures::compute(&apart, &[], &no_counters).overlaps, 0);
    // A token of one key issued twice.
    let twice = [
        section(0, "a:a=1,b=2", 1, 100, 200),
        section(1, "a:b=2", 2, 300, 400),
    ];
    let f = Figures::compute(&twice, &[], &no_counters);
    assert_eq!((f.token_duplicates, f.token_regressions), (1, 1), "{f}");

    // A semaphore's fenced write refused by the `unique` store: a repeat.
    let log = ["0.0.10 10 1 -".to_owned(), "1.0.11 10 0 -".to_owned()];
    let f = Figures::compute(&permits[..2], &log, &no_counters);
    assert_eq!(f.token_duplicates, 1, "{f}");
}
