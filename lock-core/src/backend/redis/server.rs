//! One Redis server (standalone, or the primary of a replicated set).
//!
//! Commands go through redis-rs's [`ConnectionManager`], which reconnects by
//! itself after a restart; it speaks RESP3 so that it reports its
//! disconnections, after which the [`Gate`] reads the server's identity
//! again (a restart is noticed on the reconnection, not at the next renewal).
//! Release announcements arrive on one extra RESP3 connection per client,
//! opened on the first wait and resubscribed after reconnects (see
//! [`crate::backend::listener`]).

use std::sync::Arc;
use std::time::Duration;

use redis::PushKind;
use redis::aio::ConnectionManager;
use tokio::sync::mpsc;

use super::gate::Gate;
use super::{RedisBackend, Topology};
use crate::backend::BoxFuture;
use crate::backend::connect::{
    Address, backend_error, connect_manager, connect_timed_out, manager_config,
};
use crate::backend::listener::Running;
use crate::backend::scripts;
use crate::backend::wakeups::Wakeups;
use crate::config::{ConnectSettings, GateSettings};
use crate::error::LockError;

/// The longest pause between two identity checks after a reconnection.
const MAX_CHECK_DELAY: Duration = Duration::from_secs(1);

pub(crate) struct Server {
    conn: ConnectionManager,
    address: Address,
    settings: ConnectSettings,
}

/// The single-server backend.
pub(crate) type ServerBackend = RedisBackend<Server>;

impl Server {
    /// Connect and check the server (reachable, credentials accepted, not
    /// evicting, its identity) within the connect timeout; release
    /// announcements go to `wakeups`.
    pub(crate) async fn connect(
        address: Address,
        settings: &ConnectSettings,
        gate_settings: GateSettings,
        wakeups: Arc<Wakeups>,
    ) -> Result<ServerBackend, LockError> {
        let backend = Server::lazy_at(address, settings, gate_settings, wakeups)?;
        match tokio::time::timeout(settings.connect_timeout, backend.verify_now()).await {
            Ok(checked) => checked.map(|()| backend),
            Err(_) => Err(connect_timed_out(&backend.topology().address, settings).await),
        }
    }

    /// Like [`connect`](Self::connect), but without waiting for the first
    /// connection: a node that is down now is used once it comes back (and
    /// checked then, before it grants anything). For Redlock's nodes.
    pub(crate) fn connect_lazy(
        url: &str,
        settings: &ConnectSettings,
        gate_settings: GateSettings,
        wakeups: Arc<Wakeups>,
    ) -> Result<ServerBackend, LockError> {
        Server::lazy_at(Address::parse(url)?, settings, gate_settings, wakeups)
    }

    /// [`connect_lazy`](Self::connect_lazy) to a parsed address.
    fn lazy_at(
        address: Address,
        settings: &ConnectSettings,
        gate_settings: GateSettings,
        wakeups: Arc<Wakeups>,
    ) -> Result<ServerBackend, LockError> {
        let gate = Arc::new(Gate::new(&address.shown, gate_settings));
        let (push_tx, push_rx) = mpsc::unbounded_channel();
        let conn = ConnectionManager::new_lazy_with_config(
            address.resp3_client(settings)?,
            manager_config(settings).set_push_sender(tell_gate(&gate, push_tx)),
        )
        .map_err(|e| backend_error(&address.shown, e))?;
        tokio::spawn(recheck_after_reconnects(
            push_rx,
            conn.clone(),
            Arc::downgrade(&gate),
        ));
        let server = address.shown.clone();
        let topology = Server {
            conn,
            address,
            settings: settings.clone(),
        };
        Ok(RedisBackend::new(topology, server, wakeups, gate))
    }
}

impl ServerBackend {
    /// The command connection, for commands beyond the lock scripts.
    pub(crate) fn connection(&self) -> ConnectionManager {
        self.topology().conn.clone()
    }

    /// Read the server's identity now and load the scripts (at connect;
    /// Redlock's nodes too): a server without Lua is refused here.
    pub(crate) async fn verify_now(&self) -> Result<(), LockError> {
        let mut con = self.topology().conn.clone();
        self.gate().check(&mut con, true).await?;
        scripts::preload(&mut con, self.server()).await
    }
}

/// The command connection's push sender: a disconnection is told to the
/// gate at once (before the manager reconnects, so no reply from a new
/// server can be taken for one from the old), then passed on.
fn tell_gate(
    gate: &Arc<Gate>,
    pushes: mpsc::UnboundedSender<redis::PushInfo>,
) -> impl Fn(redis::PushInfo) -> Result<(), mpsc::error::SendError<redis::PushInfo>>
+ Send
+ Sync
+ 'static {
    let gate = Arc::downgrade(gate);
    move |push: redis::PushInfo| {
        if push.kind == PushKind::Disconnection
            && let Some(gate) = gate.upgrade()
        {
            gate.disconnected();
        }
        pushes.send(push)
    }
}

/// After every disconnection of the command connection, read the server's
/// identity again as soon as it answers. Ends with the backend.
async fn recheck_after_reconnects(
    mut pushes: mpsc::UnboundedReceiver<redis::PushInfo>,
    mut conn: ConnectionManager,
    gate: std::sync::Weak<Gate>,
) {
    // Ends when the gate (and so the backend) is gone.
    let Some(mut gone) = gate.upgrade().map(|g| g.changes()) else {
        return;
    };
    loop {
        let push = tokio::select! {
            push = pushes.recv() => match push {
                Some(push) => push,
                None => return,
            },
            changed = gone.changed() => match changed {
                Ok(()) => continue,
                Err(_) => return,
            },
        };
        if push.kind != PushKind::Disconnection {
            continue;
        }
        let mut delay = Duration::from_millis(10);
        loop {
            let Some(gate) = gate.upgrade() else {
                return;
            };
            match gate.check(&mut conn, false).await {
                Ok(()) => break,
                Err(error) => {
                    tracing::debug!(%error, "leasehold: server not back yet");
                    drop(gate);
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(MAX_CHECK_DELAY);
                }
            }
        }
    }
}

impl Topology for Server {
    type Conn = ConnectionManager;

    fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    fn start_listener(&self, wakeups: Arc<Wakeups>) -> BoxFuture<'_, Result<Running, LockError>> {
        Box::pin(async move {
            let (push_tx, push_rx) = mpsc::unbounded_channel();
            let conn = connect_manager(
                self.address.resp3_client(&self.settings)?,
                &self.settings,
                &self.address.shown,
                Some(push_tx),
                true,
            )
            .await?;
            Ok(Running::spawn(
                conn,
                push_rx,
                self.address.shown.clone(),
                wakeups,
            ))
        })
    }
}
