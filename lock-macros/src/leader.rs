//! `#[leader_only(election = "…")]`: its options and its rewrite. The
//! function runs its body only while this instance leads the election, as
//! the client's background campaign knows it.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, Ident, ItemFn, LitStr, Path, Token};

use crate::attr::{
    DurationOption, Errors, Options, Seen, crate_value, duration_value, equals, parse_options,
    string_value,
};
use crate::rewrite::{Parts, async_fn, local, with_errors};
use crate::suggest;

const OPTIONS: &str = "`election`, `ttl`, `client`, `crate`";
/// The same names, for "did you mean".
const OPTION_NAMES: &[&str] = &["election", "ttl", "client", "crate"];

/// The options of one `#[leader_only]`.
#[derive(Default)]
pub(crate) struct LeaderArgs {
    pub election: Option<LitStr>,
    pub ttl: Option<DurationOption>,
    pub client: Option<Expr>,
    pub krate: Option<Path>,
    pub errors: Errors,
}

impl Parse for LeaderArgs {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let (mut args, seen) = parse_options::<LeaderArgs>(input)?;
        if !seen.contains("election") {
            args.errors.push(syn::Error::new(
                Span::call_site(),
                "missing option `election`: #[leader_only] needs the name of the election, as \
                 in `election = \"scheduler\"`",
            ));
        }
        Ok(args)
    }
}

impl Options for LeaderArgs {
    fn errors(&mut self) -> &mut Errors {
        &mut self.errors
    }

    fn parse_option(&mut self, input: ParseStream, seen: &mut Seen) -> syn::Result<()> {
        if input.peek(Token![crate]) {
            self.krate = Some(crate_value(input, seen)?);
            return Ok(());
        }
        if !input.peek(Ident::peek_any) {
            return Err(input.error(format!(
                "expected an option such as `election = \"scheduler\"`; the options are {OPTIONS}"
            )));
        }
        let keyword = input.call(Ident::parse_any)?;
        let span = keyword.span();
        match keyword.to_string().as_str() {
            "election" => {
                seen.first("election", span)?;
                let lit = string_value(input, "election", span, "\"scheduler\"")?;
                let name = lit.value();
                if name.is_empty() || name.contains('}') {
                    return Err(syn::Error::new(
                        lit.span(),
                        "the election's name must not be empty nor contain `}`",
                    ));
                }
                self.election = Some(lit);
            }
            "ttl" => self.ttl = Some(duration_value(input, seen, "ttl", span)?),
            "client" => {
                seen.first("client", span)?;
                equals(input, "client", span, "self.locks.clone()")?;
                self.client = Some(input.parse()?);
            }
            other => return Err(syn::Error::new(span, not_here(other))),
        }
        Ok(())
    }
}

/// The error for an option that `#[leader_only]` does not take.
fn not_here(option: &str) -> String {
    let why = match option {
        "key" | "keys" => "an election is named by `election = \"…\"`, not by lock keys".to_owned(),
        "renew" => "the leadership is always renewed (every ttl/3) while it lasts".to_owned(),
        "wait" => "the instance stands for election in the background all the time: a call never \
             waits for leadership, it runs the body if this instance leads and skips otherwise"
            .to_owned(),
        "at_least" | "max_hold" | "every" => {
            format!("`{option}` limits one lock's hold, while a leadership lasts until it is lost")
        }
        "permits" | "read" | "write" => {
            "an election has exactly one leader: it is not a semaphore or a rw lock".to_owned()
        }
        _ => return suggest::unknown_option(option, OPTION_NAMES, OPTIONS),
    };
    format!("`{option}` cannot be used with #[leader_only]: {why}; the options are {OPTIONS}")
}

/// Expands `#[leader_only(attr)] item`; on any error, the errors and the
/// item unchanged.
pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let mut args = match syn::parse2::<LeaderArgs>(attr) {
        Ok(args) => args,
        Err(error) => {
            errors.push(error);
            LeaderArgs::default()
        }
    };
    errors.extend(std::mem::take(&mut args.errors));
    let Some(func) = async_fn(&item, "#[leader_only]", &mut errors) else {
        return with_errors(&errors, item);
    };
    match &args.election {
        Some(name) if errors.is_empty() => rewrite(func, &args, name),
        _ => {
            if errors.is_empty() {
                errors.push(syn::Error::new(
                    Span::call_site(),
                    "missing option `election`",
                ));
            }
            with_errors(&errors, item)
        }
    }
}

fn rewrite(func: ItemFn, args: &LeaderArgs, name: &LitStr) -> TokenStream {
    let parts = Parts::of(func, args.krate.as_ref(), args.client.as_ref());
    let (krate, client_init) = (&parts.krate, &parts.client_init);
    let client = local("__lh_client");
    let election = local("__lh_election");
    let ttl = match &args.ttl {
        Some(ttl) => {
            let d = ttl.to_tokens();
            quote!(.ttl(#d))
        }
        None => TokenStream::new(),
    };

    let prelude = quote! {
        let #election = {
            let #client: &#krate::__private::LockClient = #client_init;
            #krate::__private::LockClient::election(#client, #name) #ttl
        };
    };
    let future = parts.future();
    parts.function(
        prelude,
        quote!(#krate::__private::leader_only(#election, #future)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(tokens: TokenStream) -> String {
        match syn::parse2::<LeaderArgs>(tokens) {
            Ok(args) => args.errors.to_compile_errors().to_string(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn options() {
        let args = syn::parse2::<LeaderArgs>(quote! {
            election = "scheduler", ttl = "10s", client = self.locks.clone()
        })
        .unwrap_or_default();
        assert!(args.errors.is_empty());
        assert_eq!(
            args.election.map(|l| l.value()).as_deref(),
            Some("scheduler")
        );
        assert_eq!(args.ttl.map(|d| d.millis), Some(10_000));
        assert!(args.client.is_some());
    }

    #[test]
    fn lock_options_are_refused() {
        for option in [
            quote!(renew),
            quote!(wait = "2s"),
            quote!(key = "k"),
            quote!(permits = 2),
        ] {
            let found = errors(quote!(election = "e", #option));
            assert!(
                found.contains("cannot be used with #[leader_only]"),
                "{found}"
            );
        }
        assert!(errors(quote!(ttl = "1s")).contains("missing option `election`"));
    }
}
