use leasehold::distributed_lock;

struct Service {
    port: u16,
}

impl Service {
    #[distributed_lock(key = "svc", client = self.port.clone())]
    async fn run(&self) -> Option<()> {
        Some(())
    }
}

fn main() {
    let service = Service {
        port: 6379,
    };
    let _ = service.run();
}
