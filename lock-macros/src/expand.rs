//! The rewrite: the signature stays as written, the body runs inside the lock.

use proc_macro2::{Ident, Span, TokenStream};
use quote::quote;
use syn::ItemFn;

use crate::attr::{Args, Errors};
use crate::rewrite::{Parts, async_fn, local, with_errors};
use crate::template::{self, Params};

/// Expands `#[distributed_lock(attr)] item`. On any error, returns the errors and
/// the item unchanged, so that the rest of the crate (and IDEs) still see the fn.
/// A function is then marked `#[allow(unused_variables)]`: a parameter used only
/// by the key is unused in the unchanged function, and a warning saying so
/// beside the error would send the reader the wrong way.
pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let mut args = match syn::parse2::<Args>(attr) {
        Ok(args) => args,
        Err(error) => {
            errors.push(error);
            Args::default()
        }
    };
    errors.extend(std::mem::take(&mut args.errors));

    let Some(func) = async_fn(&item, "#[distributed_lock]", &mut errors) else {
        return with_errors(&errors, item);
    };
    let mut params = Params::of(&func.sig);
    if args.every.is_some() || args.cron.is_some() {
        params = params.with_slot(local("__lh_slot"));
    }
    let mut check = |lit: &syn::LitStr| match template::check(lit, &params) {
        Ok(key) => Some(key),
        Err(error) => {
            errors.push(error);
            None
        }
    };
    let key = match (&args.key, &args.keys) {
        (Some(lit), _) => check(lit).map(|key| vec![key]),
        (None, Some((lits, _))) => {
            let keys: Vec<Option<template::Key>> = lits.iter().map(&mut check).collect();
            keys.into_iter().collect()
        }
        (None, None) => None,
    };
    match key {
        Some(key) if errors.is_empty() => rewrite(func, &args, &key),
        _ => {
            if errors.is_empty() {
                // Unreachable in practice (a missing or invalid key is reported
                // above), but never emit the function silently without its lock.
                errors.push(syn::Error::new(Span::call_site(), "missing option `key`"));
            }
            with_errors(&errors, quote!(#[allow(unused_variables)] #item))
        }
    }
}

fn rewrite(func: ItemFn, args: &Args, keys: &[template::Key]) -> TokenStream {
    let parts = Parts::of(func, args.krate.as_ref(), args.client.as_ref());
    let (krate, fallback, client_init) = (&parts.krate, &parts.fallback, &parts.client_init);

    let client = local("__lh_client");
    let request = local("__lh_request");
    let key_var = local("__lh_key");
    let value = local("__lh_value");
    let error = local("__lh_error");
    let slot = local("__lh_slot");

    let key_exprs: Vec<TokenStream> = keys.iter().map(template::Key::to_tokens).collect();
    let lock = if args.keys.is_some() {
        quote!(#krate::__private::LockClient::lock_all(#client, [#(#key_exprs),*]))
    } else {
        let key_expr = &key_exprs[..];
        let key = quote!({ let #key_var = #(#key_expr)*; #key_var });
        match (args.permits, args.read, args.write) {
            (Some((permits, _)), _, _) => {
                quote!(#krate::__private::LockClient::semaphore(#client, #key, #permits))
            }
            (None, Some(_), _) => {
                quote!(#krate::__private::LockClient::rw_lock(#client, #key).read())
            }
            (None, None, Some(_)) => {
                quote!(#krate::__private::LockClient::rw_lock(#client, #key).write())
            }
            (None, None, None) => quote!(#krate::__private::LockClient::lock(#client, #key)),
        }
    };

    let mut options = TokenStream::new();
    if let Some(ttl) = &args.ttl {
        let d = ttl.to_tokens();
        options.extend(quote!(.ttl(#d)));
    }
    if args.renew {
        options.extend(quote!(.renew(true)));
    }
    if let Some(wait) = &args.wait {
        let d = wait.to_tokens();
        options.extend(quote!(.wait(#d)));
    }
    if let Some(at_least) = &args.at_least {
        let d = at_least.to_tokens();
        options.extend(quote!(.at_least(#d)));
    }
    if let Some(max_hold) = &args.max_hold {
        let d = max_hold.to_tokens();
        options.extend(quote!(.max_hold(#d)));
    }
    // `every` and `cron`: the slot is computed before anything else, so that
    // the key is kept from before the acquisition until the slot ends (with
    // `cron`, until the next fire).
    let slot_init = match (&args.every, &args.cron) {
        (Some(every), _) => {
            let d = every.to_tokens();
            quote!(let #slot = #krate::schedule::Slot::now(#d);)
        }
        (None, Some(cron)) => {
            // Read once per function, at its first call; the expression was
            // checked above, so the error arm is for a mismatch of versions.
            let expression = &cron.expression;
            let schedule = Ident::new("__LH_SCHEDULE", Span::mixed_site());
            quote! {
                static #schedule: #krate::schedule::CronOnce =
                    #krate::schedule::CronOnce::new(#expression);
                let #slot = match #schedule.slot_now() {
                    ::core::result::Result::Ok(#value) => #value,
                    ::core::result::Result::Err(#error) => return #fallback(#error),
                };
            }
        }
        (None, None) => TokenStream::new(),
    };
    if !slot_init.is_empty() {
        options.extend(quote!(.at_least(#krate::schedule::Slot::keep_for(&#slot))));
    }

    let mut future = parts.future();
    if !slot_init.is_empty() {
        // `leasehold::schedule::current_slot()` in the body.
        future = quote!(#krate::schedule::with_slot(#slot, #future));
    }

    let prelude = quote! {
        #slot_init
        let #request = {
            let #client: &#krate::__private::LockClient = #client_init;
            #lock #options
        };
    };
    parts.function(prelude, quote!(#request.run(#future)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(attr: TokenStream, item: TokenStream) -> String {
        expand(attr, item).to_string()
    }

    #[test]
    fn errors_keep_the_original_item() {
        let item = quote!(
            fn not_async(x: u32) -> u32 {
                x
            }
        );
        let out = expand_str(quote!(key = "k"), item.clone());
        assert!(out.contains("compile_error"));
        assert!(out.ends_with(&item.to_string()));
    }

    /// A parameter that only the key used is unused in the unchanged function:
    /// no warning about it beside the error.
    #[test]
    fn errors_silence_unused_parameters() {
        let item = quote!(
            async fn touch(user: u64) {}
        );
        let out = expand_str(quote!(key = "user:<usr>"), item.clone());
        assert!(out.contains("compile_error"));
        assert!(
            out.ends_with(&format!("# [allow (unused_variables)] {item}")),
            "{out}"
        );
    }

    #[test]
    fn no_key_no_expansion() {
        let item = quote!(
            async fn f() {}
        );
        let out = expand_str(quote!(ttl = "1s"), item.clone());
        assert!(out.contains("compile_error"));
        assert!(out.ends_with(&item.to_string()));
    }

    #[test]
    fn expands_all_options() {
        let out = expand_str(
            quote!(
                key = "draw:<date>",
                ttl = "10s",
                renew,
                wait = "2s",
                at_least = "30s",
                max_hold = "10m"
            ),
            quote!(
                pub async fn draw(date: u32) -> Result<u8, E> {
                    Ok(1)
                }
            ),
        );
        for part in [
            "pub async fn draw (date : u32) -> Result < u8 , E > {",
            ":: leasehold :: __private :: global_client ()",
            ":: std :: format ! (\"draw:{}\" , date)",
            ". ttl (:: core :: time :: Duration :: from_millis (10000))",
            ". renew (true)",
            ". wait (:: core :: time :: Duration :: from_millis (2000))",
            ". at_least (:: core :: time :: Duration :: from_millis (30000))",
            ". max_hold (:: core :: time :: Duration :: from_millis (600000))",
            "< Result < u8 , E > as :: leasehold :: LockFallback > :: from_lock_error",
            "let __lh_never : Result < u8 , E > = loop { } ;",
        ] {
            assert!(out.contains(part), "missing {part}\nin {out}");
        }
        assert!(!out.contains("compile_error"));
    }

    #[test]
    fn client_and_crate_options() {
        let out = expand_str(
            quote!(
                key = "k",
                client = self.locks.clone(),
                crate = "crate::facade"
            ),
            quote!(
                async fn f(&self) {}
            ),
        );
        assert!(out.contains("& (self . locks . clone ())"), "{out}");
        assert!(out.contains("crate :: facade :: __private :: LockClient :: lock"));
        assert!(!out.contains("global_client"));
        assert!(!out.contains(":: leasehold ::"));
        assert!(out.contains("< () as crate :: facade :: LockFallback >"));
    }

    #[test]
    fn every_keys_by_slot_and_keeps_it() {
        let out = expand_str(
            quote!(key = "report", every = "1m"),
            quote!(
                async fn report() {}
            ),
        );
        for part in [
            "let __lh_slot = :: leasehold :: schedule :: Slot :: now (:: core :: time :: \
             Duration :: from_millis (60000)) ;",
            ":: std :: format ! (\"report:{}\" , __lh_slot . id ())",
            ". at_least (:: leasehold :: schedule :: Slot :: keep_for (& __lh_slot))",
            ":: leasehold :: schedule :: with_slot (__lh_slot , async move {",
        ] {
            assert!(out.contains(part), "missing {part}\nin {out}");
        }
    }

    #[test]
    fn cron_keys_by_the_latest_fire_and_keeps_it() {
        let out = expand_str(
            quote!(key = "nightly:<region>", cron = "0 0 3 * * *"),
            quote!(
                async fn nightly(region: &str) -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        for part in [
            "static __LH_SCHEDULE : :: leasehold :: schedule :: CronOnce = :: leasehold :: \
             schedule :: CronOnce :: new (\"0 0 3 * * *\") ;",
            "let __lh_slot = match __LH_SCHEDULE . slot_now () {",
            "return < Result < () , E > as :: leasehold :: LockFallback > :: from_lock_error \
             (__lh_error)",
            ":: std :: format ! (\"nightly:{}:{}\" , region , __lh_slot . id ())",
            ". at_least (:: leasehold :: schedule :: Slot :: keep_for (& __lh_slot))",
            ":: leasehold :: schedule :: with_slot (__lh_slot , async move {",
        ] {
            assert!(out.contains(part), "missing {part}\nin {out}");
        }
        assert!(!out.contains("compile_error"));
    }

    #[test]
    fn impl_trait_return_is_not_pinned() {
        let out = expand_str(
            quote!(key = "k"),
            quote!(
                async fn f() -> Option<impl Debug> {
                    Some(1)
                }
            ),
        );
        assert!(!out.contains("__lh_never"));
        assert!(out.contains("< _ as :: leasehold :: LockFallback >"));
    }
}
