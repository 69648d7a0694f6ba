//! SQL calls prepared once per backend and kept, for the paths that run without a plan of
//! their own (src/complete.rs, src/checkout.rs) and hand a part of their work to SQL.
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::OwnedPreparedStatement;
use pgrx::PgOid;
use std::cell::RefCell;

thread_local! {
    static PLANS: RefCell<Vec<(&'static str, OwnedPreparedStatement)>> = const { RefCell::new(Vec::new()) };
}

/// Runs `query`, prepared with `types` at its first use in this backend and kept (the plan
/// cache re-plans it when what it names changes), with `args`; the first column of its row.
/// An error it raises reaches the client with its SQLSTATE only if pgrx knows that code: the
/// queries called here raise none of jobq's own (JQxxx).
pub fn kept<T: FromDatum + IntoDatum>(query: &'static str, types: &[pg_sys::Oid], args: &[DatumWithOid]) -> Option<T> {
    PLANS.with(|plans| {
        let mut plans = plans.borrow_mut();
        Spi::connect_mut(|client| {
            let i = match plans.iter().position(|(q, _)| *q == query) {
                Some(i) => i,
                None => {
                    let types: Vec<PgOid> = types.iter().map(|&t| PgOid::from(t)).collect();
                    let plan = client.prepare_mut(query, &types)?.keep();
                    plans.push((query, plan));
                    plans.len() - 1
                }
            };
            client.update(&plans[i].1, Some(1), args)?.first().get_one::<T>()
        })
        .unwrap_or_else(|e| error!("jobq: {e}"))
    })
}
