//! What both attributes do alike to an `async fn`: read it, split its
//! attributes, find the fallback for a lock error and the client, pin the
//! body's output to the declared return type, and, on an error, report it
//! beside the item unchanged.

use proc_macro2::{Delimiter, Group, Ident, Span, TokenStream, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{AttrStyle, Attribute, Expr, ItemFn, Path, ReturnType, Signature, Type, Visibility};

use crate::attr::Errors;

/// `item` as the `async fn` that `attribute` (`"#[distributed_lock]"`)
/// needs: `None`, with the error in `errors`, when it is no function; a
/// function that is not `async` is given back, with the error.
pub(crate) fn async_fn(item: &TokenStream, attribute: &str, errors: &mut Errors) -> Option<ItemFn> {
    let func = match syn::parse2::<ItemFn>(item.clone()) {
        Ok(func) => func,
        Err(_) => {
            errors.push(syn::Error::new(
                Span::call_site(),
                format!("{attribute} only works on async fn (with a body)"),
            ));
            return None;
        }
    };
    if func.sig.asyncness.is_none() {
        errors.push(syn::Error::new(
            func.sig.fn_token.span,
            format!("{attribute} only works on async fn"),
        ));
    }
    Some(func)
}

/// The pieces of an `async fn` that both rewrites use alike.
pub(crate) struct Parts {
    /// The outer attributes, kept on the function.
    outer: Vec<Attribute>,
    /// The inner attributes (`#![...]`), kept at the top of its body.
    inner: Vec<Attribute>,
    vis: Visibility,
    /// The signature, as written.
    sig: Signature,
    /// The path of the leasehold crate (`crate = "..."`, or `::leasehold`).
    pub krate: TokenStream,
    /// `<Ret as LockFallback>::from_lock_error`, spanned at the return type.
    pub fallback: TokenStream,
    /// The `&LockClient`: the `client = ...` option's, or the global client
    /// (the function returns the fallback's value without one).
    pub client_init: TokenStream,
    /// Pins the output of the body's async block to the declared return
    /// type (nothing where it contains `impl Trait`).
    pin_output: TokenStream,
    /// The body's statements, in braces of the expansion's own.
    body: Group,
}

impl Parts {
    /// The pieces of `func`, for the crate path `krate` and the `client`
    /// option given.
    pub(crate) fn of(func: ItemFn, krate: Option<&Path>, client: Option<&Expr>) -> Parts {
        let ItemFn {
            attrs,
            vis,
            sig,
            block,
        } = func;
        let (outer, inner): (Vec<_>, Vec<_>) = attrs
            .into_iter()
            .partition(|attr| matches!(attr.style, AttrStyle::Outer));
        let krate = match krate {
            Some(path) => path.to_token_stream(),
            None => quote!(::leasehold),
        };

        // The declared return type; `_` (inferred) when it contains `impl Trait`, which
        // cannot be named inside the body.
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

        let value = local("__lh_value");
        let error = local("__lh_error");
        let never = local("__lh_never");
        let client_init = match client {
            Some(expr) => client_expr(expr),
            None => quote! {
                &match #krate::__private::global_client() {
                    ::core::result::Result::Ok(#value) => #value,
                    ::core::result::Result::Err(#error) => return #fallback(#error),
                }
            },
        };

        // Pins the output type of the body's async block to the declared return type, so
        // that `?` and `return` inside the body convert exactly as in the original fn.
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

        // The body's statements in braces of the expansion's own (located at the
        // user's braces): the user's block is the tail of the async block the rewrite builds, and
        // rustc's `unused_braces` lint would flag a one-line body such as `{ Ok(1) }`
        // there if its braces were the user's. Lints inside the body are unaffected.
        let stmts = &block.stmts;
        let mut body = Group::new(Delimiter::Brace, quote!(#(#stmts)*));
        body.set_span(block.brace_token.span.join().resolved_at(Span::call_site()));

        Parts {
            outer,
            inner,
            vis,
            sig,
            krate,
            fallback,
            client_init,
            pin_output,
            body,
        }
    }
}

impl Parts {
    /// The body as the future to run: `async move { .. }`.
    pub(crate) fn future(&self) -> TokenStream {
        let (pin_output, body) = (&self.pin_output, &self.body);
        quote!(async move { #pin_output #body })
    }

    /// The function rewritten: its signature as written, then `prelude`, then
    /// `call` awaited, whose lock error becomes the fallback's value.
    pub(crate) fn function(&self, prelude: TokenStream, call: TokenStream) -> TokenStream {
        let Parts {
            outer,
            inner,
            vis,
            sig,
            fallback,
            ..
        } = self;
        let value = local("__lh_value");
        let error = local("__lh_error");
        quote! {
            #(#outer)*
            #vis #sig {
                #(#inner)*
                #prelude
                match #call.await {
                    ::core::result::Result::Ok(#value) => #value,
                    ::core::result::Result::Err(#error) => #fallback(#error),
                }
            }
        }
    }
}

pub(crate) fn with_errors(errors: &Errors, item: TokenStream) -> TokenStream {
    let mut tokens = errors.to_compile_errors();
    tokens.extend(item);
    tokens
}

/// A local of the generated code: `mixed_site` hygiene, so that it can neither
/// capture nor shadow a name of the user's.
pub(crate) fn local(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

/// `&(expr)`, spanned from the first to the last token of the expression, so that
/// a value of the wrong type is reported there.
pub(crate) fn client_expr(expr: &Expr) -> TokenStream {
    let tokens = expr.to_token_stream();
    let first = tokens
        .clone()
        .into_iter()
        .next()
        .map_or_else(Span::call_site, |tt| tt.span());
    let last = tokens
        .clone()
        .into_iter()
        .last()
        .map_or(first, |tt| tt.span());
    let mut parens = Group::new(Delimiter::Parenthesis, tokens);
    parens.set_span(last);
    quote_spanned! {first=> &#parens }
}

/// Whether `impl Trait` appears anywhere in the return type.
pub(crate) fn contains_impl_trait(output: &ReturnType) -> bool {
    fn scan(tokens: TokenStream) -> bool {
        tokens.into_iter().any(|tt| match tt {
            TokenTree::Ident(ident) => ident == "impl",
            TokenTree::Group(group) => scan(group.stream()),
            _ => false,
        })
    }
    match output {
        ReturnType::Default => false,
        ReturnType::Type(_, ty) => scan(Type::to_token_stream(ty)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_impl_trait() {
        let sig = |s: &str| -> syn::Signature {
            match syn::parse_str(s) {
                Ok(sig) => sig,
                Err(e) => panic!("{s}: {e}"),
            }
        };
        assert!(!contains_impl_trait(&sig("async fn f()").output));
        assert!(!contains_impl_trait(
            &sig("async fn f() -> Result<u8, E>").output
        ));
        assert!(contains_impl_trait(
            &sig("async fn f() -> impl Debug").output
        ));
        assert!(contains_impl_trait(
            &sig("async fn f() -> Option<impl Debug>").output
        ));
        assert!(contains_impl_trait(
            &sig("async fn f() -> Result<Vec<(u8, impl Debug)>, E>").output
        ));
    }
}
