//! Counting the masters' votes: [`Tally`] for an acquisition, [`Quorum`]
//! for the ownership answers of a release or a renewal.

use std::time::Duration;

use crate::backend::{Acquired, LockKeys, Owned};
use crate::error::LockError;

/// How many masters there are, and how many make a majority.
#[derive(Debug, Clone, Copy)]
pub(super) struct Quorum {
    pub(super) needed: usize,
    pub(super) nodes: usize,
}

impl Quorum {
    pub(super) fn of(nodes: usize) -> Quorum {
        Quorum {
            needed: nodes / 2 + 1,
            nodes,
        }
    }

    /// How many masters may refuse (or fail) with a majority still possible.
    fn spare(self) -> usize {
        self.nodes - self.needed
    }

    /// The error of an operation on `key` that `reached` masters agreed on.
    pub(super) fn error(
        self,
        key: Option<&LockKeys>,
        reached: usize,
        validity_left: Option<Duration>,
    ) -> LockError {
        LockError::Quorum {
            key: key.map(|keys| keys.key().to_owned()),
            reached,
            needed: self.needed,
            nodes: self.nodes,
            validity_left,
        }
    }

    /// Combine per-master ownership answers: yes with a majority of yes, no
    /// when the refusals alone rule a majority out, else undecided (`None`).
    pub(super) fn decide(self, answers: impl Iterator<Item = Option<Owned>>) -> Option<Owned> {
        let (mut yes, mut no, mut wrong, mut forced) = (0, 0, 0, 0);
        for answer in answers {
            match answer {
                Some(Owned::Yes) => yes += 1,
                Some(Owned::No) => no += 1,
                Some(Owned::WrongType) => wrong += 1,
                Some(Owned::ForceReleased) => forced += 1,
                None => {}
            }
        }
        if yes >= self.needed {
            Some(Owned::Yes)
        } else if no + wrong + forced > self.spare() {
            Some(if wrong > 0 {
                Owned::WrongType
            } else if forced > 0 {
                // An operator released it (on the masters that say so).
                Owned::ForceReleased
            } else {
                Owned::No
            })
        } else {
            None
        }
    }
}

/// What the masters answered an acquisition attempt so far.
pub(super) struct Tally {
    quorum: Quorum,
    /// The lease asked for: a busy master that set no expiry counts it.
    ttl: Duration,
    /// The granting masters, each with the fence it issued.
    grants: Vec<(usize, u64)>,
    /// The masters that refused or failed (levelled after a won vote).
    refusing: Vec<usize>,
    /// How many masters answered, grants and refusals alike.
    answered: usize,
    /// The shortest lease left among the busy masters.
    busy_for: Option<Duration>,
    /// How many masters failed to answer.
    failed: usize,
    /// A master holds a value of another type at the lock's names.
    wrong_type: Option<LockError>,
}

/// What an attempt answers when the lock is not ours.
pub(super) enum Outcome {
    /// A master holds a value of another type at the lock's names.
    WrongType(LockError),
    /// Too many masters failed for a majority.
    Unreachable { granted: usize },
    /// A majority granted, but too late (or the fence could not be
    /// levelled): the lease would be worthless.
    TooLate { granted: usize },
    /// Held elsewhere, or a split vote: try again after this long.
    Busy { expires_in: Duration },
}

impl Tally {
    pub(super) fn new(quorum: Quorum, ttl: Duration) -> Tally {
        Tally {
            quorum,
            ttl,
            grants: Vec::new(),
            refusing: Vec::new(),
            answered: 0,
            busy_for: None,
            failed: 0,
            wrong_type: None,
        }
    }

    /// Count the answer of master `index`.
    pub(super) fn count(&mut self, index: usize, reply: Result<Acquired, LockError>) {
        self.answered += 1;
        match reply {
            Ok(Acquired::Yes { fence }) => self.grants.push((index, fence)),
            Ok(Acquired::Busy { expires_in }) => {
                let left = expires_in.unwrap_or(self.ttl);
                self.busy_for = Some(self.busy_for.map_or(left, |b| b.min(left)));
                self.refusing.push(index);
            }
            Err(e @ LockError::WrongType { .. }) => self.wrong_type = Some(e),
            Err(_) => {
                self.failed += 1;
                self.refusing.push(index);
            }
        }
    }

    /// Count an answer that came after the vote was settled: only a grant
    /// matters then (it is undone with the others).
    pub(super) fn count_late(&mut self, index: usize, reply: Result<Acquired, LockError>) {
        if let Ok(Acquired::Yes { fence }) = reply {
            self.grants.push((index, fence));
        }
    }

    /// A majority granted, or so many refused that none can.
    pub(super) fn settled(&self) -> bool {
        self.won() || self.answered - self.grants.len() > self.quorum.spare()
    }

    /// A majority granted.
    pub(super) fn won(&self) -> bool {
        self.grants.len() >= self.quorum.needed
    }

    /// The fencing token of a won vote: the highest the granting masters
    /// issued.
    pub(super) fn fence(&self) -> Option<u64> {
        self.won()
            .then(|| self.grants.iter().map(|&(_, f)| f).max().unwrap_or(0))
    }

    /// The granting masters, each with its fence.
    pub(super) fn grants(&self) -> &[(usize, u64)] {
        &self.grants
    }

    /// The masters that did not grant.
    pub(super) fn into_refusing(self) -> Vec<usize> {
        self.refusing
    }

    /// What the attempt answers when the lock is not ours.
    pub(super) fn outcome(&self) -> Outcome {
        let granted = self.grants.len();
        if let Some(e) = &self.wrong_type {
            Outcome::WrongType(e.clone())
        } else if self.failed > self.quorum.spare() {
            Outcome::Unreachable { granted }
        } else if self.won() {
            Outcome::TooLate { granted }
        } else {
            // A split vote (several contenders each got a minority) is
            // retried after a short random pause, so the contenders drift
            // apart.
            let expires_in = match self.busy_for {
                Some(left) if granted == 0 => left,
                other => jitter(other.unwrap_or(self.ttl)),
            };
            Outcome::Busy { expires_in }
        }
    }
}

/// A random pause of up to a tenth of `max` (at least 1 ms, at most 50 ms).
fn jitter(max: Duration) -> Duration {
    let cap = (max / 10).clamp(Duration::from_millis(1), Duration::from_millis(50));
    let mut byte = [0u8; 2];
    let r = getrandom::fill(&mut byte)
        .map(|()| u16::from_le_bytes(byte))
        .unwrap_or(0);
    cap.mul_f64(f64::from(r) / f64::from(u16::MAX))
        .max(Duration::from_millis(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(10);

    fn busy(secs: u64) -> Result<Acquired, LockError> {
        Ok(Acquired::Busy {
            expires_in: Some(Duration::from_secs(secs)),
        })
    }

    fn failed() -> Result<Acquired, LockError> {
        Err(LockError::backend("n", "down"))
    }

    #[test]
    fn a_majority_of_grants_wins_with_the_highest_fence() {
        let mut tally = Tally::new(Quorum::of(5), TTL);
        tally.count(0, Ok(Acquired::Yes { fence: 7 }));
        tally.count(1, Ok(Acquired::Yes { fence: 9 }));
        assert!(!tally.settled());
        tally.count(2, Ok(Acquired::Yes { fence: 8 }));
        assert!(tally.settled());
        assert_eq!(tally.fence(), Some(9));
    }

    #[test]
    fn enough_refusals_settle_a_lost_vote() {
        let mut tally = Tally::new(Quorum::of(5), TTL);
        tally.count(0, busy(4));
        tally.count(1, failed());
        assert!(!tally.settled(), "3 of 5 may still grant");
        tally.count(2, busy(2));
        assert!(tally.settled());
        assert_eq!(tally.fence(), None);
        assert!(matches!(
            tally.outcome(),
            Outcome::Busy { expires_in } if expires_in == Duration::from_secs(2)
        ));
        assert_eq!(tally.into_refusing(), vec![0, 1, 2]);
    }

    #[test]
    fn failures_beyond_the_spare_are_unreachable_and_a_foreign_value_comes_first() {
        let mut tally = Tally::new(Quorum::of(3), TTL);
        tally.count(0, failed());
        tally.count(1, failed());
        assert!(matches!(
            tally.outcome(),
            Outcome::Unreachable { granted: 0 }
        ));
        tally.count(
            2,
            Err(LockError::WrongType {
                key: "k".into(),
                redis_key: "leasehold:{k}:lock".into(),
            }),
        );
        assert!(matches!(tally.outcome(), Outcome::WrongType(_)));
    }

    #[test]
    fn a_won_vote_that_is_not_taken_is_too_late_and_a_split_vote_pauses() {
        let mut won = Tally::new(Quorum::of(3), TTL);
        won.count(0, Ok(Acquired::Yes { fence: 1 }));
        won.count(1, Ok(Acquired::Yes { fence: 1 }));
        assert!(matches!(won.outcome(), Outcome::TooLate { granted: 2 }));

        let mut split = Tally::new(Quorum::of(3), TTL);
        split.count(0, Ok(Acquired::Yes { fence: 1 }));
        split.count(1, busy(5));
        split.count_late(2, busy(5));
        let Outcome::Busy { expires_in } = split.outcome() else {
            panic!("a split vote is busy");
        };
        // A random pause of at most a tenth of the lease left (and 50 ms).
        assert!(expires_in <= Duration::from_millis(50), "{expires_in:?}");
    }

    #[test]
    fn ownership_needs_a_majority_either_way() {
        let quorum = Quorum::of(3);
        let yes = [Some(Owned::Yes), Some(Owned::Yes), None];
        assert_eq!(quorum.decide(yes.into_iter()), Some(Owned::Yes));
        let split = [Some(Owned::Yes), Some(Owned::No), None];
        assert_eq!(quorum.decide(split.into_iter()), None);
        let forced = [Some(Owned::No), Some(Owned::ForceReleased), None];
        assert_eq!(
            quorum.decide(forced.into_iter()),
            Some(Owned::ForceReleased)
        );
    }
}
