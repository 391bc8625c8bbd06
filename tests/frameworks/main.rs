//! leasehold where applications already are, against real `redis-server`
//! processes:
//!
//! - `layer`: `leasehold::tower::LockLayer` in front of axum's `Router` and
//!   of a plain `tower::service_fn`, driven with `ServiceExt::oneshot`:
//!   exclusion per key, semaphores, the status of every refusal, a lease
//!   lost mid-request, fencing tokens, requests passed through unlocked,
//!   and the inner service's backpressure.
//! - `grpc`: the layer in front of a tonic service, called by tonic's own
//!   client: the call's `Fence`, and refusals as gRPC codes (`ABORTED`,
//!   `UNAVAILABLE` with the retry pushback).
//! - `existing_client`: `LockClientBuilder::connect_with` over an
//!   application's own `redis::Client` (password, database).

#[path = "../support/mod.rs"]
mod support;

mod existing_client;
mod grpc;
mod layer;
