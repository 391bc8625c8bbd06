//! The options of `#[distributed_lock(...)]`, and the parsing that
//! `#[leader_only(...)]` shares.
//!
//! Parsing recovers from a bad option by skipping to the next `,`, so that every
//! mistake in one attribute is reported at once.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, Ident, LitStr, Path, Token};

use crate::{cron, duration, suggest};

mod kw {
    syn::custom_keyword!(key);
    syn::custom_keyword!(ttl);
    syn::custom_keyword!(renew);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(at_least);
    syn::custom_keyword!(max_hold);
    syn::custom_keyword!(every);
    syn::custom_keyword!(cron);
    syn::custom_keyword!(client);
    syn::custom_keyword!(permits);
    syn::custom_keyword!(read);
    syn::custom_keyword!(write);
    syn::custom_keyword!(keys);
}

const OPTIONS: &str = "`key`, `keys`, `ttl`, `renew`, `wait`, `at_least`, `max_hold`, `every`, \
                       `cron`, `permits`, `read`, `write`, `client`, `crate`";
/// The same names, for "did you mean".
pub(crate) const OPTION_NAMES: &[&str] = &[
    "key", "keys", "ttl", "renew", "wait", "at_least", "max_hold", "every", "cron", "permits",
    "read", "write", "client", "crate",
];

/// Collects errors so that they are reported together.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(errors) => errors.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn extend(&mut self, errors: Errors) {
        if let Some(error) = errors.0 {
            self.push(error);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub(crate) fn to_compile_errors(&self) -> TokenStream {
        match &self.0 {
            Some(error) => error.to_compile_error(),
            None => TokenStream::new(),
        }
    }
}

/// A duration option, in milliseconds, and where it was written.
pub(crate) struct DurationOption {
    pub millis: u64,
    /// The option's keyword.
    pub keyword: Span,
    /// The string literal.
    pub span: Span,
}

impl DurationOption {
    pub(crate) fn to_tokens(&self) -> TokenStream {
        duration::to_tokens(self.millis)
    }
}

/// `cron = "…"`: a schedule checked at compile time.
pub(crate) struct CronOption {
    pub expression: LitStr,
}

/// The options of one attribute. Options that were given but invalid are `None`
/// here and reported in `errors`.
#[derive(Default)]
pub(crate) struct Args {
    pub key: Option<LitStr>,
    pub ttl: Option<DurationOption>,
    pub renew: bool,
    pub wait: Option<DurationOption>,
    pub at_least: Option<DurationOption>,
    pub max_hold: Option<DurationOption>,
    pub every: Option<DurationOption>,
    pub cron: Option<CronOption>,
    pub client: Option<Expr>,
    pub krate: Option<Path>,
    /// `permits = N`: a semaphore of N permits on `key`, and the keyword.
    pub permits: Option<(u32, Span)>,
    /// `read`: the read side of the rw lock on `key` (the keyword).
    pub read: Option<Span>,
    /// `write`: the write side of the rw lock on `key` (the keyword).
    pub write: Option<Span>,
    /// `keys = ["a", "b"]`: all of these lock keys at once (instead of
    /// `key`), and the keyword.
    pub keys: Option<(Vec<LitStr>, Span)>,
    pub errors: Errors,
}

/// Which options were already seen (valid or not), for duplicate detection.
#[derive(Default)]
pub(crate) struct Seen(Vec<&'static str>);

impl Seen {
    pub(crate) fn first(&mut self, name: &'static str, span: Span) -> syn::Result<()> {
        if self.0.contains(&name) {
            return Err(syn::Error::new(
                span,
                format!("duplicate option `{name}`: give each option at most once"),
            ));
        }
        self.0.push(name);
        Ok(())
    }

    pub(crate) fn contains(&self, name: &str) -> bool {
        self.0.contains(&name)
    }
}

/// The options of one attribute, parsed one at a time by [`parse_options`].
pub(crate) trait Options: Default {
    /// Parses one option (its keyword and its value), or fails for it.
    fn parse_option(&mut self, input: ParseStream, seen: &mut Seen) -> syn::Result<()>;

    /// Where the errors of bad options are collected.
    fn errors(&mut self) -> &mut Errors;
}

/// The comma-separated options of one attribute, and which were seen. A bad
/// option's error is collected and parsing goes on after the next `,`.
pub(crate) fn parse_options<T: Options>(input: ParseStream) -> syn::Result<(T, Seen)> {
    let mut args = T::default();
    let mut seen = Seen::default();
    while !input.is_empty() {
        if let Err(error) = args.parse_option(input, &mut seen) {
            args.errors().push(error);
            skip_to_comma(input)?;
        }
        if input.is_empty() {
            break;
        }
        if let Err(error) = input.parse::<Token![,]>() {
            args.errors().push(syn::Error::new(
                error.span(),
                "expected `,` between options",
            ));
            skip_to_comma(input)?;
            input.parse::<Option<Token![,]>>()?;
        }
    }
    Ok((args, seen))
}

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let (mut args, seen) = parse_options::<Args>(input)?;
        if !seen.contains("key") && !seen.contains("keys") {
            args.errors.push(syn::Error::new(
                Span::call_site(),
                "missing option `key`: #[distributed_lock] needs the name of the lock, \
                 as in `key = \"job:<id>\"`",
            ));
        }
        args.check_combinations();
        Ok(args)
    }
}

impl Args {
    /// Options that are valid alone but not together.
    fn check_combinations(&mut self) {
        if let (Some(_), Some(write)) = (self.read, self.write) {
            self.errors.push(syn::Error::new(
                write,
                "`read` and `write` cannot be combined: a call takes either a read share or the \
                 write side of the rw lock on `key`",
            ));
        }
        if let Some((_, permits)) = self.permits
            && (self.read.is_some() || self.write.is_some())
        {
            self.errors.push(syn::Error::new(
                permits,
                "`permits` cannot be combined with `read` or `write`: `key` is either a \
                 semaphore or a rw lock",
            ));
        }
        if let Some((_, keys)) = &self.keys {
            if self.key.is_some() {
                self.errors.push(syn::Error::new(
                    *keys,
                    "`keys` cannot be combined with `key`: `keys = [...]` names every lock to \
                     take at once, so leave `key` out",
                ));
            }
            if self.permits.is_some() || self.read.is_some() || self.write.is_some() {
                self.errors.push(syn::Error::new(
                    *keys,
                    "`keys` cannot be combined with `permits`, `read` or `write`: `keys` takes \
                     plain locks, all at once",
                ));
            }
        }
        if let Some(max_hold) = &self.max_hold
            && !self.renew
        {
            self.errors.push(syn::Error::new(
                max_hold.keyword,
                "`max_hold` limits renewal, so it needs `renew`: without `renew` the lease \
                 already ends after `ttl`",
            ));
        }
        if let (Some(every), Some(_)) = (&self.every, &self.cron) {
            self.errors.push(syn::Error::new(
                every.keyword,
                "`every` cannot be combined with `cron`: the schedule is either a fixed period \
                 or a cron expression",
            ));
        } else if self.cron.is_some() {
            if let Some(at_least) = &self.at_least {
                self.errors.push(syn::Error::new(
                    at_least.keyword,
                    "`at_least` cannot be combined with `cron`: `cron` already keeps the key \
                     until the next fire",
                ));
            }
            if let Some(wait) = &self.wait {
                self.errors.push(syn::Error::new(
                    wait.keyword,
                    "`wait` cannot be combined with `cron`: the lock of a fire is kept until the \
                     next fire, so a waiting process would run the job a second time for that \
                     fire; leave `wait` out so that the other processes skip",
                ));
            }
        }
        if self.every.is_some() {
            if let Some(at_least) = &self.at_least {
                self.errors.push(syn::Error::new(
                    at_least.keyword,
                    "`at_least` cannot be combined with `every`: `every` already keeps the key \
                     until the end of the slot",
                ));
            }
            if let Some(wait) = &self.wait {
                self.errors.push(syn::Error::new(
                    wait.keyword,
                    "`wait` cannot be combined with `every`: the lock of a slot is kept until the \
                     slot ends, so a waiting process would run the job a second time for that \
                     slot; leave `wait` out so that the other processes skip",
                ));
            }
        }
    }
}

impl Options for Args {
    fn errors(&mut self) -> &mut Errors {
        &mut self.errors
    }

    /// Parses one option; on error the caller skips to the next `,`.
    fn parse_option(&mut self, input: ParseStream, seen: &mut Seen) -> syn::Result<()> {
        if input.peek(kw::key) {
            let keyword: kw::key = input.parse()?;
            seen.first("key", keyword.span)?;
            let lit = string_value(input, "key", keyword.span, "\"order:<id>\"")?;
            self.key = Some(lit);
        } else if input.peek(kw::ttl) {
            let keyword: kw::ttl = input.parse()?;
            self.ttl = Some(duration_value(input, seen, "ttl", keyword.span)?);
        } else if input.peek(kw::wait) {
            let keyword: kw::wait = input.parse()?;
            self.wait = Some(duration_value(input, seen, "wait", keyword.span)?);
        } else if input.peek(kw::at_least) {
            let keyword: kw::at_least = input.parse()?;
            self.at_least = Some(duration_value(input, seen, "at_least", keyword.span)?);
        } else if input.peek(kw::max_hold) {
            let keyword: kw::max_hold = input.parse()?;
            self.max_hold = Some(duration_value(input, seen, "max_hold", keyword.span)?);
        } else if input.peek(kw::every) {
            let keyword: kw::every = input.parse()?;
            let every = duration_value(input, seen, "every", keyword.span)?;
            if every.millis % 1000 != 0 {
                return Err(syn::Error::new(
                    every.span,
                    "`every` must be a whole number of seconds, as in `every = \"1m\"` or \
                     `every = \"90s\"`: a slot is named by its start in unix seconds",
                ));
            }
            self.every = Some(every);
        } else if input.peek(kw::cron) {
            let keyword: kw::cron = input.parse()?;
            seen.first("cron", keyword.span)?;
            let expression = string_value(input, "cron", keyword.span, "\"0 0 3 * * *\"")?;
            cron::check(&expression)?;
            self.cron = Some(CronOption { expression });
        } else if input.peek(kw::renew) {
            let keyword: kw::renew = input.parse()?;
            seen.first("renew", keyword.span)?;
            if !(input.is_empty() || input.peek(Token![,])) {
                let mut value = keyword.into_token_stream();
                value.extend(take_to_comma(input)?);
                return Err(syn::Error::new_spanned(
                    value,
                    "`renew` takes no value: write `renew` to keep the lease alive while the \
                     body runs, or leave it out",
                ));
            }
            self.renew = true;
        } else if input.peek(kw::permits) {
            let keyword: kw::permits = input.parse()?;
            seen.first("permits", keyword.span)?;
            equals(input, "permits", keyword.span, "5")?;
            let lit: syn::LitInt = input.parse().map_err(|e| {
                syn::Error::new(
                    e.span(),
                    "`permits` takes a whole number, as in `permits = 5`",
                )
            })?;
            let permits: u32 = lit.base10_parse()?;
            if permits == 0 {
                return Err(syn::Error::new(
                    lit.span(),
                    "`permits` must be at least 1: a semaphore of 0 permits never lets anyone in",
                ));
            }
            self.permits = Some((permits, keyword.span));
        } else if input.peek(kw::read) || input.peek(kw::write) {
            let name = if input.peek(kw::read) {
                "read"
            } else {
                "write"
            };
            let keyword = input.call(Ident::parse_any)?;
            seen.first(name, keyword.span())?;
            if !(input.is_empty() || input.peek(Token![,])) {
                let mut value = keyword.into_token_stream();
                value.extend(take_to_comma(input)?);
                return Err(syn::Error::new_spanned(
                    value,
                    format!("`{name}` takes no value: write `{name}` alone"),
                ));
            }
            if name == "read" {
                self.read = Some(keyword.span());
            } else {
                self.write = Some(keyword.span());
            }
        } else if input.peek(kw::keys) {
            let keyword: kw::keys = input.parse()?;
            seen.first("keys", keyword.span)?;
            equals(
                input,
                "keys",
                keyword.span,
                "[\"acct:<from>\", \"acct:<to>\"]",
            )?;
            let list;
            syn::bracketed!(list in input);
            let lits = list.parse_terminated(|i| i.parse::<LitStr>(), Token![,])?;
            if lits.is_empty() {
                return Err(syn::Error::new(
                    keyword.span,
                    "`keys` needs at least one key, as in `keys = [\"acct:<from>\", \"acct:<to>\"]`",
                ));
            }
            self.keys = Some((lits.into_iter().collect(), keyword.span));
        } else if input.peek(kw::client) {
            let keyword: kw::client = input.parse()?;
            seen.first("client", keyword.span)?;
            equals(input, "client", keyword.span, "self.locks.clone()")?;
            self.client = Some(input.parse()?);
        } else if input.peek(Token![crate]) {
            self.krate = Some(crate_value(input, seen)?);
        } else if input.peek(Ident::peek_any) {
            let ident = input.call(Ident::parse_any)?;
            return Err(syn::Error::new(
                ident.span(),
                suggest::unknown_option(&ident.to_string(), OPTION_NAMES, OPTIONS),
            ));
        } else {
            return Err(input.error(format!(
                "expected an option such as `key = \"job:<id>\"`; the options are {OPTIONS}"
            )));
        }
        Ok(())
    }
}

/// `crate = "::leasehold"`, from the keyword on: the path of the leasehold
/// crate.
pub(crate) fn crate_value(input: ParseStream, seen: &mut Seen) -> syn::Result<Path> {
    let keyword: Token![crate] = input.parse()?;
    seen.first("crate", keyword.span)?;
    let lit = string_value(input, "crate", keyword.span, "\"::leasehold\"")?;
    lit.parse::<Path>().map_err(|_| {
        syn::Error::new(
            lit.span(),
            format!(
                "`crate` must name the path of the leasehold crate, as in \"::leasehold\", \
                 not \"{}\"",
                lit.value()
            ),
        )
    })
}

/// `= "..."` after the option keyword.
pub(crate) fn string_value(
    input: ParseStream,
    name: &str,
    keyword: Span,
    example: &str,
) -> syn::Result<LitStr> {
    equals(input, name, keyword, example)?;
    if input.peek(LitStr) {
        return input.parse();
    }
    let hint = if input.peek(syn::LitInt)
        && matches!(name, "ttl" | "wait" | "at_least" | "max_hold" | "every")
    {
        ", with a unit"
    } else {
        ""
    };
    Err(input.error(format!(
        "`{name}` takes a string literal{hint}, as in `{name} = {example}`"
    )))
}

pub(crate) fn duration_value(
    input: ParseStream,
    seen: &mut Seen,
    name: &'static str,
    keyword: Span,
) -> syn::Result<DurationOption> {
    seen.first(name, keyword)?;
    let lit = string_value(input, name, keyword, "\"10s\"")?;
    let millis = duration::parse_lit(name, &lit)?;
    Ok(DurationOption {
        millis,
        keyword,
        span: lit.span(),
    })
}

pub(crate) fn equals(
    input: ParseStream,
    name: &str,
    keyword: Span,
    example: &str,
) -> syn::Result<()> {
    if input.peek(Token![=]) {
        input.parse::<Token![=]>()?;
        return Ok(());
    }
    Err(syn::Error::new(
        keyword,
        format!("`{name}` needs a value, as in `{name} = {example}`"),
    ))
}

/// Consumes tokens up to (not including) the next top-level `,` and returns them.
pub(crate) fn take_to_comma(input: ParseStream) -> syn::Result<TokenStream> {
    input.step(|cursor| {
        let mut rest = *cursor;
        let mut taken = TokenStream::new();
        while let Some((tt, next)) = rest.token_tree() {
            if matches!(&tt, TokenTree::Punct(p) if p.as_char() == ',') {
                break;
            }
            taken.extend([tt]);
            rest = next;
        }
        Ok((taken, rest))
    })
}

pub(crate) fn skip_to_comma(input: ParseStream) -> syn::Result<()> {
    take_to_comma(input).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(tokens: TokenStream) -> Args {
        match syn::parse2::<Args>(tokens) {
            Ok(args) => args,
            Err(e) => panic!("hard parse error: {e}"),
        }
    }

    fn errors(tokens: TokenStream) -> Vec<String> {
        match parse(tokens).errors.0 {
            Some(e) => e.into_iter().map(|e| e.to_string()).collect(),
            None => Vec::new(),
        }
    }

    #[test]
    fn all_options() {
        let args = parse(quote::quote! {
            key = "draw:<date>", ttl = "10s", renew, wait = "2s", at_least = "1m30s",
            client = self.locks.clone(), crate = "::my::leasehold",
        });
        assert!(args.errors.is_empty());
        assert_eq!(args.key.map(|k| k.value()).as_deref(), Some("draw:<date>"));
        assert_eq!(args.ttl.map(|d| d.millis), Some(10_000));
        assert!(args.renew);
        assert_eq!(args.wait.map(|d| d.millis), Some(2_000));
        assert_eq!(args.at_least.map(|d| d.millis), Some(90_000));
        assert_eq!(
            args.client
                .map(|c| c.into_token_stream().to_string())
                .as_deref(),
            Some("self . locks . clone ()")
        );
        assert_eq!(
            args.krate
                .map(|c| c.into_token_stream().to_string())
                .as_deref(),
            Some(":: my :: leasehold")
        );
    }

    #[test]
    fn family_options() {
        let args = parse(quote::quote!(key = "k", permits = 5));
        assert!(args.errors.is_empty());
        assert_eq!(args.permits.map(|(n, _)| n), Some(5));
        let args = parse(quote::quote!(key = "k", read));
        assert!(args.errors.is_empty() && args.read.is_some());
        let args = parse(quote::quote!(keys = ["a:<x>", "b"], wait = "1s"));
        assert!(args.errors.is_empty());
        assert_eq!(args.keys.map(|(k, _)| k.len()), Some(2));
        for nonsense in [
            quote::quote!(key = "k", read, write),
            quote::quote!(key = "k", permits = 2, read),
            quote::quote!(key = "k", keys = ["a"]),
            quote::quote!(keys = ["a"], permits = 2),
            quote::quote!(key = "k", permits = 0),
            quote::quote!(keys = []),
        ] {
            assert_eq!(errors(nonsense).len(), 1);
        }
    }

    #[test]
    fn key_alone() {
        let args = parse(quote::quote!(key = "report"));
        assert!(args.errors.is_empty());
        assert!(!args.renew);
        assert!(args.ttl.is_none() && args.wait.is_none() && args.at_least.is_none());
        assert!(args.client.is_none() && args.krate.is_none());
    }

    #[test]
    fn client_expressions_with_commas() {
        let args = parse(quote::quote!(client = pick(a, b), key = "k"));
        assert!(args.errors.is_empty());
        let args = parse(quote::quote!(
            key = "k",
            client = Pool::<A, B>::get(&x).await
        ));
        assert!(args.errors.is_empty());
        assert_eq!(
            args.client
                .map(|c| c.into_token_stream().to_string())
                .as_deref(),
            Some("Pool :: < A , B > :: get (& x) . await")
        );
    }

    #[test]
    fn missing_key() {
        assert_eq!(
            errors(quote::quote!()),
            vec![
                "missing option `key`: #[distributed_lock] needs the name of the lock, as in \
                 `key = \"job:<id>\"`"
            ]
        );
        assert_eq!(errors(quote::quote!(ttl = "1s")).len(), 1);
    }

    #[test]
    fn the_option_list_names_every_option() {
        let listed: Vec<String> = OPTION_NAMES
            .iter()
            .map(|name| format!("`{name}`"))
            .collect();
        assert_eq!(OPTIONS.split(", ").collect::<Vec<_>>(), listed);
    }

    #[test]
    fn unknown_option() {
        assert_eq!(
            errors(quote::quote!(key = "k", timeout = "1s")),
            vec![
                "unknown option `timeout` (did you mean `wait`?); the options are `key`, `keys`, \
                 `ttl`, `renew`, \
                 `wait`, `at_least`, `max_hold`, `every`, `cron`, `permits`, `read`, `write`, \
                 `client`, `crate`"
            ]
        );
        assert_eq!(
            errors(quote::quote!(key = "k", retries = 3)),
            vec![
                "unknown option `retries`; the options are `key`, `keys`, `ttl`, `renew`, \
                 `wait`, `at_least`, `max_hold`, `every`, `cron`, `permits`, `read`, `write`, \
                 `client`, `crate`"
            ]
        );
        assert_eq!(errors(quote::quote!(key = "k", fn)).len(), 1);
        assert_eq!(errors(quote::quote!(key = "k", "x")).len(), 1);
    }

    #[test]
    fn duplicate_option() {
        assert_eq!(
            errors(quote::quote!(key = "k", ttl = "1s", ttl = "2s")),
            vec!["duplicate option `ttl`: give each option at most once"]
        );
        assert_eq!(errors(quote::quote!(key = "a", key = "b")).len(), 1);
        assert_eq!(errors(quote::quote!(key = "a", renew, renew)).len(), 1);
        // A duplicate of an invalid option is still a duplicate.
        assert_eq!(
            errors(quote::quote!(key = "k", ttl = "1x", ttl = "2s")).len(),
            2
        );
    }

    #[test]
    fn renew_takes_no_value() {
        for tokens in [
            quote::quote!(key = "k", renew = true),
            quote::quote!(key = "k", renew = false),
            quote::quote!(renew(true), key = "k"),
        ] {
            assert_eq!(
                errors(tokens),
                vec![
                    "`renew` takes no value: write `renew` to keep the lease alive while the \
                     body runs, or leave it out"
                ]
            );
        }
    }

    #[test]
    fn values_must_be_strings() {
        assert_eq!(
            errors(quote::quote!(key = "k", ttl = 10)),
            vec!["`ttl` takes a string literal, with a unit, as in `ttl = \"10s\"`"]
        );
        assert_eq!(
            errors(quote::quote!(key = id)),
            vec!["`key` takes a string literal, as in `key = \"order:<id>\"`"]
        );
        assert_eq!(
            errors(quote::quote!(key)),
            vec!["`key` needs a value, as in `key = \"order:<id>\"`"]
        );
        assert_eq!(
            errors(quote::quote!(key = "k", crate = leasehold)),
            vec!["`crate` takes a string literal, as in `crate = \"::leasehold\"`"]
        );
        assert_eq!(
            errors(quote::quote!(key = "k", crate = "not a path")),
            vec![
                "`crate` must name the path of the leasehold crate, as in \"::leasehold\", not \
                 \"not a path\""
            ]
        );
    }

    #[test]
    fn bad_durations() {
        let errors = errors(quote::quote!(
            key = "k",
            ttl = "10x",
            wait = "10M",
            at_least = "0s"
        ));
        assert_eq!(errors.len(), 3);
        assert!(errors[0].starts_with("invalid `ttl` duration \"10x\": unknown unit `x`"));
        assert!(errors[1].starts_with("invalid `wait` duration \"10M\""));
        assert!(errors[2].starts_with("invalid `at_least` duration \"0s\""));
    }

    #[test]
    fn missing_comma() {
        assert_eq!(
            errors(quote::quote!(key = "k" ttl = "1s")),
            vec!["expected `,` between options"]
        );
        assert_eq!(errors(quote::quote!(key = "k" "j", renew)).len(), 1);
    }

    #[test]
    fn client_needs_an_expression() {
        assert_eq!(errors(quote::quote!(key = "k", client =)).len(), 1);
        assert_eq!(errors(quote::quote!(key = "k", client = , renew)).len(), 1);
        assert_eq!(errors(quote::quote!(key = "k", client)).len(), 1);
    }

    #[test]
    fn every_error_is_reported() {
        let errors = errors(quote::quote!(
            ttl = "10x",
            foo,
            renew = yes,
            wait = "1d",
            wait = "1s",
            bar = 1,
        ));
        assert_eq!(errors.len(), 7, "{errors:#?}");
        assert!(errors[6].starts_with("missing option `key`"));
    }

    #[test]
    fn max_hold() {
        let args = parse(quote::quote!(key = "k", renew, max_hold = "10m"));
        assert!(args.errors.is_empty());
        assert_eq!(args.max_hold.map(|d| d.millis), Some(600_000));
        assert_eq!(
            errors(quote::quote!(
                key = "k",
                renew,
                max_hold = "1m",
                max_hold = "2m"
            )),
            vec!["duplicate option `max_hold`: give each option at most once"]
        );
        let zero = errors(quote::quote!(key = "k", renew, max_hold = "0s"));
        assert_eq!(zero.len(), 1);
        assert!(
            zero[0].starts_with(
                "invalid `max_hold` duration \"0s\": the duration must be greater than zero"
            ),
            "{zero:?}"
        );
        assert_eq!(
            errors(quote::quote!(key = "k", max_hold = "10m")),
            vec![
                "`max_hold` limits renewal, so it needs `renew`: without `renew` the lease \
                 already ends after `ttl`"
            ]
        );
        assert_eq!(
            errors(quote::quote!(key = "k", renew, max_hold = 10)),
            vec!["`max_hold` takes a string literal, with a unit, as in `max_hold = \"10s\"`"]
        );
    }

    #[test]
    fn every() {
        let args = parse(quote::quote!(key = "k", every = "1m", renew));
        assert!(args.errors.is_empty());
        assert_eq!(args.every.map(|d| d.millis), Some(60_000));
        assert_eq!(
            errors(quote::quote!(key = "k", every = "1500ms")),
            vec![
                "`every` must be a whole number of seconds, as in `every = \"1m\"` or \
                 `every = \"90s\"`: a slot is named by its start in unix seconds"
            ]
        );
        assert_eq!(
            errors(quote::quote!(key = "k", every = "1m", at_least = "10s")),
            vec![
                "`at_least` cannot be combined with `every`: `every` already keeps the key \
                 until the end of the slot"
            ]
        );
        let wait = errors(quote::quote!(key = "k", every = "1m", wait = "10s"));
        assert_eq!(wait.len(), 1);
        assert!(
            wait[0].starts_with("`wait` cannot be combined with `every`"),
            "{wait:?}"
        );
        assert_eq!(
            errors(quote::quote!(key = "k", every = "1m", every = "2m")).len(),
            1
        );
        assert_eq!(errors(quote::quote!(key = "k", every = "0s")).len(), 1);
        assert_eq!(errors(quote::quote!(key = "k", every = "8761h")).len(), 1);
    }

    #[test]
    fn cron() {
        let args = parse(quote::quote!(key = "k", cron = "0 0 3 * * *", renew));
        assert!(args.errors.is_empty());
        assert_eq!(
            args.cron.map(|c| c.expression.value()).as_deref(),
            Some("0 0 3 * * *")
        );
        let bad = errors(quote::quote!(key = "k", cron = "0 3 * * *"));
        assert_eq!(bad.len(), 1);
        assert!(bad[0].starts_with("invalid `cron` expression"), "{bad:?}");
        assert_eq!(
            errors(quote::quote!(key = "k", cron = 3)),
            vec!["`cron` takes a string literal, as in `cron = \"0 0 3 * * *\"`"]
        );
        assert_eq!(
            errors(quote::quote!(
                key = "k",
                cron = "* * * * * *",
                at_least = "10s"
            )),
            vec![
                "`at_least` cannot be combined with `cron`: `cron` already keeps the key until \
                 the next fire"
            ]
        );
        let wait = errors(quote::quote!(key = "k", cron = "* * * * * *", wait = "1s"));
        assert_eq!(wait.len(), 1);
        assert!(
            wait[0].starts_with("`wait` cannot be combined with `cron`"),
            "{wait:?}"
        );
        assert_eq!(
            errors(quote::quote!(key = "k", every = "1m", cron = "* * * * * *")),
            vec![
                "`every` cannot be combined with `cron`: the schedule is either a fixed period \
                 or a cron expression"
            ]
        );
        assert_eq!(
            errors(quote::quote!(
                key = "k",
                cron = "* * * * * *",
                cron = "@daily"
            ))
            .len(),
            1
        );
    }

    #[test]
    fn trailing_comma() {
        assert!(parse(quote::quote!(key = "k",)).errors.is_empty());
    }
}
