use leasehold::distributed_lock;

struct Service {
    name: String,
}

impl Service {
    #[distributed_lock(key = "svc", client = self.name.clone())]
    async fn run(&self) -> Option<()> {
        Some(())
    }
}

fn main() {
    let service = Service {
        name: String::new(),
    };
    let _ = service.run();
}
