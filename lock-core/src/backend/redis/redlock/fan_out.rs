//! Sending one operation to many masters: every operation of
//! [`RedlockBackend`](super::RedlockBackend) goes through [`Masters::ask`],
//! and work that must outlast its caller through [`until_answered`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use tokio::time::Instant;

use crate::backend::redis::server::ServerBackend;
use crate::backend::{BoxFuture, LockKeys};
use crate::error::LockError;

/// The longest pause between two tries of a master that did not answer (a
/// release or a fence levelled in the background).
const MAX_RETRY_DELAY: Duration = Duration::from_millis(250);

/// One master, shared with the work that goes on in the background.
pub(super) type Master = Arc<ServerBackend>;

/// What one master answered, or that it did not.
pub(super) type NodeReply<T> = Result<T, LockError>;

/// One master's answer to come, with its index.
type Answer<'a, T> = BoxFuture<'a, (usize, NodeReply<T>)>;

/// The masters' answers as they arrive, each with its master's index.
///
/// A handful of futures, all polled whenever the task wakes, like
/// `join_all` of a few. Not a `FuturesUnordered`: that one wakes its own
/// task and yields whenever it has polled as many futures as it holds and
/// all were pending, which is every first poll of a fan-out and, with one
/// master, every wake-up that leaves its future pending; on a multi-threaded runtime each such yield
/// woke the other worker (a futex call and a thread hop per operation,
/// measured in S6).
pub(super) struct Answers<'a, T> {
    pending: Vec<Answer<'a, T>>,
}

impl<T> Answers<'_, T> {
    /// Whether every answer has been taken.
    pub(super) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

impl<T> Default for Answers<'_, T> {
    fn default() -> Self {
        Answers {
            pending: Vec::new(),
        }
    }
}

impl<'a, T> FromIterator<Answer<'a, T>> for Answers<'a, T> {
    fn from_iter<I: IntoIterator<Item = Answer<'a, T>>>(iter: I) -> Self {
        Answers {
            pending: iter.into_iter().collect(),
        }
    }
}

impl<T> Stream for Answers<'_, T> {
    type Item = (usize, NodeReply<T>);

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.pending.is_empty() {
            return Poll::Ready(None);
        }
        for i in 0..self.pending.len() {
            if let Some(answer) = self.pending.get_mut(i)
                && let Poll::Ready(reply) = answer.as_mut().poll(cx)
            {
                // The order of the rest does not matter: each carries its index.
                drop(self.pending.swap_remove(i));
                return Poll::Ready(Some(reply));
            }
        }
        Poll::Pending
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.pending.len(), Some(self.pending.len()))
    }
}

/// The independent masters of one Redlock deployment (a cheap clone).
#[derive(Clone)]
pub(super) struct Masters(Arc<[Master]>);

impl Masters {
    pub(super) fn new(masters: Vec<ServerBackend>) -> Masters {
        Masters(masters.into_iter().map(Arc::new).collect())
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    pub(super) fn get(&self, index: usize) -> Option<&Master> {
        self.0.get(index)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Master> {
        self.0.iter()
    }

    /// Send `op` to the masters at `which` at once, each bounded by
    /// `timeout`: a master that does not answer in time answers an error.
    pub(super) fn ask<'a, T, F, Fut>(
        &self,
        which: impl IntoIterator<Item = usize>,
        timeout: Duration,
        op: F,
    ) -> Answers<'a, T>
    where
        F: Fn(Master) -> Fut,
        Fut: Future<Output = NodeReply<T>> + Send + 'a,
        T: 'a,
    {
        which
            .into_iter()
            .filter_map(|index| Some((index, self.0.get(index)?.clone())))
            .map(|(index, master)| {
                let asked = tokio::time::timeout(timeout, op(master.clone()));
                Box::pin(async move {
                    let reply = asked
                        .await
                        .unwrap_or_else(|_| Err(no_answer(master.server(), timeout)));
                    (index, reply)
                }) as BoxFuture<'a, _>
            })
            .collect()
    }

    /// [`ask`](Self::ask) every master, and wait for all the answers, in
    /// the masters' order.
    pub(super) async fn ask_all<'a, T, F, Fut>(&self, timeout: Duration, op: F) -> Vec<NodeReply<T>>
    where
        F: Fn(Master) -> Fut,
        Fut: Future<Output = NodeReply<T>> + Send + 'a,
        T: 'a,
    {
        let mut answers: Vec<(usize, NodeReply<T>)> =
            self.ask(0..self.len(), timeout, op).collect().await;
        answers.sort_unstable_by_key(|&(index, _)| index);
        answers.into_iter().map(|(_, reply)| reply).collect()
    }
}

/// The error of a master that did not answer within `timeout`.
pub(super) fn no_answer(server: &str, timeout: Duration) -> LockError {
    LockError::backend(server, format!("no answer within {timeout:?}"))
}

/// A lock's names and the caller's token, owned (for work that goes on in
/// the background).
#[derive(Clone)]
pub(super) struct Owner {
    pub(super) keys: Arc<LockKeys>,
    pub(super) token: Arc<str>,
}

impl Owner {
    pub(super) fn new(keys: &LockKeys, token: &str) -> Owner {
        Owner {
            keys: Arc::new(keys.clone()),
            token: Arc::from(token),
        }
    }
}

/// `op` on the master `server`, each try bounded by `per_try`, tried again
/// (with a growing pause) while the master cannot be reached, until
/// `deadline`. Returns its answer, or the last error.
pub(super) async fn until_answered<T, F, Fut>(
    server: &str,
    deadline: Instant,
    per_try: Duration,
    op: F,
) -> NodeReply<T>
where
    F: Fn() -> Fut,
    Fut: Future<Output = NodeReply<T>>,
{
    let mut delay = Duration::from_millis(10);
    loop {
        let error = match tokio::time::timeout(per_try, op()).await {
            Ok(Ok(answer)) => return Ok(answer),
            Ok(Err(error)) if !error.is_unavailable() => return Err(error),
            Ok(Err(error)) => error,
            Err(_) => no_answer(server, per_try),
        };
        if Instant::now() + delay >= deadline {
            return Err(error);
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_RETRY_DELAY);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    use super::*;

    /// Counts how often the task it stands for is woken.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn answer<T: Send + 'static>(
        index: usize,
        rx: tokio::sync::oneshot::Receiver<T>,
    ) -> Answer<'static, T> {
        Box::pin(async move {
            let reply = rx
                .await
                .map_err(|_| LockError::backend("test", "sender dropped"));
            (index, reply)
        })
    }

    /// Polling masters that have not answered yet does not wake the
    /// polling task (a `FuturesUnordered` of one, or of several on its
    /// first poll, wakes itself and yields: on a multi-threaded runtime
    /// that woke another worker per operation). Only an answer wakes it,
    /// and every answer comes out once, then the end.
    #[test]
    fn pending_masters_do_not_wake_the_task_and_every_answer_comes_once() {
        for masters in [1, 3, 5] {
            let (senders, mut answers): (Vec<_>, Answers<'static, usize>) = {
                let (tx, rx): (Vec<_>, Vec<_>) = (0..masters)
                    .map(|_| tokio::sync::oneshot::channel::<usize>())
                    .unzip();
                let answers = rx
                    .into_iter()
                    .enumerate()
                    .map(|(i, rx)| answer(i, rx))
                    .collect();
                (tx, answers)
            };
            let wakes = Arc::new(Wakes::default());
            let waker = Waker::from(wakes.clone());
            let mut cx = Context::from_waker(&waker);
            for _ in 0..3 {
                assert!(Pin::new(&mut answers).poll_next(&mut cx).is_pending());
            }
            assert_eq!(wakes.0.load(Ordering::SeqCst), 0, "{masters} masters");

            let mut seen = Vec::new();
            for (i, tx) in senders.into_iter().enumerate().rev() {
                assert!(tx.send(i * 10).is_ok());
                assert!(
                    wakes.0.load(Ordering::SeqCst) > 0,
                    "an answer wakes the task"
                );
                match Pin::new(&mut answers).poll_next(&mut cx) {
                    Poll::Ready(Some((index, Ok(value)))) => seen.push((index, value)),
                    other => panic!(
                        "expected master {i}'s answer, got {:?}",
                        other.map(|o| o.map(|(i, _)| i))
                    ),
                }
                wakes.0.store(0, Ordering::SeqCst);
            }
            seen.sort_unstable();
            assert_eq!(seen, (0..masters).map(|i| (i, i * 10)).collect::<Vec<_>>());
            assert!(answers.is_empty());
            assert!(matches!(
                Pin::new(&mut answers).poll_next(&mut cx),
                Poll::Ready(None)
            ));
        }
    }
}
