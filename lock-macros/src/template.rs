//! Key templates: `"order:<order.id>"`.
//!
//! Literal text with `<name>` / `<name.field.field>` placeholders; `<<` and `>>`
//! stand for a literal `<` and `>`. Each placeholder names a parameter of the
//! function (or `self`) and is formatted with `Display` when the function is called.

use std::fmt;

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote_spanned};
use syn::{FnArg, Ident, Index, LitStr, Member, Pat, Signature};

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    /// Literal text, with `<<` / `>>` already turned into `<` / `>`.
    Text(String),
    Placeholder(Placeholder),
    /// `{...}`: the text between the braces. Never valid in a key (`}` is not
    /// allowed), kept so that [`check`] can say what was meant: a placeholder
    /// in `format!` style (`{id}`), or a Redis Cluster hash tag (`{user}`).
    Braced(String),
}

/// `<root.field.field>`
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placeholder {
    /// A parameter name, or `self`.
    pub root: String,
    pub fields: Vec<Field>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Field {
    /// `.name`
    Named(String),
    /// `.0` (tuple structs and tuples)
    Index(u32),
}

impl fmt::Display for Placeholder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{}", self.root)?;
        for field in &self.fields {
            match field {
                Field::Named(name) => write!(f, ".{name}")?,
                Field::Index(index) => write!(f, ".{index}")?,
            }
        }
        f.write_str(">")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TemplateError {
    /// `""`
    EmptyKey,
    /// `"a:<id"`: the rest of the key from the `<` on.
    Unclosed { rest: String },
    /// `"a:<>"`
    EmptyPlaceholder,
    /// `"a>b"`
    StrayClose,
    /// `"a}b"`: lock keys cannot contain `}` (the Redis keys of a lock wrap its
    /// name in a `{...}` hash tag, so that they live in one Redis Cluster slot).
    /// `{...}` with its opening brace is a [`Segment::Braced`] instead.
    CloseBrace,
    /// `"<a b>"`, `"<a..b>"`, `"<1a>"`: the text between the brackets, and why.
    InvalidPlaceholder { text: String, reason: &'static str },
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TemplateError::EmptyKey => f.write_str("the key must not be empty"),
            TemplateError::Unclosed { rest } => write!(
                f,
                "unclosed placeholder `{rest}`: add the closing `>`, or write `<<` for a literal `<`"
            ),
            TemplateError::EmptyPlaceholder => f.write_str(
                "empty placeholder `<>`: name a parameter, as in `<id>`, or write `<<>>` for a literal `<>`",
            ),
            TemplateError::StrayClose => f.write_str(
                "unmatched `>`: write `>>` for a literal `>`",
            ),
            TemplateError::CloseBrace => f.write_str(HASH_TAG),
            TemplateError::InvalidPlaceholder { text, reason } => write!(
                f,
                "invalid placeholder `<{text}>`: {reason}; a placeholder is a parameter name or `self`, \
                 optionally followed by fields, as in `<order.id>`"
            ),
        }
    }
}

/// Why a key cannot contain `}`.
const HASH_TAG: &str =
    "a lock key cannot contain `}` (leasehold wraps keys in a Redis Cluster hash tag `{...}`)";

/// Parses a key template.
pub(crate) fn parse(template: &str) -> Result<Vec<Segment>, TemplateError> {
    if template.is_empty() {
        return Err(TemplateError::EmptyKey);
    }
    let mut segments = Vec::new();
    let mut text = String::new();
    let mut rest = template;
    while let Some(c) = rest.chars().next() {
        match c {
            '<' if rest.starts_with("<<") => {
                text.push('<');
                rest = &rest[2..];
            }
            '<' => {
                let Some(end) = rest.find('>') else {
                    return Err(TemplateError::Unclosed {
                        rest: rest.to_owned(),
                    });
                };
                let inner = &rest[1..end];
                let placeholder = parse_placeholder(inner)?;
                if !text.is_empty() {
                    segments.push(Segment::Text(std::mem::take(&mut text)));
                }
                segments.push(Segment::Placeholder(placeholder));
                rest = &rest[end + 1..];
            }
            '>' if rest.starts_with(">>") => {
                text.push('>');
                rest = &rest[2..];
            }
            '>' => return Err(TemplateError::StrayClose),
            '{' => match rest.find('}') {
                Some(end) => {
                    if !text.is_empty() {
                        segments.push(Segment::Text(std::mem::take(&mut text)));
                    }
                    segments.push(Segment::Braced(rest[1..end].to_owned()));
                    rest = &rest[end + 1..];
                }
                // A lone `{` is ordinary text.
                None => {
                    text.push('{');
                    rest = &rest[1..];
                }
            },
            '}' => return Err(TemplateError::CloseBrace),
            c => {
                text.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    if !text.is_empty() {
        segments.push(Segment::Text(text));
    }
    Ok(segments)
}

fn parse_placeholder(inner: &str) -> Result<Placeholder, TemplateError> {
    let invalid = |reason| TemplateError::InvalidPlaceholder {
        text: inner.to_owned(),
        reason,
    };
    if inner.is_empty() {
        return Err(TemplateError::EmptyPlaceholder);
    }
    if inner.chars().any(char::is_whitespace) {
        return Err(invalid("whitespace is not allowed"));
    }
    let mut parts = inner.split('.');
    let root = parts.next().unwrap_or_default();
    if root.is_empty() {
        return Err(invalid("it must start with a name"));
    }
    let root = match root.strip_prefix("r#") {
        Some(raw) if is_identifier(raw) && !is_path_keyword(raw) => raw,
        Some(_) => return Err(invalid("`r#` must be followed by a name")),
        None if is_identifier(root) => root,
        None => {
            return Err(invalid(
                "a name is made of ASCII letters, digits and `_`, not starting with a digit",
            ));
        }
    };
    let mut fields = Vec::new();
    for part in parts {
        if part.is_empty() {
            return Err(invalid("a field name is missing after a `.`"));
        }
        if part.bytes().all(|b| b.is_ascii_digit()) {
            if part.len() > 1 && part.starts_with('0') {
                return Err(invalid("a tuple index has no leading zero"));
            }
            let index = part
                .parse()
                .map_err(|_| invalid("the tuple index is too large"))?;
            fields.push(Field::Index(index));
        } else if let Some(name) = field_name(part) {
            fields.push(Field::Named(name.to_owned()));
        } else {
            return Err(invalid(
                "a field is a name made of ASCII letters, digits and `_`, or a tuple index",
            ));
        }
    }
    Ok(Placeholder {
        root: root.to_owned(),
        fields,
    })
}

/// A field name, `name` or `r#name`, without the `r#`.
fn field_name(part: &str) -> Option<&str> {
    let name = part.strip_prefix("r#").unwrap_or(part);
    (is_identifier(name) && !is_path_keyword(name)).then_some(name)
}

/// Keywords that cannot be raw identifiers, nor fields.
fn is_path_keyword(name: &str) -> bool {
    matches!(name, "self" | "Self" | "super" | "crate")
}

/// An ASCII identifier other than `_`.
fn is_identifier(s: &str) -> bool {
    let mut bytes = s.bytes();
    match bytes.next() {
        Some(b) if b.is_ascii_alphabetic() || b == b'_' => {}
        _ => return false,
    }
    s != "_" && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The names a placeholder may use: the function's receiver, its parameters and
/// the bindings of parameters written as patterns (`Path(id): Path<u64>` binds
/// `id`), and with `every`, the schedule slot.
pub(crate) struct Params {
    fn_name: String,
    receiver: bool,
    /// Names bound by the parameters (`x: T`, `mut x: T`, `Path(x): Path<T>`,
    /// `Point { x, y }: Point`, `(a, b): (T, U)`), by their unraw name.
    named: Vec<(String, Ident)>,
    /// Parameters that bind no name a key can use (`_: T`, `Path(_): Path<T>`,
    /// macro patterns), as written.
    unnamed: Vec<String>,
    /// With `every` or `cron`: the local holding the schedule slot, named by `<slot>`.
    slot: Option<Ident>,
}

impl Params {
    pub(crate) fn of(sig: &Signature) -> Params {
        let mut params = Params {
            fn_name: sig.ident.to_string(),
            receiver: false,
            named: Vec::new(),
            unnamed: Vec::new(),
            slot: None,
        };
        for input in &sig.inputs {
            match input {
                FnArg::Receiver(_) => params.receiver = true,
                FnArg::Typed(typed) => {
                    let mut names = Vec::new();
                    if bindings(&typed.pat, &mut names) && !names.is_empty() {
                        params.named.extend(names.into_iter().map(|ident| {
                            let name = syn::ext::IdentExt::unraw(&ident).to_string();
                            (name, ident)
                        }));
                    } else {
                        params.unnamed.push(compact(&typed.pat.to_token_stream()));
                    }
                }
            }
        }
        params
    }

    /// With `every` or `cron`: `<slot>` names the schedule slot held in `local`.
    pub(crate) fn with_slot(mut self, local: Ident) -> Params {
        self.slot = Some(local);
        self
    }

    fn binding(&self, name: &str) -> Option<&Ident> {
        self.named
            .iter()
            .find(|(bound, _)| bound == name)
            .map(|(_, ident)| ident)
    }

    fn describe(&self) -> String {
        let mut names: Vec<String> = Vec::new();
        if self.receiver {
            names.push("`self`".to_owned());
        }
        names.extend(self.named.iter().map(|(name, _)| format!("`{name}`")));
        let mut text = if names.is_empty() {
            format!("`{}` has no parameter that a key can name", self.fn_name)
        } else {
            format!(
                "the parameters of `{}` are {}",
                self.fn_name,
                names.join(", ")
            )
        };
        if self.slot.is_some() {
            text.push_str("; with `every` or `cron`, `<slot>` is the schedule slot");
        }
        if let Some(pattern) = self.unnamed.first() {
            text.push_str(&format!(
                "; the parameter `{pattern}` binds no name that a key can use: to use it, bind \
                 it to a name, as in `Path(id): Path<u64>` with `<id>`, or `order: Order` with \
                 `<order.id>`"
            ));
        }
        text
    }
}

/// Collects the names bound by `pat` into `out`. `false` when the pattern has
/// parts whose bindings cannot be known (a macro), so that none are offered.
fn bindings(pat: &Pat, out: &mut Vec<Ident>) -> bool {
    match pat {
        Pat::Ident(pat) => {
            out.push(pat.ident.clone());
            match &pat.subpat {
                Some((_, sub)) => bindings(sub, out),
                None => true,
            }
        }
        Pat::Tuple(tuple) => tuple.elems.iter().all(|p| bindings(p, out)),
        Pat::TupleStruct(tuple) => tuple.elems.iter().all(|p| bindings(p, out)),
        Pat::Struct(pat) => pat.fields.iter().all(|field| bindings(&field.pat, out)),
        Pat::Slice(slice) => slice.elems.iter().all(|p| bindings(p, out)),
        Pat::Reference(reference) => bindings(&reference.pat, out),
        Pat::Paren(paren) => bindings(&paren.pat, out),
        Pat::Type(typed) => bindings(&typed.pat, out),
        // Every alternative binds the same names: the first one says which.
        Pat::Or(or) => or.cases.first().is_none_or(|p| bindings(p, out)),
        Pat::Wild(_)
        | Pat::Rest(_)
        | Pat::Lit(_)
        | Pat::Range(_)
        | Pat::Path(_)
        | Pat::Const(_) => true,
        _ => false,
    }
}

/// Tokens as a person would write them: `Path(_)`, not `Path (_)`.
fn compact(tokens: &TokenStream) -> String {
    let mut text = tokens.to_string();
    for (from, to) in [
        (" (", "("),
        ("( ", "("),
        (" )", ")"),
        (" ,", ","),
        (" {", " {"),
    ] {
        text = text.replace(from, to);
    }
    text
}

/// A checked key template, ready to expand.
pub(crate) struct Key {
    lit: LitStr,
    segments: Vec<Segment>,
    /// The expression of each placeholder, in order.
    args: Vec<TokenStream>,
}

/// Parses `lit` as a key template and resolves its placeholders against `params`.
/// All problems are reported at the literal.
pub(crate) fn check(lit: &LitStr, params: &Params) -> syn::Result<Key> {
    let value = lit.value();
    let segments =
        parse(&value).map_err(|err| syn::Error::new(lit.span(), format!("invalid key: {err}")))?;
    let mut errors: Option<syn::Error> = None;
    let mut args = Vec::new();
    for segment in &segments {
        let result = match segment {
            Segment::Text(_) => continue,
            Segment::Placeholder(placeholder) => resolve(placeholder, params, lit.span()),
            Segment::Braced(inner) => Err(braced(inner, params)),
        };
        match result {
            Ok(arg) => args.push(arg),
            Err(message) => {
                let error = syn::Error::new(lit.span(), message);
                match &mut errors {
                    Some(errors) => errors.combine(error),
                    None => errors = Some(error),
                }
            }
        }
    }
    let mut segments = segments;
    if let Some(slot) = &params.slot {
        let named = segments
            .iter()
            .any(|s| matches!(s, Segment::Placeholder(p) if p.root == "slot"));
        if !named {
            // `every` without `<slot>` in the key: `<key>:<slot>`.
            segments.push(Segment::Text(":".to_owned()));
            segments.push(Segment::Placeholder(Placeholder {
                root: "slot".to_owned(),
                fields: Vec::new(),
            }));
            args.push(quote_spanned! {lit.span()=> #slot.id() });
        }
    }
    match errors {
        Some(errors) => Err(errors),
        None => Ok(Key {
            lit: lit.clone(),
            segments,
            args,
        }),
    }
}

/// Why `{inner}` is not allowed in a key, saying what was probably meant: a
/// placeholder in the `format!` habit (`{id}`, `{order.id}`, `{id:?}`, `{}`),
/// or else a Redis Cluster hash tag, which leasehold adds itself.
fn braced(inner: &str, params: &Params) -> String {
    let (name, options) = match inner.split_once(':') {
        Some((name, options)) => (name, Some(options)),
        None => (inner, None),
    };
    if name.is_empty() || name.bytes().all(|b| b.is_ascii_digit()) {
        // `{}`, `{0}`, `{:?}`: positional arguments of `format!`.
        return format!(
            "invalid key: `{{{inner}}}` is `format!` syntax; a key names a parameter in a \
             placeholder written `<name>`, as in `<id>`: {}",
            params.describe()
        );
    }
    let Ok(placeholder) = parse_placeholder(name) else {
        return format!("invalid key: `{{{inner}}}`: {HASH_TAG}");
    };
    let options = match options {
        Some(_) => " (a placeholder is formatted with `Display`, it takes no format options)",
        None => "",
    };
    match resolve(&placeholder, params, Span::call_site()) {
        Ok(_) => format!(
            "invalid key: placeholders are written `{placeholder}`, not `{{{inner}}}`{options}"
        ),
        Err(unresolved) => format!(
            "invalid key: placeholders are written `{placeholder}`, not `{{{inner}}}`{options}, \
             but {unresolved}; and if `{{{inner}}}` is meant as a Redis Cluster hash tag, \
             leave it out: leasehold wraps every key in one"
        ),
    }
}

/// The expression that a placeholder stands for, spanned at the key literal so that
/// a missing `Display` impl is reported there.
fn resolve(placeholder: &Placeholder, params: &Params, span: Span) -> Result<TokenStream, String> {
    let mut expr = if placeholder.root == "self" {
        if !params.receiver {
            return Err(format!(
                "placeholder `{placeholder}` names `self`, but `{}` has no `self` parameter; {}",
                params.fn_name,
                params.describe()
            ));
        }
        syn::token::SelfValue { span }.into_token_stream()
    } else if let (true, Some(slot)) = (placeholder.root == "slot", &params.slot) {
        if !placeholder.fields.is_empty() {
            return Err(format!(
                "placeholder `{placeholder}`: `<slot>` is the schedule slot of `every` or `cron` \
                 (its start in unix seconds) and has no fields; write `<slot>`"
            ));
        }
        if params.binding("slot").is_some() {
            return Err(format!(
                "placeholder `<slot>` is ambiguous: with `every` or `cron` it is the schedule \
                 slot, but \
                 `{}` also has a parameter `slot`; rename the parameter",
                params.fn_name
            ));
        }
        return Ok(quote_spanned! {span=> #slot.id() });
    } else {
        let Some(ident) = params.binding(&placeholder.root) else {
            let hint = if placeholder.root == "slot" {
                " (`<slot>` names the schedule slot only with `every = \"1m\"` or `cron = \"…\"`)"
            } else {
                ""
            };
            return Err(format!(
                "placeholder `{placeholder}` names no parameter of `{}`{hint}; {}",
                params.fn_name,
                params.describe()
            ));
        };
        let mut ident = ident.clone();
        ident.set_span(span);
        ident.into_token_stream()
    };
    // Fields are named with the macro's hygiene (which resolves fields as the
    // user's code would) at the key literal: rustc then reports a misspelt
    // field there without its "similar name" suggestion, which would replace
    // the whole literal with the field's name.
    let span = Span::mixed_site().located_at(span);
    for field in &placeholder.fields {
        let member = match field {
            Field::Named(name) => {
                // Keywords (`type`, `match`, ...) need a raw identifier.
                let ident = if syn::parse_str::<Ident>(name).is_ok() {
                    Ident::new(name, span)
                } else {
                    Ident::new_raw(name, span)
                };
                Member::Named(ident)
            }
            Field::Index(index) => Member::Unnamed(Index {
                index: *index,
                span,
            }),
        };
        expr = quote_spanned! {span=> #expr.#member };
    }
    Ok(expr)
}

impl Key {
    /// The key expression: the literal itself when there is no placeholder (no
    /// allocation, no `format!`), else `::std::format!("text{}", arg, ..)`.
    pub(crate) fn to_tokens(&self) -> TokenStream {
        let span = self.lit.span();
        if self.args.is_empty() {
            let mut text = String::new();
            for segment in &self.segments {
                if let Segment::Text(t) = segment {
                    text.push_str(t);
                }
            }
            return LitStr::new(&text, span).into_token_stream();
        }
        let mut format = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Text(t) => format.push_str(&t.replace('{', "{{").replace('}', "}}")),
                Segment::Placeholder(_) => format.push_str("{}"),
                // Rejected by `check`, which made this `Key`.
                Segment::Braced(inner) => format.push_str(&format!("{{{{{inner}}}}}")),
            }
        }
        let format = LitStr::new(&format, span);
        let args = &self.args;
        quote_spanned! {span=> ::std::format!(#format, #(#args),*) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Vec<Segment> {
        match parse(s) {
            Ok(segments) => segments,
            Err(e) => panic!("{s:?} should parse, got {e}"),
        }
    }

    fn err(s: &str) -> TemplateError {
        match parse(s) {
            Ok(segments) => panic!("{s:?} should be rejected, got {segments:?}"),
            Err(e) => e,
        }
    }

    fn text(s: &str) -> Segment {
        Segment::Text(s.to_owned())
    }

    fn ph(root: &str, fields: &[&str]) -> Segment {
        Segment::Placeholder(Placeholder {
            root: root.to_owned(),
            fields: fields
                .iter()
                .map(|f| match f.parse() {
                    Ok(i) => Field::Index(i),
                    Err(_) => Field::Named((*f).to_owned()),
                })
                .collect(),
        })
    }

    fn invalid_text(s: &str) -> String {
        match err(s) {
            TemplateError::InvalidPlaceholder { text, .. } => text,
            e => panic!("{s:?}: expected an invalid placeholder, got {e:?}"),
        }
    }

    #[test]
    fn plain_text() {
        assert_eq!(ok("report"), vec![text("report")]);
        assert_eq!(ok("a:b:c"), vec![text("a:b:c")]);
        assert_eq!(ok("clé:été"), vec![text("clé:été")]);
        assert_eq!(ok("with space"), vec![text("with space")]);
        assert_eq!(ok("{brace"), vec![text("{brace")]);
    }

    #[test]
    fn placeholders() {
        assert_eq!(ok("draw:<date>"), vec![text("draw:"), ph("date", &[])]);
        assert_eq!(ok("<id>"), vec![ph("id", &[])]);
        assert_eq!(
            ok("order:<order.id>:x"),
            vec![text("order:"), ph("order", &["id"]), text(":x")]
        );
        assert_eq!(ok("<a.b.c>"), vec![ph("a", &["b", "c"])]);
        assert_eq!(ok("<self.id>"), vec![ph("self", &["id"])]);
        assert_eq!(ok("<self>"), vec![ph("self", &[])]);
        assert_eq!(ok("<pair.0>"), vec![ph("pair", &["0"])]);
        assert_eq!(ok("<pair.10.x>"), vec![ph("pair", &["10", "x"])]);
        assert_eq!(ok("<_id>"), vec![ph("_id", &[])]);
        assert_eq!(ok("<a1_b2>"), vec![ph("a1_b2", &[])]);
        assert_eq!(ok("<x.type>"), vec![ph("x", &["type"])]);
        assert_eq!(ok("<x.r#type>"), vec![ph("x", &["type"])]);
        assert_eq!(ok("<r#type>"), vec![ph("type", &[])]);
        assert_eq!(ok("<a><b>"), vec![ph("a", &[]), ph("b", &[])]);
        assert_eq!(
            ok("<a>:<b>:"),
            vec![ph("a", &[]), text(":"), ph("b", &[]), text(":")]
        );
    }

    #[test]
    fn escapes() {
        assert_eq!(ok("<<"), vec![text("<")]);
        assert_eq!(ok(">>"), vec![text(">")]);
        assert_eq!(ok("a<<b>>c"), vec![text("a<b>c")]);
        assert_eq!(ok("<<<id>>>"), vec![text("<"), ph("id", &[]), text(">")]);
        assert_eq!(ok("<<>>"), vec![text("<>")]);
        assert_eq!(ok("<<<<"), vec![text("<<")]);
        assert_eq!(ok("x<<id>>"), vec![text("x<id>")]);
    }

    #[test]
    fn rejects_empty_key() {
        assert_eq!(err(""), TemplateError::EmptyKey);
    }

    #[test]
    fn rejects_unclosed() {
        assert_eq!(err("a:<id"), TemplateError::Unclosed { rest: "<id".into() });
        assert_eq!(err("<"), TemplateError::Unclosed { rest: "<".into() });
        assert_eq!(err("<a><"), TemplateError::Unclosed { rest: "<".into() });
        assert_eq!(err("<<<a"), TemplateError::Unclosed { rest: "<a".into() });
    }

    #[test]
    fn rejects_empty_placeholder() {
        assert_eq!(err("<>"), TemplateError::EmptyPlaceholder);
        assert_eq!(err("a:<>:b"), TemplateError::EmptyPlaceholder);
    }

    #[test]
    fn rejects_stray_close() {
        assert_eq!(err(">"), TemplateError::StrayClose);
        assert_eq!(err("a>b"), TemplateError::StrayClose);
        assert_eq!(err("<a>>"), TemplateError::StrayClose);
        assert_eq!(err(">>>"), TemplateError::StrayClose);
    }

    #[test]
    fn rejects_close_brace() {
        assert_eq!(err("}"), TemplateError::CloseBrace);
        assert_eq!(err("<a>}"), TemplateError::CloseBrace);
        assert_eq!(err("a:{b}}"), TemplateError::CloseBrace);
    }

    #[test]
    fn braces_are_kept_for_check_to_explain() {
        let braced = |s: &str| Segment::Braced(s.to_owned());
        assert_eq!(ok("a:{b}"), vec![text("a:"), braced("b")]);
        assert_eq!(ok("{}:{x.y}"), vec![braced(""), text(":"), braced("x.y")]);
        assert_eq!(ok("{<a>}"), vec![braced("<a>")]);
        assert_eq!(ok("{a"), vec![text("{a")]);
    }

    #[test]
    fn rejects_invalid_placeholders() {
        for (input, inner) in [
            ("<a b>", "a b"),
            ("< a>", " a"),
            ("<a.>", "a."),
            ("<.a>", ".a"),
            ("<a..b>", "a..b"),
            ("<1a>", "1a"),
            ("<1>", "1"),
            ("<_>", "_"),
            ("<a-b>", "a-b"),
            ("<a<b>", "a<b"),
            ("<été>", "été"),
            ("<a.b-c>", "a.b-c"),
            ("<a.01>", "a.01"),
            ("<a.99999999999>", "a.99999999999"),
            ("<a.self>", "a.self"),
            ("<a.Self>", "a.Self"),
            ("<a.super>", "a.super"),
            ("<a.crate>", "a.crate"),
            ("<a._>", "a._"),
            ("<a.b()>", "a.b()"),
            ("<a[0]>", "a[0]"),
            ("<a:b>", "a:b"),
            ("<r#>", "r#"),
            ("<r#1>", "r#1"),
            ("<r#crate>", "r#crate"),
            ("<r#self>", "r#self"),
            ("<a.r#self>", "a.r#self"),
            ("<a#b>", "a#b"),
        ] {
            assert_eq!(invalid_text(input), inner, "{input}");
        }
    }

    #[test]
    fn messages_name_the_problem() {
        assert!(err("a:<id").to_string().contains("`<id`"));
        assert!(err("<a b>").to_string().contains("`<a b>`"));
        assert!(err(">").to_string().contains("`>>`"));
        assert!(err("<>").to_string().contains("`<>`"));
    }

    #[test]
    fn placeholder_display_round_trips() {
        for s in ["<a>", "<self.id>", "<a.b.c>", "<p.0.x>"] {
            match &ok(s)[..] {
                [Segment::Placeholder(p)] => assert_eq!(p.to_string(), s),
                other => panic!("{other:?}"),
            }
        }
    }

    fn sig(s: &str) -> Signature {
        match syn::parse_str(s) {
            Ok(sig) => sig,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    fn key(template: &str, signature: &str) -> syn::Result<Key> {
        let lit = LitStr::new(template, Span::call_site());
        check(&lit, &Params::of(&sig(signature)))
    }

    fn expansion(template: &str, signature: &str) -> String {
        match key(template, signature) {
            Ok(key) => key.to_tokens().to_string(),
            Err(e) => panic!("{template}: {e}"),
        }
    }

    fn rejection(template: &str, signature: &str) -> Vec<String> {
        match key(template, signature) {
            Ok(key) => panic!("{template}: accepted as {}", key.to_tokens()),
            Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn literal_keys_are_passed_as_literals() {
        assert_eq!(expansion("report", "async fn f()"), "\"report\"");
        assert_eq!(expansion("a<<b>>", "async fn f()"), "\"a<b>\"");
        assert_eq!(expansion("{x", "async fn f()"), "\"{x\"");
    }

    #[test]
    fn placeholder_keys_are_formatted() {
        assert_eq!(
            expansion("draw:<date>", "async fn f(date: u32)"),
            ":: std :: format ! (\"draw:{}\" , date)"
        );
        assert_eq!(
            expansion(
                "o:<order.id>:<self.shard>",
                "async fn f(&self, order: &Order)"
            ),
            ":: std :: format ! (\"o:{}:{}\" , order . id , self . shard)"
        );
        assert_eq!(
            expansion("{<a.0>", "async fn f(mut a: (u32,))"),
            ":: std :: format ! (\"{{{}\" , a . 0)"
        );
        assert_eq!(
            expansion("<x.type>", "async fn f(x: X)"),
            ":: std :: format ! (\"{}\" , x . r#type)"
        );
        assert_eq!(
            expansion("<type>", "async fn f(r#type: u8)"),
            ":: std :: format ! (\"{}\" , r#type)"
        );
        assert_eq!(
            expansion("<<<a>>>", "async fn f(a: impl Display)"),
            ":: std :: format ! (\"<{}>\" , a)"
        );
    }

    #[test]
    fn unknown_placeholders_list_the_parameters() {
        let errors = rejection("x:<nope.id>", "async fn job(&self, date: u32, user: User)");
        assert_eq!(
            errors,
            vec![
                "placeholder `<nope.id>` names no parameter of `job`; \
                 the parameters of `job` are `self`, `date`, `user`"
            ]
        );
    }

    #[test]
    fn every_unknown_placeholder_is_reported() {
        let errors = rejection("<a>:<b>:<c>", "async fn f(b: u8)");
        assert_eq!(errors.len(), 2);
        assert!(errors[0].contains("`<a>`"));
        assert!(errors[1].contains("`<c>`"));
    }

    #[test]
    fn self_needs_a_receiver() {
        let errors = rejection("<self.id>", "async fn f(id: u8)");
        assert_eq!(
            errors,
            vec![
                "placeholder `<self.id>` names `self`, but `f` has no `self` parameter; \
                 the parameters of `f` are `id`"
            ]
        );
    }

    #[test]
    fn bindings_of_patterns_can_be_named() {
        assert_eq!(
            expansion("refund:<id>", "async fn refund(Path(id): Path<u64>)"),
            ":: std :: format ! (\"refund:{}\" , id)"
        );
        assert_eq!(
            expansion("<a>:<b>", "async fn f((a, b): (u8, u8))"),
            ":: std :: format ! (\"{}:{}\" , a , b)"
        );
        assert_eq!(
            expansion(
                "<x>:<y>:<z>",
                "async fn f(Point { x, y: ref y, .. }: Point, mut z: u8)"
            ),
            ":: std :: format ! (\"{}:{}:{}\" , x , y , z)"
        );
        assert_eq!(
            expansion(
                "<user.id>:<n>:<m>",
                "async fn f(State(Ctx { user, counts: (n, _) }): State<Ctx>, &m: &u8, [_, o]: [u8; 2])"
            ),
            ":: std :: format ! (\"{}:{}:{}\" , user . id , n , m)"
        );
        assert_eq!(
            expansion("<whole>:<inner>", "async fn f(whole @ Wrap(inner): Wrap)"),
            ":: std :: format ! (\"{}:{}\" , whole , inner)"
        );
        // A pattern parameter is fine as long as the key does not name it.
        assert_eq!(
            expansion("<c>", "async fn f(_: u8, Path(_): Path<u8>, c: u8)"),
            ":: std :: format ! (\"{}\" , c)"
        );
    }

    #[test]
    fn patterns_without_names_say_how_to_bind_them() {
        let errors = rejection("refund:<id>", "async fn refund(Path(_): Path<u64>)");
        assert_eq!(
            errors,
            vec![
                "placeholder `<id>` names no parameter of `refund`; `refund` has no parameter \
                 that a key can name; the parameter `Path(_)` binds no name that a key can use: \
                 to use it, bind it to a name, as in `Path(id): Path<u64>` with `<id>`, or \
                 `order: Order` with `<order.id>`"
            ]
        );
        let errors = rejection("<x>", "async fn f(n: u8, _: u8, m!(x): u8)");
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with(
                "placeholder `<x>` names no parameter of `f`; the parameters of `f` are `n`; \
                 the parameter `_` binds no name"
            ),
            "{errors:?}"
        );
    }

    fn slot_key(template: &str, signature: &str) -> syn::Result<Key> {
        let lit = LitStr::new(template, Span::call_site());
        let params =
            Params::of(&sig(signature)).with_slot(Ident::new("slot_var", Span::call_site()));
        check(&lit, &params)
    }

    #[test]
    fn every_appends_or_places_the_slot() {
        let render = |template: &str, signature: &str| match slot_key(template, signature) {
            Ok(key) => key.to_tokens().to_string(),
            Err(e) => panic!("{template}: {e}"),
        };
        assert_eq!(
            render("report", "async fn f()"),
            ":: std :: format ! (\"report:{}\" , slot_var . id ())"
        );
        assert_eq!(
            render("report:<slot>:<n>", "async fn f(n: u8)"),
            ":: std :: format ! (\"report:{}:{}\" , slot_var . id () , n)"
        );
        let errors = |template: &str, signature: &str| match slot_key(template, signature) {
            Ok(key) => panic!("{template}: accepted as {}", key.to_tokens()),
            Err(e) => e.into_iter().map(|e| e.to_string()).collect::<Vec<_>>(),
        };
        assert_eq!(
            errors("r:<slot>", "async fn f(slot: u8)"),
            vec![
                "placeholder `<slot>` is ambiguous: with `every` or `cron` it is the schedule \
                 slot, but `f` also has a parameter `slot`; rename the parameter"
            ]
        );
        assert_eq!(errors("r:<slot.x>", "async fn f()").len(), 1);
        assert_eq!(
            errors("r:<nope>", "async fn f(n: u8)"),
            vec![
                "placeholder `<nope>` names no parameter of `f`; the parameters of `f` are `n`; \
                 with `every` or `cron`, `<slot>` is the schedule slot"
            ]
        );
        // Without `every`, `<slot>` is an ordinary placeholder.
        assert_eq!(
            rejection("r:<slot>", "async fn f(n: u8)"),
            vec![
                "placeholder `<slot>` names no parameter of `f` (`<slot>` names the schedule \
                 slot only with `every = \"1m\"` or `cron = \"…\"`); the parameters of `f` are `n`"
            ]
        );
        assert_eq!(
            expansion("r:<slot>", "async fn f(slot: u8)"),
            ":: std :: format ! (\"r:{}\" , slot)"
        );
    }

    /// `{id}`, the `format!` habit, is answered with the placeholder syntax;
    /// every brace group of a key is reported, with the other mistakes.
    #[test]
    fn format_braces_say_how_placeholders_are_written() {
        let sig = "async fn pay(&self, id: u64, order: Order)";
        assert_eq!(
            rejection("order:{id}", sig),
            vec!["invalid key: placeholders are written `<id>`, not `{id}`"]
        );
        assert_eq!(
            rejection("{order.id}:{self}", sig),
            vec![
                "invalid key: placeholders are written `<order.id>`, not `{order.id}`",
                "invalid key: placeholders are written `<self>`, not `{self}`",
            ]
        );
        assert_eq!(
            rejection("o:{id:?}", sig),
            vec![
                "invalid key: placeholders are written `<id>`, not `{id:?}` (a placeholder is \
                 formatted with `Display`, it takes no format options)"
            ]
        );
        assert_eq!(
            rejection("o:{}:{0}", sig),
            vec![
                "invalid key: `{}` is `format!` syntax; a key names a parameter in a placeholder \
                 written `<name>`, as in `<id>`: the parameters of `pay` are `self`, `id`, `order`",
                "invalid key: `{0}` is `format!` syntax; a key names a parameter in a placeholder \
                 written `<name>`, as in `<id>`: the parameters of `pay` are `self`, `id`, `order`",
            ]
        );
        // A name that is no parameter: a placeholder or a hash tag?
        assert_eq!(
            rejection("{user}:cart:<idd>", sig),
            vec![
                "invalid key: placeholders are written `<user>`, not `{user}`, but placeholder \
                 `<user>` names no parameter of `pay`; the parameters of `pay` are `self`, `id`, \
                 `order`; and if `{user}` is meant as a Redis Cluster hash tag, leave it out: \
                 leasehold wraps every key in one",
                "placeholder `<idd>` names no parameter of `pay`; the parameters of `pay` are \
                 `self`, `id`, `order`",
            ]
        );
        // Anything else between braces can only be a hash tag.
        assert_eq!(
            rejection("{user-1}:cart", sig),
            vec![
                "invalid key: `{user-1}`: a lock key cannot contain `}` (leasehold wraps keys in \
                 a Redis Cluster hash tag `{...}`)"
            ]
        );
        // A lone `{` is text.
        assert_eq!(
            expansion("{<id>", sig),
            ":: std :: format ! (\"{{{}\" , id)"
        );
    }

    #[test]
    fn syntax_errors_are_reported_as_invalid_keys() {
        assert_eq!(
            rejection("a:<id", "async fn f(id: u8)"),
            vec![
                "invalid key: unclosed placeholder `<id`: add the closing `>`, or write `<<` \
                 for a literal `<`"
            ]
        );
        assert_eq!(
            rejection("", "async fn f()"),
            vec!["invalid key: the key must not be empty"]
        );
    }
}
