use leasehold::leader_only;

#[leader_only(ttl = "10s")]
async fn tick() {}

fn main() {
    let _ = tick();
}
