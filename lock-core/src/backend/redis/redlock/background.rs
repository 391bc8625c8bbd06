//! The work an operation leaves to run after it returned: levelling the
//! fences of the masters that did not grant, and releasing on the masters
//! that have not answered yet.

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::time::Instant;

use super::fan_out::{Answers, Master, Masters, NodeReply, Owner, until_answered};
use crate::backend::scripts::{self, Raise};
use crate::backend::{Acquired, Owned};

/// After a won vote, in the background: raise the counter of every master
/// that did not grant (it refused, failed, or answers only now) up to the
/// token, trying each until it answers or the lease ends. The granting
/// majority carries the token already; this is for the case where one of
/// its masters loses its data (a restart without persistence): a later
/// majority made of that master and masters that did not grant must still
/// issue a higher token, also to a client whose clock is behind this one's.
/// A late master that grants the same token (clocks in step, the usual
/// case) is sent nothing.
pub(super) struct Levelling {
    pub(super) masters: Masters,
    pub(super) lock: Owner,
    pub(super) fence: u64,
    pub(super) ttl: Duration,
    pub(super) until: Instant,
    pub(super) per_try: Duration,
}

impl Levelling {
    /// Start it: `refusing` are the masters that did not grant, `late` the
    /// answers still to come.
    pub(super) fn spawn(self, refusing: Vec<usize>, mut late: Answers<'static, Acquired>) {
        if refusing.is_empty() && late.is_empty() {
            // Every master granted in the vote: nothing to level, no task
            // (the common case on one master, or when all answer at once).
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let mut raises: FuturesUnordered<_> =
                refusing.into_iter().map(|i| self.raise(i)).collect();
            loop {
                tokio::select! {
                    Some((index, reply)) = late.next() => {
                        if !matches!(reply, Ok(Acquired::Yes { fence }) if fence >= self.fence) {
                            raises.push(self.raise(index));
                        }
                    }
                    Some(()) = raises.next() => {}
                    else => return,
                }
            }
        });
    }

    /// Raise master `index`'s counter to the fence, until it answers.
    async fn raise(&self, index: usize) {
        let Some(master) = self.masters.get(index) else {
            return;
        };
        let lock = &self.lock;
        let raised = until_answered(master.server(), self.until, self.per_try, || async {
            let mut con = master.connection();
            scripts::raise_fence(
                &mut con,
                &lock.keys,
                &lock.token,
                self.fence,
                self.ttl,
                Raise::Always,
            )
            .await
            .map_err(|e| e.into_lock_error(master.server(), &lock.keys))
        })
        .await;
        if let Err(error) = raised {
            tracing::debug!(key = %lock.keys.key(), %error, "leasehold: redlock master's fence not levelled");
        }
    }
}

/// Release the lock on one master, trying again while it cannot be
/// reached, until `deadline` (the lease's validity: after it the master's
/// copy expires by itself).
pub(super) async fn release_on(
    master: Master,
    lock: Owner,
    keep: Duration,
    deadline: Instant,
    granted_at: Instant,
    per_try: Duration,
) -> NodeReply<Owned> {
    until_answered(master.server(), deadline, per_try, || async {
        master
            .release_script(
                &lock.keys,
                &lock.token,
                keep,
                deadline,
                granted_at,
                scripts::Announce::Always,
            )
            .await
            .map(|released| released.owned)
    })
    .await
}

/// The releases still under way when the caller has its answer (or is
/// dropped): they go on in a task of their own, until each master answers
/// or its lease runs out, so that no copy of the lock is left behind. Only
/// what is left is spawned, and nothing when every master answered in time
/// (one task per release at most, none in the common case).
pub(super) struct Unfinished(pub(super) Answers<'static, Owned>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let rest = std::mem::take(&mut self.0);
        runtime.spawn(rest.for_each(|_| std::future::ready(())));
    }
}
