//! What a majority of the masters says of one lock: its holder, lease and
//! fencing token, for `inspect` and `list`.

use super::RedlockBackend;
use crate::backend::{Inspected, LockKeys};
use crate::error::LockError;

impl RedlockBackend {
    /// What a majority says of one lock: held when a majority of masters
    /// have the same holder token (lease left: the shortest among them;
    /// fencing token: see [`Self::agreed_fence`]).
    pub(super) async fn inspect_majority(
        &self,
        keys: &LockKeys,
    ) -> Result<Option<Inspected>, LockError> {
        // Several masters' grants are scripted and write their counters;
        // one master's may be fast, its token recorded a moment later.
        let one_master = self.one_master();
        let replies = self
            .masters
            .ask_all(self.response_timeout, |master| async move {
                master.inspect_script(keys, one_master).await
            })
            .await;
        let answered = replies.iter().filter(|r| r.is_ok()).count();
        // Masters with a value leasehold did not write at the lock's names.
        let foreign: Vec<&LockError> = replies
            .iter()
            .filter_map(|r| r.as_ref().err())
            .filter(|e| matches!(e, LockError::WrongType { .. }))
            .collect();
        let wrong_type = foreign.first().map(|&e| e.clone());
        let foreign = foreign.len();
        let seen: Vec<Inspected> = replies
            .into_iter()
            .filter_map(|r| r.ok().flatten())
            .collect();
        if let Some(held) = self.agreed(keys, &seen) {
            return Ok(Some(held));
        }
        if answered < self.quorum.needed {
            // Masters that answered with a foreign value at the lock's
            // names did answer: with a majority of answers, say what is
            // there rather than that the majority was missed.
            return Err(wrong_type
                .filter(|_| answered + foreign >= self.quorum.needed)
                .unwrap_or_else(|| self.quorum.error(Some(keys), answered, None)));
        }
        Ok(None)
    }

    /// The fencing token of a holder, from its masters' counters: the value
    /// most of them carry, the lowest of those tied. The holder's token is
    /// on a majority exactly (the vote levels them to it); a master that
    /// granted late can carry a higher counter, raised meanwhile by another
    /// client's failed attempt there, and one not levelled yet a lower one.
    /// The highest would be that late master's, not the holder's.
    fn agreed_fence(fences: impl Iterator<Item = u64>) -> u64 {
        let mut fences: Vec<u64> = fences.collect();
        fences.sort_unstable();
        let mut best = (0, 0);
        for run in fences.chunk_by(|a, b| a == b) {
            if run.len() > best.0 {
                best = (run.len(), run[0]);
            }
        }
        best.1
    }

    /// The holder a majority of `seen` agrees on, if any.
    fn agreed(&self, keys: &LockKeys, seen: &[Inspected]) -> Option<Inspected> {
        seen.iter().find_map(|candidate| {
            let agreeing: Vec<&Inspected> = seen
                .iter()
                .filter(|other| other.token == candidate.token)
                .collect();
            (agreeing.len() >= self.quorum.needed).then(|| Inspected {
                key: keys.key().to_owned(),
                token: candidate.token.clone(),
                ttl: agreeing.iter().map(|i| i.ttl).min().unwrap_or_default(),
                fence: Self::agreed_fence(agreeing.iter().map(|i| i.fence)),
                waiters: agreeing.iter().map(|i| i.waiters).max().unwrap_or(0),
                shared: Vec::new(),
            })
        })
    }
}
