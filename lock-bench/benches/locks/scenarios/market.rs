//! S8 marketplace (Redis in Action, ch. 6): WATCH/MULTI/EXEC vs one market
//! lock vs a lock per item, at 1 × 1, 5 × 1 and 5 × 5 sellers × buyers.
//! The simulation itself is this package's library `marketplace`, which is
//! `examples/marketplace/simulation.rs`.

use leasehold::LockClient;
use marketplace::{self, Config, Store, Variant};

use super::Ctx;
use crate::report::{Record, Row, Value};
use crate::stats::us;

/// Sellers × buyers.
pub const CONFIGS: [(usize, usize); 3] = [(1, 1), (5, 1), (5, 5)];

pub fn scenario_name(sellers: usize, buyers: usize) -> String {
    format!("S8 marketplace {sellers}x{buyers}")
}

pub fn impl_name(variant: Variant) -> &'static str {
    match variant {
        Variant::Watch => "raw-watch",
        Variant::MarketLock => "leasehold-market-lock",
        Variant::ItemLock => "leasehold-item-lock",
    }
}

pub async fn s8(ctx: &Ctx, sellers: usize, buyers: usize, variant: Variant, rep: usize) -> Row {
    let scenario = scenario_name(sellers, buyers);
    let imp = impl_name(variant);
    let run = async {
        let store = Store::Redis(redis::Client::open(ctx.url())?);
        let locks = LockClient::connect(&ctx.url()).await?;
        let ns = format!(
            "bench:{}:S8:{sellers}x{buyers}:{}:{rep}:",
            ctx.run_id,
            variant.id()
        );
        let config = Config {
            sellers,
            buyers,
            duration: ctx.knobs.market_window,
        };
        let o = marketplace::run(&store, &locks, variant, config, &ns).await?;
        marketplace::cleanup(&store, &ns).await?;
        let lat = |q| o.latency(q).map_or(f64::NAN, us);
        Ok::<_, marketplace::BoxError>(
            Record::new(&scenario, imp, o.bought_per_s(), lat(0.5), lat(0.99))
                .with("variant", Value::S(variant.id().to_owned()))
                .with("sellers", Value::I(sellers as i64))
                .with("buyers", Value::I(buyers as i64))
                .with("listed_per_s", Value::F(o.listed_per_s()))
                .with("retries_per_purchase", Value::F(o.retries_per_purchase()))
                .with("misses", Value::I(o.misses as i64))
                .with("consistent", Value::B(o.consistent)),
        )
    };
    match run.await {
        Ok(record) => Row::Ok(record),
        Err(e) => Row::failed(&scenario, imp, e),
    }
}
