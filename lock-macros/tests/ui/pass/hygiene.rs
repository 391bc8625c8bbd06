//! Generated code neither clashes with nor captures the user's names, and leaves
//! the function's attributes, docs and visibility as written.
#![deny(warnings)]
#![allow(non_snake_case)]

use leasehold::LockClient;
use leasehold::distributed_lock;

// Names that generated code must not pick up.
#[allow(dead_code)]
mod core {}
#[allow(dead_code)]
mod std {}
#[allow(dead_code)]
enum Outcome {
    Ok(u8),
    Err(u8),
}
#[allow(unused_imports)]
use Outcome::{Err, Ok};
#[allow(unused_macros)]
macro_rules! format {
    ($($t:tt)*) => {
        compile_error!("the user's format! was used")
    };
}

pub mod jobs {
    use leasehold::distributed_lock;

    /// Docs and attributes stay on the function.
    #[must_use]
    #[distributed_lock(key = "job:<__lh_key>:<__lh_client>:<leasehold>")]
    pub(crate) async fn job(__lh_key: u8, __lh_client: u8, leasehold: u8) -> Option<u8> {
        #![allow(clippy::identity_op)]
        let __lh_request = __lh_key + __lh_client + leasehold;
        let __lh_value = __lh_request;
        let __lh_error = __lh_value * 1;
        ::core::option::Option::Some(__lh_error)
    }
}

#[distributed_lock(key = "kw:<r#type>:<type>")]
async fn keyword(r#type: u8) -> ::core::option::Option<u8> {
    ::core::option::Option::Some(r#type)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    leasehold::set_global_client(LockClient::in_memory());
    assert_eq!(jobs::job(1, 2, 3).await, ::core::option::Option::Some(6));
    assert_eq!(keyword(4).await, ::core::option::Option::Some(4));
}
