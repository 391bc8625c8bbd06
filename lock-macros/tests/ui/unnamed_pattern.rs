use leasehold::distributed_lock;

struct Path<T>(T);

// `Path(_)` binds nothing: the error says how to bind it.
#[distributed_lock(key = "refund:<id>")]
async fn refund(Path(_): Path<u64>) {}

fn main() {}
