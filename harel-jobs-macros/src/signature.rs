//! The annotated function: parsing it, checking that it can be a job, and taking its
//! parameters apart into the context and the fields of the job struct.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::parse::{Parse, ParseStream};
use syn::visit::Visit;
use syn::{
    Attribute, FnArg, GenericArgument, Ident, Pat, PatType, PathArguments, ReturnType, Signature,
    Type, TypeImplTrait, TypeReference, Visibility, braced, token,
};

use crate::diagnostic::Errors;

/// The parameter attribute that picks the group.
const GROUP: Marker = Marker {
    name: "group",
    no_arguments: "`#[group]` takes no arguments: the group is `\"<kind>:<value>\"`; use `.group(…)` when enqueueing for another one",
};

/// The parameter attribute that picks the fairness key.
const FAIR_KEY: Marker = Marker {
    name: "fair_key",
    no_arguments: "`#[fair_key]` takes no arguments: the fairness key is the parameter's value; use `.fair_key(…)` when enqueueing for another one",
};

/// The last path segment that makes a parameter the job context.
const CONTEXT: &str = "JobContext";

/// A function whose body is kept as tokens, not parsed: cheaper, and an IDE typing inside
/// the body (where the code is often incomplete) still gets the expansion.
pub(crate) struct ItemFn {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) sig: Signature,
    brace: token::Brace,
    body: TokenStream,
}

impl Parse for ItemFn {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        let sig = input.parse()?;
        let content;
        let brace = braced!(content in input);
        let body = content.parse()?;
        Ok(Self {
            attrs,
            vis,
            sig,
            brace,
            body,
        })
    }
}

impl ToTokens for ItemFn {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        tokens.extend(self.attrs.iter().map(ToTokens::to_token_stream));
        self.vis.to_tokens(tokens);
        self.sig.to_tokens(tokens);
        self.brace
            .surround(tokens, |tokens| self.body.to_tokens(tokens));
    }
}

/// A parameter that becomes a field of the job struct.
pub(crate) struct Field {
    pub(crate) ident: Ident,
    pub(crate) ty: Type,
}

/// The function, taken apart. Built even when the signature has errors (they are reported
/// to the caller), so that the function can always be emitted.
pub(crate) struct JobFn {
    /// The function as the user wrote it, less the `#[group]` and `#[fair_key]` attributes.
    pub(crate) item: ItemFn,
    /// `T` of a first parameter `JobContext<T>`.
    pub(crate) state: Option<Type>,
    /// The name of the `JobContext` parameter, if it has one (a plain name), for errors that
    /// name it where a field is expected.
    pub(crate) context: Option<Ident>,
    /// The other parameters, in order.
    pub(crate) fields: Vec<Field>,
    /// The index in `fields` of the `#[group]` parameter.
    pub(crate) group: Option<usize>,
    /// The index in `fields` of the `#[fair_key]` parameter.
    pub(crate) fair_key: Option<usize>,
}

impl JobFn {
    /// Takes `item` apart, recording in `errors` whatever keeps it from being a job.
    pub(crate) fn analyze(mut item: ItemFn, errors: &mut Errors) -> Self {
        check_signature(&item.sig, errors);
        let mut state = None;
        let mut context = None;
        let mut fields = Vec::new();
        let mut group: Option<usize> = None;
        let mut fair_key: Option<usize> = None;
        for (index, input) in item.sig.inputs.iter_mut().enumerate() {
            let param = match input {
                FnArg::Receiver(receiver) => {
                    errors.push(syn::Error::new_spanned(
                        &*receiver,
                        "a #[job] function cannot take `self`: write a free function (the job struct is generated from its parameters)",
                    ));
                    continue;
                }
                FnArg::Typed(param) => param,
            };
            let group_attr = take_marker_attr(param, &GROUP, errors);
            let fair_key_attr = take_marker_attr(param, &FAIR_KEY, errors);
            match context_state(&param.ty) {
                Some(found) => {
                    if let Pat::Ident(pat) = &*param.pat {
                        context.get_or_insert_with(|| pat.ident.clone());
                    }
                    if let Some(attr) = &group_attr {
                        errors.push(syn::Error::new_spanned(
                            &attr.attr,
                            "`#[group]` cannot mark the job context: mark a parameter that is stored in the job",
                        ));
                    }
                    if let Some(attr) = &fair_key_attr {
                        errors.push(syn::Error::new_spanned(
                            &attr.attr,
                            "`#[fair_key]` cannot mark the job context: mark a parameter that is stored in the job",
                        ));
                    }
                    if index != 0 {
                        errors.push(syn::Error::new_spanned(
                            &param.ty,
                            "the `JobContext` parameter must come first",
                        ));
                    } else {
                        match found {
                            Ok(ty) => state = Some(ty),
                            Err(error) => errors.push(error),
                        }
                    }
                }
                None => {
                    let Some(ident) = field_ident(param, errors) else {
                        continue;
                    };
                    check_field_type(&param.ty, errors);
                    if let Some(attr) = group_attr {
                        match group {
                            Some(_) => errors.push(syn::Error::new_spanned(
                                &attr.attr,
                                "only one parameter can be `#[group]`: a job belongs to one group",
                            )),
                            None => group = Some(fields.len()),
                        }
                    }
                    if let Some(attr) = fair_key_attr {
                        match fair_key {
                            Some(_) => errors.push(syn::Error::new_spanned(
                                &attr.attr,
                                "only one parameter can be `#[fair_key]`: a job has one fairness key",
                            )),
                            None => fair_key = Some(fields.len()),
                        }
                    }
                    fields.push(Field {
                        ident,
                        ty: (*param.ty).clone(),
                    });
                }
            }
        }
        Self {
            item,
            state,
            context,
            fields,
            group,
            fair_key,
        }
    }

    /// The return type, if one is written.
    pub(crate) fn output(&self) -> Option<&Type> {
        match &self.item.sig.output {
            ReturnType::Default => None,
            ReturnType::Type(_, ty) => Some(ty),
        }
    }
}

/// What a job function cannot be: not `async`, `unsafe`, generic.
fn check_signature(sig: &Signature, errors: &mut Errors) {
    if sig.asyncness.is_none() {
        errors.push(syn::Error::new_spanned(
            sig.fn_token,
            "a #[job] function must be `async`: write `async fn`",
        ));
    }
    if let Some(unsafety) = &sig.unsafety {
        errors.push(syn::Error::new_spanned(
            unsafety,
            "a #[job] function cannot be `unsafe`: the worker calls it without an `unsafe` block",
        ));
    }
    if !sig.generics.params.is_empty() {
        errors.push(syn::Error::new_spanned(
            &sig.generics,
            "a #[job] function cannot have generic parameters: the job struct stores concrete types, and the worker finds its handler by kind",
        ));
    }
    if let Some(where_clause) = &sig.generics.where_clause {
        errors.push(syn::Error::new_spanned(
            where_clause,
            "a #[job] function cannot have a `where` clause: the job struct stores concrete types",
        ));
    }
    if let Some(variadic) = &sig.variadic {
        errors.push(syn::Error::new_spanned(
            variadic,
            "a #[job] function cannot be variadic",
        ));
    }
}

/// A parameter attribute without arguments that marks one parameter: `#[group]`,
/// `#[fair_key]`.
struct Marker {
    name: &'static str,
    /// The error for arguments given to it.
    no_arguments: &'static str,
}

/// A marker attribute found (and removed) on a parameter.
struct MarkerAttr {
    attr: Attribute,
}

/// Removes the `#[<marker>]` attributes of `param`; the first is returned, a repeated one is
/// an error.
fn take_marker_attr(
    param: &mut PatType,
    marker: &Marker,
    errors: &mut Errors,
) -> Option<MarkerAttr> {
    let mut found: Option<MarkerAttr> = None;
    let mut kept = Vec::with_capacity(param.attrs.len());
    for attr in param.attrs.drain(..) {
        if !attr.path().is_ident(marker.name) {
            kept.push(attr);
            continue;
        }
        if let Err(error) = attr.meta.require_path_only() {
            errors.push(syn::Error::new(error.span(), marker.no_arguments));
        }
        if found.is_some() {
            errors.push(syn::Error::new_spanned(
                &attr,
                format!(
                    "`#[{}]` is given more than once on this parameter",
                    marker.name
                ),
            ));
        } else {
            found = Some(MarkerAttr { attr });
        }
    }
    param.attrs = kept;
    found
}

/// `Some` if `ty` is the job context (a path whose last segment is `JobContext`): `Ok` with
/// its state type, or `Err` if it has none.
fn context_state(ty: &Type) -> Option<syn::Result<Type>> {
    let path = match ty {
        Type::Path(path) if path.qself.is_none() => &path.path,
        Type::Paren(paren) => return context_state(&paren.elem),
        Type::Group(group) => return context_state(&group.elem),
        _ => return None,
    };
    let last = path.segments.last()?;
    if last.ident != CONTEXT {
        return None;
    }
    let state = match &last.arguments {
        PathArguments::AngleBracketed(args) if args.args.len() == 1 => match &args.args[0] {
            GenericArgument::Type(state) => Some(state.clone()),
            _ => None,
        },
        _ => None,
    };
    Some(state.ok_or_else(|| {
        syn::Error::new_spanned(
            ty,
            "`JobContext` takes the worker pool's state type: write `JobContext<AppState>` (or `JobContext<()>`)",
        )
    }))
}

/// The field name of a parameter: its pattern must be an identifier (`mut` is allowed).
fn field_ident(param: &PatType, errors: &mut Errors) -> Option<Ident> {
    match &*param.pat {
        Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => Some(pat.ident.clone()),
        other => {
            errors.push(syn::Error::new_spanned(
                other,
                "a #[job] parameter must be a plain name, such as `user_id`: it becomes a field of the job struct",
            ));
            None
        }
    }
}

/// A field's type must be owned and concrete: no reference (the job is deserialised into
/// owned values) and no `impl Trait` (a hidden generic).
fn check_field_type(ty: &Type, errors: &mut Errors) {
    struct Check<'e> {
        errors: &'e mut Errors,
    }
    impl<'ast> Visit<'ast> for Check<'_> {
        fn visit_type_reference(&mut self, reference: &'ast TypeReference) {
            self.errors.push(syn::Error::new_spanned(
                reference,
                "a #[job] parameter cannot be a reference: the job is stored as JSON and read back as owned values; take `String` for `&str`, `Vec<T>` for `&[T]`, `T` for `&T`",
            ));
        }
        fn visit_type_impl_trait(&mut self, impl_trait: &'ast TypeImplTrait) {
            self.errors.push(syn::Error::new_spanned(
                impl_trait,
                "a #[job] parameter cannot be `impl Trait`: the job struct stores concrete types",
            ));
        }
    }
    Check { errors }.visit_type(ty);
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn analyze(item: ItemFn) -> (JobFn, Vec<String>) {
        let mut errors = Errors::default();
        let job = JobFn::analyze(item, &mut errors);
        (job, errors.messages())
    }

    #[test]
    fn context_fields_and_group() {
        let (job, errors) = analyze(parse_quote! {
            async fn send(ctx: harel_jobs::JobContext<AppState>, #[group] user_id: i64, mut template: String) {}
        });
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(job.state.to_token_stream().to_string(), "AppState");
        assert_eq!(job.context.unwrap(), "ctx");
        let names: Vec<String> = job.fields.iter().map(|f| f.ident.to_string()).collect();
        assert_eq!(names, ["user_id", "template"]);
        assert_eq!(job.group, Some(0));
        // `#[group]` is gone from the emitted function, `mut` stays
        let emitted = job.item.to_token_stream().to_string();
        assert!(!emitted.contains("group"), "{emitted}");
        assert!(emitted.contains("mut template"), "{emitted}");
    }

    #[test]
    fn no_context() {
        let (job, errors) = analyze(parse_quote! {
            async fn ping(n: u32) -> Result<(), std::io::Error> { Ok(()) }
        });
        assert!(errors.is_empty());
        assert!(job.state.is_none());
        assert_eq!(job.fields.len(), 1);
        assert!(job.output().is_some());
    }

    #[test]
    fn every_signature_error() {
        let (_, errors) = analyze(parse_quote! {
            unsafe fn bad<T>(&self, (a, b): (u8, u8), s: &str, ctx: JobContext<S>, #[group] x: u8, #[group] y: u8, v: Vec<impl Send>) where T: Send {}
        });
        let expected = [
            "a #[job] function must be `async`",
            "cannot be `unsafe`",
            "cannot have generic parameters",
            "cannot have a `where` clause",
            "cannot take `self`",
            "must be a plain name",
            "cannot be a reference",
            "the `JobContext` parameter must come first",
            "only one parameter can be `#[group]`",
            "cannot be `impl Trait`",
        ];
        assert_eq!(errors.len(), expected.len(), "{errors:#?}");
        for (error, expected) in errors.iter().zip(expected) {
            assert!(
                error.contains(expected),
                "{error} should contain {expected}"
            );
        }
    }

    #[test]
    fn group_on_context_and_with_arguments() {
        let (_, errors) = analyze(parse_quote! {
            async fn job(#[group] ctx: JobContext<S>, #[group(x)] a: u8) {}
        });
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert!(errors[0].contains("cannot mark the job context"));
        assert!(errors[1].contains("takes no arguments"));
    }

    #[test]
    fn fair_key() {
        let (job, errors) = analyze(parse_quote! {
            async fn send(ctx: JobContext<S>, user_id: i64, #[fair_key] tenant: String) {}
        });
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(job.fair_key, Some(1));
        assert_eq!(job.group, None);
        let emitted = job.item.to_token_stream().to_string();
        assert!(!emitted.contains("fair_key"), "{emitted}");
    }

    #[test]
    fn group_and_fair_key_on_one_parameter() {
        let (job, errors) = analyze(parse_quote! {
            async fn send(n: u8, #[group] #[fair_key] tenant: String) {}
        });
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(job.group, Some(1));
        assert_eq!(job.fair_key, Some(1));
        let emitted = job.item.to_token_stream().to_string();
        assert_eq!(emitted, "async fn send (n : u8 , tenant : String) { }");
    }

    #[test]
    fn fair_key_errors() {
        let (_, errors) = analyze(parse_quote! {
            async fn job(#[fair_key] ctx: JobContext<S>, #[fair_key] a: u8, #[fair_key] b: u8, #[fair_key(x)] #[fair_key] c: u8) {}
        });
        let expected = [
            "`#[fair_key]` cannot mark the job context",
            "only one parameter can be `#[fair_key]`",
            "`#[fair_key]` takes no arguments",
            "`#[fair_key]` is given more than once on this parameter",
            "only one parameter can be `#[fair_key]`",
        ];
        assert_eq!(errors.len(), expected.len(), "{errors:#?}");
        for (error, expected) in errors.iter().zip(expected) {
            assert!(
                error.contains(expected),
                "{error} should contain {expected}"
            );
        }
    }

    #[test]
    fn context_without_state() {
        let (_, errors) = analyze(parse_quote! {
            async fn job(ctx: JobContext) {}
        });
        assert_eq!(errors.len(), 1);
        assert!(errors[0].contains("takes the worker pool's state type"));
    }
}
