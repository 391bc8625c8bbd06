use leasehold::{LockClient, LockError, leader_only};

#[derive(Debug)]
struct AppError;
impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

struct Scheduler {
    locks: LockClient,
}

impl Scheduler {
    #[leader_only(election = "pass-scheduler", ttl = "5s", client = self.locks.clone())]
    async fn tick(&self, n: u32) -> Result<u32, AppError> {
        Ok(n + 1)
    }
}

#[leader_only(election = "pass-global")]
async fn quiet() {}

#[leader_only(election = "pass-option", crate = "::leasehold")]
async fn maybe() -> Option<u64> {
    leasehold::fencing_token()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    leasehold::set_global_client(LockClient::in_memory());
    let scheduler = Scheduler {
        locks: LockClient::in_memory(),
    };
    assert_eq!(scheduler.tick(1).await.ok(), Some(2));
    quiet().await;
    assert!(maybe().await.is_some());
}
