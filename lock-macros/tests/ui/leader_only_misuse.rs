use leasehold::leader_only;

#[leader_only(election = "scheduler", renew)]
async fn renewed() {}

#[leader_only(election = "scheduler", wait = "2s")]
async fn waiting() {}

#[leader_only(election = "scheduler", key = "job")]
async fn keyed() {}

#[leader_only(election = "scheduler", ttl = "10x")]
async fn bad_ttl() {}

#[leader_only(election = "scheduler", leader = "me")]
async fn unknown() {}

#[leader_only(election = "")]
async fn unnamed() {}

#[leader_only(election = "scheduler")]
fn not_async() {}

fn main() {
    let _ = (renewed(), waiting(), keyed(), bad_ttl(), unknown(), unnamed());
    not_async();
}
