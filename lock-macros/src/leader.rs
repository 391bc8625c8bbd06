//! `#[leader_only(election = "…")]`: its options and its rewrite. The
//! function runs its body only while this instance leads the election, as
//! the client's background campaign knows it.

use proc_macro2::{Delimiter, Group, Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{AttrStyle, Expr, Ident, ItemFn, LitStr, Path, ReturnType, Token};

use crate::attr::{
    DurationOption, Errors, Seen, duration_value, equals, skip_to_comma, string_value,
};
use crate::expand::{client_expr, contains_impl_trait, local, with_errors};
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
        let mut args = LeaderArgs::default();
        let mut seen = Seen::default();
        while !input.is_empty() {
            if let Err(error) = args.parse_option(input, &mut seen) {
                args.errors.push(error);
                skip_to_comma(input)?;
            }
            if input.is_empty() {
                break;
            }
            if let Err(error) = input.parse::<Token![,]>() {
                args.errors.push(syn::Error::new(
                    error.span(),
                    "expected `,` between options",
                ));
                skip_to_comma(input)?;
                input.parse::<Option<Token![,]>>()?;
            }
        }
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

impl LeaderArgs {
    fn parse_option(&mut self, input: ParseStream, seen: &mut Seen) -> syn::Result<()> {
        if input.peek(Token![crate]) {
            let keyword: Token![crate] = input.parse()?;
            seen.first("crate", keyword.span)?;
            let lit = string_value(input, "crate", keyword.span, "\"::leasehold\"")?;
            let path = lit.parse::<Path>().map_err(|_| {
                syn::Error::new(
                    lit.span(),
                    format!(
                        "`crate` must name the path of the leasehold crate, as in \"::leasehold\", \
                         not \"{}\"",
                        lit.value()
                    ),
                )
            })?;
            self.krate = Some(path);
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
    let func = match syn::parse2::<ItemFn>(item.clone()) {
        Ok(func) => func,
        Err(_) => {
            errors.push(syn::Error::new(
                Span::call_site(),
                "#[leader_only] only works on async fn (with a body)",
            ));
            return with_errors(&errors, item);
        }
    };
    if func.sig.asyncness.is_none() {
        errors.push(syn::Error::new(
            func.sig.fn_token.span,
            "#[leader_only] only works on async fn",
        ));
    }
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
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = func;
    let (outer, inner): (Vec<_>, Vec<_>) = attrs
        .into_iter()
        .partition(|attr| matches!(attr.style, AttrStyle::Outer));
    let krate = match &args.krate {
        Some(path) => path.to_token_stream(),
        None => quote!(::leasehold),
    };
    let (ret, ret_span) = match &sig.output {
        ReturnType::Default => (quote!(()), sig.ident.span()),
        ReturnType::Type(_, ty) => (ty.to_token_stream(), ty.span()),
    };
    let nameable = !contains_impl_trait(&sig.output);
    let fallback = if nameable {
        quote_spanned! {ret_span=> <#ret as #krate::LockFallback>::from_lock_error }
    } else {
        quote_spanned! {ret_span=> <_ as #krate::LockFallback>::from_lock_error }
    };
    let client = local("__lh_client");
    let election = local("__lh_election");
    let value = local("__lh_value");
    let error = local("__lh_error");
    let never = local("__lh_never");

    let client_init = match &args.client {
        Some(expr) => client_expr(expr),
        None => quote! {
            &match #krate::__private::global_client() {
                ::core::result::Result::Ok(#value) => #value,
                ::core::result::Result::Err(#error) => return #fallback(#error),
            }
        },
    };
    let ttl = match &args.ttl {
        Some(ttl) => {
            let d = ttl.to_tokens();
            quote!(.ttl(#d))
        }
        None => TokenStream::new(),
    };
    // As in `#[distributed_lock]`: the body's output is pinned to the
    // declared return type, so that `?` and `return` convert as written.
    let pin_output = if nameable {
        quote! {
            #[allow(
                unreachable_code,
                clippy::diverging_sub_expression,
                clippy::empty_loop,
                clippy::let_unit_value,
                clippy::needless_return,
                clippy::unreachable
            )]
            if false {
                let #never: #ret = loop {};
                return #never;
            }
        }
    } else {
        TokenStream::new()
    };
    let stmts = &block.stmts;
    let mut body = Group::new(Delimiter::Brace, quote!(#(#stmts)*));
    body.set_span(block.brace_token.span.join().resolved_at(Span::call_site()));

    quote! {
        #(#outer)*
        #vis #sig {
            #(#inner)*
            let #election = {
                let #client: &#krate::__private::LockClient = #client_init;
                #krate::__private::LockClient::election(#client, #name) #ttl
            };
            match #krate::__private::leader_only(#election, async move { #pin_output #body }).await {
                ::core::result::Result::Ok(#value) => #value,
                ::core::result::Result::Err(#error) => #fallback(#error),
            }
        }
    }
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
