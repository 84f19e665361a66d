//! The expansion: the user's function, the job struct, `Job`, `Handler`, and the inherent
//! `enqueue` methods.
//!
//! Every path into harel-jobs goes through one crate path (`::harel_jobs`, or the
//! `crate = …` argument); serde and sqlx are reached through its `__private` module, so the
//! user's crate needs neither. Standard items are named by absolute `::core`/`::std` paths.
//! Locals and generic parameters of the expansion carry a `__harel_jobs` prefix so that they
//! cannot capture or shadow the user's names.

use std::time::Duration;

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned as _;
use syn::{Attribute, Ident, LitStr, Path, Type};

use crate::args::{JobArgs, show};
use crate::diagnostic::Errors;
use crate::signature::{ItemFn, JobFn};

/// The whole macro on `proc_macro2` tokens (so that unit tests can run it).
///
/// Always emits the user's function (less `#[group]` and `#[fair_key]`), so an IDE keeps seeing it; emits the
/// generated items too unless the signature itself is unusable; appends one
/// `compile_error!` per mistake.
pub(crate) fn job(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut item_fn: ItemFn = match syn::parse2(item.clone()) {
        Ok(item_fn) => item_fn,
        Err(_) => {
            let error = syn::Error::new(
                Span::call_site(),
                "#[job] goes on an `async fn`, e.g. `#[job] async fn send_email(user_id: i64) -> JobResult`",
            )
            .to_compile_error();
            return quote!(#item #error);
        }
    };
    let mut errors = Errors::default();
    take_derive_attrs(&mut item_fn, &mut errors);
    let args = match syn::parse2::<JobArgs>(args) {
        Ok(mut args) => {
            errors.append(std::mem::take(&mut args.errors));
            Some(args)
        }
        Err(error) => {
            errors.push(error);
            None
        }
    };
    let mut signature_errors = Errors::default();
    let job = JobFn::analyze(item_fn, &mut signature_errors);
    // The names of `unique(…)` are checked even when the signature has errors: a name that
    // is not a parameter is a mistake of its own.
    let unique_fields = args
        .as_ref()
        .and_then(|args| args.unique.as_ref())
        .and_then(|unique| {
            let fields: Vec<&Ident> = job.fields.iter().map(|field| &field.ident).collect();
            unique.resolve(&fields, job.context.as_ref(), &mut errors)
        });
    let struct_ident = struct_ident(&job.item.sig.ident, &mut signature_errors);
    let expansion = match (&args, struct_ident) {
        (Some(args), Some(struct_ident)) if signature_errors.is_empty() => {
            generate(&job, args, &struct_ident, unique_fields.as_deref())
        }
        _ => job.item.to_token_stream(),
    };
    errors.append(signature_errors);
    quote!(#expansion #errors)
}

/// Removes `#[derive(…)]` from the function (where rustc would refuse it, E0774), each with
/// an error that says where it belongs: `#[job(derive(…))]`. Only a `#[derive]` written
/// below `#[job]` reaches the macro; one above it is rustc's own error.
fn take_derive_attrs(item_fn: &mut ItemFn, errors: &mut Errors) {
    item_fn.attrs.retain(|attr| {
        if !attr.path().is_ident("derive") {
            return true;
        }
        let traits = match &attr.meta {
            syn::Meta::List(list) => list.tokens.to_string(),
            _ => String::new(),
        };
        errors.push(syn::Error::new_spanned(
            attr,
            format!(
                "`#[derive]` cannot go on a function: to derive traits for the job struct, write `#[job(derive({traits}))]`"
            ),
        ));
        false
    });
}

/// `send_welcome_email` -> `SendWelcomeEmail`, at the function name's span (so that
/// "defined multiple times" and go-to-definition land on the function).
fn struct_ident(fn_ident: &Ident, errors: &mut Errors) -> Option<Ident> {
    let name = camel_case(&fn_ident.unraw().to_string());
    match syn::parse_str::<Ident>(&name) {
        Ok(mut ident) => {
            ident.set_span(fn_ident.span());
            Some(ident)
        }
        Err(_) => {
            errors.push(syn::Error::new(
                fn_ident.span(),
                format!(
                    "cannot name the job struct after `{fn_ident}`: `{name}` is not a valid type name; rename the function"
                ),
            ));
            None
        }
    }
}

/// Snake case to camel case: each `_`-separated part capitalised, the underscores dropped.
pub(crate) fn camel_case(snake: &str) -> String {
    snake
        .split('_')
        .flat_map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .into_iter()
                .flat_map(char::to_uppercase)
                .chain(chars)
        })
        .collect()
}

/// The generated items. `unique_fields`: the indexes in `job.fields` of the parameters of
/// `unique(…)` (`None` for a bare `unique`, or without `unique`).
fn generate(
    job: &JobFn,
    args: &JobArgs,
    struct_ident: &Ident,
    unique_fields: Option<&[usize]>,
) -> TokenStream {
    let krate: Path = args
        .krate
        .clone()
        .unwrap_or_else(|| syn::parse_quote!(::harel_jobs));
    let private = quote!(#krate::__private);
    let item = &job.item;
    let vis = &item.vis;
    let fn_ident = &item.sig.ident;
    let fn_name = fn_ident.unraw().to_string();
    let kind = match &args.kind {
        Some(kind) => LitStr::new(&kind.value, kind.span),
        None => LitStr::new(&fn_name, fn_ident.span()),
    };
    let queue = args.queue.as_ref().map(|queue| {
        let name = LitStr::new(&queue.value, queue.span);
        quote!(const QUEUE: &'static str = #name;)
    });
    // `#[cfg]` on the function applies to everything generated from it.
    let cfgs: Vec<&Attribute> = item
        .attrs
        .iter()
        .filter(|attr| attr.path().is_ident("cfg"))
        .collect();
    let docs: Vec<&Attribute> = item
        .attrs
        .iter()
        .filter(|attr| attr.path().is_ident("doc"))
        .collect();
    let mut generated_doc = format!(
        " The job of `{fn_name}`, generated by `#[job]` (kind `\"{}\"`): build it from the function's arguments, then [`enqueue`](Self::enqueue) it.",
        kind.value()
    );
    if let Some(unique) = &args.unique {
        let key = match unique_fields {
            Some(indexes) => {
                let names: Vec<String> = indexes
                    .iter()
                    .map(|&index| format!("`{}`", job.fields[index].ident.unraw()))
                    .collect();
                format!("the same {}", names.join(", "))
            }
            None => "the same arguments".to_owned(),
        };
        let after = unique.hold.as_ref().map_or_else(String::new, |hold| {
            format!(" (and for {} after it completed)", show(hold.value))
        });
        generated_doc.push_str(&format!(
            " Unique: while a job of this kind with {key} is queued{after}, enqueueing another is refused."
        ));
    }
    let separator = (!docs.is_empty()).then(|| quote!(#[doc = ""]));
    let derives = &args.derives;
    let derive = (!derives.is_empty()).then(|| quote!(#[derive(#(#derives),*)]));
    let serde_crate = LitStr::new(
        &quote!(#private::serde).to_string().replace(' ', ""),
        Span::call_site(),
    );

    let field_idents: Vec<&Ident> = job.fields.iter().map(|f| &f.ident).collect();
    let field_types: Vec<&Type> = job.fields.iter().map(|f| &f.ty).collect();
    // `pub` at the parameter's span: a field is then spanned over the user's tokens alone,
    // and rustc reports a derived trait the field's type lacks there.
    let field_pubs: Vec<TokenStream> = job
        .fields
        .iter()
        .map(|f| quote_spanned!(f.ident.span()=> pub))
        .collect();
    let field_docs: Vec<String> = job
        .fields
        .iter()
        .enumerate()
        .map(|(index, field)| {
            let name = field.ident.unraw();
            let mut doc = format!(" The `{name}` argument of `{fn_name}`");
            if job.group == Some(index) {
                doc.push_str(&format!(
                    "; also the job's group: jobs with the same `{name}` run one at a time, in enqueue order"
                ));
            }
            if job.fair_key == Some(index) {
                doc.push_str(&format!(
                    "; also the job's fairness key: claims share the starts between the values of `{name}` in proportion to their weights"
                ));
            }
            doc.push('.');
            doc
        })
        .collect();

    let options = options(&krate, &private, args);
    let group = job.group.map(|index| {
        let field = &job.fields[index];
        let ident = &field.ident;
        let span = field.ty.span();
        let ty = &field.ty;
        // Both name the parameter's type: a type without `Display` is reported there, once
        // (rustc merges identical obligations at one span).
        let assert = quote_spanned!(span=> #private::assert_group_display::<#ty>(););
        let value = format_ident!("__harel_jobs_value");
        let group_id_fn = respan(quote!(#private::group_id), span);
        let kind = respan(quote!(<Self as #krate::Job>::KIND), span);
        let group_id = quote_spanned!(span=> #group_id_fn::<#ty>(#kind, #value));
        quote! {
            fn group(&self) -> ::core::option::Option<::std::string::String> {
                #assert
                let #value = &self.#ident;
                ::core::option::Option::Some(#group_id)
            }
        }
    });

    let fair_key = job.fair_key.map(|index| {
        let field = &job.fields[index];
        let ident = &field.ident;
        let span = field.ty.span();
        let ty = &field.ty;
        // As for the group, both name the parameter's type: a type without `Display` is
        // reported there, once.
        let assert = quote_spanned!(span=> #private::assert_fair_key_display::<#ty>(););
        let fair_key_fn = respan(quote!(#private::fair_key), span);
        let key = quote_spanned!(span=> #fair_key_fn::<#ty>(&self.#ident));
        // The value as is, not prefixed by the kind: a tenant is shared across job kinds.
        quote! {
            fn fair_key(&self) -> ::core::option::Option<::std::string::String> {
                #assert
                ::core::option::Option::Some(#key)
            }
        }
    });

    let unique = unique(job, args, &krate, &private, unique_fields);

    let ctx = format_ident!("__harel_jobs_ctx");
    let (impl_generics, state, ctx_arg) = match &job.state {
        Some(state) => (quote!(), state.to_token_stream(), quote!(#ctx,)),
        None => {
            let generic = format_ident!("__HarelJobsState");
            (
                quote!(<#generic: ::core::marker::Send + ::core::marker::Sync + 'static>),
                generic.to_token_stream(),
                quote!(),
            )
        }
    };
    let ctx_param = if job.state.is_some() {
        ctx.to_token_stream()
    } else {
        quote!(_)
    };
    let output = format_ident!("__harel_jobs_output");
    // The return type check and the conversion both sit on the user's return type.
    let (assert_result, convert) = match job.output() {
        Some(ty) => {
            let span = ty.span();
            let into_job_result = respan(quote!(#private::IntoJobResult), span);
            match ty {
                // not nameable in a turbofish; rustc checks the conversion alone
                Type::ImplTrait(_) => (
                    None,
                    quote_spanned!(span=> #into_job_result::into_job_result(#output)),
                ),
                // Both name the type the user wrote: rustc reports it once, underlined whole.
                _ => (
                    Some(quote_spanned!(span=> #private::assert_job_result::<#ty>();)),
                    quote_spanned!(span=> <#ty as #into_job_result>::into_job_result(#output)),
                ),
            }
        }
        None => (
            None,
            quote!(#private::IntoJobResult::into_job_result(#output)),
        ),
    };

    // The future, spanned at the user's `async`: if it is not `Send`, rustc says so there
    // (and names the value held across an `.await`), not at the attribute.
    let async_span = item
        .sig
        .asyncness
        .map_or_else(Span::call_site, |asyncness| asyncness.span);
    let call = quote! {
        let #output = #fn_ident(#ctx_arg #(self.#field_idents),*).await;
        #convert
    };
    let future = quote_spanned!(async_span=> async move { #call });
    let future_type = respan(
        quote!(impl ::core::future::Future<Output = #krate::JobResult> + ::core::marker::Send),
        async_span,
    );

    quote! {
        #item

        #(#docs)*
        #separator
        #[doc = #generated_doc]
        #(#cfgs)*
        #[derive(#private::serde::Serialize, #private::serde::Deserialize)]
        #[serde(crate = #serde_crate)]
        #derive
        #vis struct #struct_ident {
            #(
                #[doc = #field_docs]
                #field_pubs #field_idents: #field_types,
            )*
        }

        #(#cfgs)*
        impl #krate::Job for #struct_ident {
            const KIND: &'static str = #kind;
            #queue

            fn options() -> #krate::JobOptions {
                #options
            }

            #group

            #fair_key

            #unique
        }

        #(#cfgs)*
        impl #impl_generics #krate::Handler<#state> for #struct_ident {
            fn handle(
                self,
                #ctx_param: #krate::JobContext<#state>,
            ) -> #future_type {
                #assert_result
                #future
            }
        }

        #(#cfgs)*
        impl #struct_ident {
            /// Enqueues this job through `executor`: a pool, a connection, or a transaction
            /// (`&mut *tx`), in which case the job exists if and only if the transaction
            /// commits. Set options (`delay`, `not_before`, `priority`, `group`, `unique`,
            /// `schema`) on the returned value, then `.await` it for the job's id.
            pub fn enqueue<'c, E: #private::sqlx::PgExecutor<'c>>(
                self,
                executor: E,
            ) -> #krate::Enqueue<'c, Self, E> {
                #krate::Enqueue::new(self, executor)
            }

            /// Enqueues `jobs` through `executor` in one round trip, in order (jobs of one
            /// group keep it), each in the group its `#[group]` parameter gives or in one of
            /// its own; returns their ids in the same order. For jobs of several kinds, other
            /// groups, or another schema, use `JobBatch`.
            ///
            /// # Errors
            /// `PublishError::Serialize` or `PublishError::Invalid` if a job cannot be
            /// enqueued or the batch is over the limits of `JobBatch` (nothing is written
            /// then), `PublishError::Database` if the insert fails.
            pub async fn enqueue_many<'c, E: #private::sqlx::PgExecutor<'c>>(
                executor: E,
                jobs: impl ::core::iter::IntoIterator<Item = Self>,
            ) -> ::core::result::Result<::std::vec::Vec<#krate::JobId>, #krate::PublishError> {
                let mut __harel_jobs_batch = #krate::JobBatch::new();
                for __harel_jobs_job in jobs {
                    __harel_jobs_batch.push(__harel_jobs_job)?;
                }
                __harel_jobs_batch.enqueue(executor).await
            }
        }
    }
}

/// `tokens` with every token at `span`, so that rustc reports a problem with the expression
/// there. (`quote_spanned!` leaves interpolated tokens, such as the crate path, at their own
/// span, and rustc reports an unmet bound of a call at the span of its whole path.)
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let TokenTree::Group(group) = &token {
                let mut respanned = Group::new(group.delimiter(), respan(group.stream(), span));
                respanned.set_span(span);
                token = TokenTree::Group(respanned);
            } else {
                token.set_span(span);
            }
            token
        })
        .collect()
}

/// `JobOptions::new().max_attempts(…).priority(…)…` with the keys that were given.
fn options(krate: &Path, private: &TokenStream, args: &JobArgs) -> TokenStream {
    let mut options = quote!(#krate::JobOptions::new());
    if let Some(attempts) = &args.max_attempts {
        let value = attempts.value;
        options.extend(quote!(.max_attempts(#value)));
    }
    if let Some(priority) = &args.priority {
        let value = priority.value;
        options.extend(quote!(.priority(#private::priority(#value))));
    }
    if let Some((base, max)) = args.backoff() {
        let base = duration(base);
        let max = duration(max);
        options.extend(quote!(.backoff(#krate::Backoff::exponential(#base, #max))));
    }
    if let Some(timeout) = &args.timeout {
        let timeout = duration(timeout.value);
        options.extend(quote!(.timeout(#timeout)));
    }
    if let Some(retain) = &args.retain {
        let retain = duration(retain.value);
        options.extend(quote!(.retain(#retain)));
    }
    options
}

/// `fn unique(&self)` of `Job`, if `unique` was given: the key is the kind and, as JSON, the
/// whole job or the tuple of the chosen fields (`(&self.a,)` for one).
fn unique(
    job: &JobFn,
    args: &JobArgs,
    krate: &Path,
    private: &TokenStream,
    unique_fields: Option<&[usize]>,
) -> Option<TokenStream> {
    let unique = args.unique.as_ref()?;
    let value = match unique_fields {
        Some(indexes) => {
            let idents = indexes.iter().map(|&index| &job.fields[index].ident);
            quote!(&(#(&self.#idents,)*))
        }
        None => quote!(self),
    };
    let hold = unique.hold.as_ref().map(|hold| {
        let hold = duration(hold.value);
        quote!(.hold_after_completion(#hold))
    });
    Some(quote! {
        fn unique(&self) -> ::core::option::Option<#krate::Unique> {
            ::core::option::Option::Some(
                #krate::Unique::new(#private::unique_key(<Self as #krate::Job>::KIND, #value))
                    #hold
            )
        }
    })
}

fn duration(duration: Duration) -> TokenStream {
    let millis = u64::try_from(duration.as_millis()).expect("parsed durations fit in u64 ms");
    quote!(::core::time::Duration::from_millis(#millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(args: TokenStream, item: TokenStream) -> String {
        job(args, item).to_string()
    }

    #[test]
    fn names() {
        assert_eq!(camel_case("send_welcome_email"), "SendWelcomeEmail");
        assert_eq!(camel_case("ping"), "Ping");
        assert_eq!(camel_case("_private__job_"), "PrivateJob");
        assert_eq!(camel_case("resize_2x"), "Resize2x");
        assert_eq!(camel_case("already_Camel"), "AlreadyCamel");
    }

    #[test]
    fn struct_names_that_are_not_identifiers() {
        let mut errors = Errors::default();
        assert!(struct_ident(&format_ident!("_2fa"), &mut errors).is_none());
        assert!(struct_ident(&format_ident!("self_"), &mut errors).is_none());
        assert_eq!(errors.messages().len(), 2);
        let raw = struct_ident(&format_ident!("r#type"), &mut errors).unwrap();
        assert_eq!(raw, "Type");
    }

    #[test]
    fn crate_override_reaches_every_path() {
        let out = expand(
            quote!(
                crate = my::jobs,
                priority = 1,
                backoff = "1s",
                timeout = "5s",
                retain = "1h",
                unique(user, hold = "1m")
            ),
            quote! {
                /// Docs.
                async fn send(ctx: JobContext<App>, #[group] user: i64) -> JobResult { Ok(()) }
            },
        );
        assert!(!out.contains("harel_jobs ::"), "{out}");
        assert!(out.contains("my :: jobs :: __private :: serde :: Serialize"));
        assert!(out.contains("\"my::jobs::__private::serde\""), "{out}");
        assert!(out.contains("my :: jobs :: __private :: sqlx :: PgExecutor"));
        assert!(out.contains("my :: jobs :: Unique :: new (my :: jobs :: __private :: unique_key (< Self as my :: jobs :: Job > :: KIND"), "{out}");
    }

    #[test]
    fn retain_is_an_option() {
        let out = expand(
            quote!(retain = "24h"),
            quote!(
                async fn ping() {}
            ),
        );
        assert!(
            out.contains(":: harel_jobs :: JobOptions :: new () . retain (:: core :: time :: Duration :: from_millis (86400000u64))"),
            "{out}"
        );
        assert!(!out.contains("fn unique"), "{out}");
    }

    #[test]
    fn unique_key_of_the_whole_job() {
        let out = expand(
            quote!(unique),
            quote!(
                async fn send(ctx: JobContext<App>, user_id: i64) {}
            ),
        );
        assert!(out.contains(
            "fn unique (& self) -> :: core :: option :: Option < :: harel_jobs :: Unique > { :: core :: option :: Option :: Some (:: harel_jobs :: Unique :: new (:: harel_jobs :: __private :: unique_key (< Self as :: harel_jobs :: Job > :: KIND , self))) }"
        ), "{out}");
        assert!(
            out.contains("Unique: while a job of this kind with the same arguments is queued, enqueueing another is refused."),
            "{out}"
        );
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn unique_key_of_fields() {
        let out = expand(
            quote!(unique(day, user_id, hold = "1h")),
            quote!(
                async fn report(ctx: JobContext<App>, user_id: i64, day: String, note: String) {}
            ),
        );
        assert!(out.contains(
            "unique_key (< Self as :: harel_jobs :: Job > :: KIND , & (& self . day , & self . user_id ,))) . hold_after_completion (:: core :: time :: Duration :: from_millis (3600000u64))"
        ), "{out}");
        assert!(
            out.contains(
                "with the same `day`, `user_id` is queued (and for 1h after it completed)"
            ),
            "{out}"
        );
        // one field: a one-element tuple
        let out = expand(
            quote!(unique(user_id)),
            quote!(
                async fn report(user_id: i64, day: String) {}
            ),
        );
        assert!(out.contains(", & (& self . user_id ,)))"), "{out}");
        assert!(!out.contains("hold_after_completion"), "{out}");
    }

    #[test]
    fn unique_names_are_checked_against_the_signature() {
        // reported with the expansion kept
        let out = expand(
            quote!(unique(ctx, user)),
            quote!(
                async fn send(ctx: JobContext<App>, user_id: i64) {}
            ),
        );
        assert!(out.contains("struct Send"), "{out}");
        assert_eq!(out.matches("compile_error").count(), 2, "{out}");
        assert!(out.contains("`ctx` is the job context"), "{out}");
        assert!(out.contains("`user` in `unique(…)` is not a parameter of the function; the valid ones are `user_id`"), "{out}");
        // and when the signature is wrong too
        let out = expand(
            quote!(unique(user)),
            quote!(
                fn send(user_id: i64) {}
            ),
        );
        assert!(!out.contains("struct"), "{out}");
        assert_eq!(out.matches("compile_error").count(), 2, "{out}");
    }

    #[test]
    fn derive_on_the_struct() {
        let out = expand(
            quote!(derive(Clone, Debug)),
            quote!(
                async fn ping(n: u32) {}
            ),
        );
        assert!(
            out.contains("# [derive (Clone , Debug)] pub struct Ping")
                || out.contains("# [derive (Clone , Debug)] struct Ping"),
            "{out}"
        );
        // none given: only serde's
        let out = expand(
            quote!(),
            quote!(
                async fn ping(n: u32) {}
            ),
        );
        assert_eq!(out.matches("derive").count(), 1, "{out}");
    }

    #[test]
    fn derive_on_the_function_is_moved_into_an_error() {
        let out = expand(
            quote!(),
            quote!(
                #[derive(Clone)]
                async fn ping() {}
            ),
        );
        assert!(out.starts_with("async fn ping () { }"), "{out}");
        assert!(out.contains("struct Ping"), "{out}");
        assert_eq!(out.matches("compile_error").count(), 1, "{out}");
        assert!(out.contains("write `#[job(derive(Clone))]`"), "{out}");
    }

    #[test]
    fn default_crate_path() {
        let out = expand(
            quote!(),
            quote!(
                async fn ping() {}
            ),
        );
        assert!(out.contains(":: harel_jobs :: Job for Ping"), "{out}");
        assert!(out.contains("\"::harel_jobs::__private::serde\""), "{out}");
        assert!(
            out.contains("const KIND : & 'static str = \"ping\""),
            "{out}"
        );
        assert!(out.contains("__HarelJobsState"), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn options_from_keys() {
        let out = expand(
            quote!(
                max_attempts = 5,
                priority = 2,
                backoff_max = "1m",
                timeout = "1m30s"
            ),
            quote!(
                async fn ping() {}
            ),
        );
        assert!(out.contains(
            ":: harel_jobs :: JobOptions :: new () . max_attempts (5u32) . priority (:: harel_jobs :: __private :: priority (2u8)) . backoff (:: harel_jobs :: Backoff :: exponential (:: core :: time :: Duration :: from_millis (2000u64) , :: core :: time :: Duration :: from_millis (60000u64))) . timeout (:: core :: time :: Duration :: from_millis (90000u64))"
        ), "{out}");
    }

    #[test]
    fn fair_key_is_the_value_as_is() {
        let out = expand(
            quote!(),
            quote!(
                async fn send(ctx: JobContext<App>, user_id: i64, #[fair_key] tenant: String) {}
            ),
        );
        assert!(!out.contains("compile_error"), "{out}");
        assert!(
            out.starts_with(
                "async fn send (ctx : JobContext < App > , user_id : i64 , tenant : String) { }"
            ),
            "{out}"
        );
        assert!(out.contains(
            "fn fair_key (& self) -> :: core :: option :: Option < :: std :: string :: String > { :: harel_jobs :: __private :: assert_fair_key_display :: < String > () ; :: core :: option :: Option :: Some (:: harel_jobs :: __private :: fair_key :: < String > (& self . tenant)) }"
        ), "{out}");
        assert!(!out.contains("fn group"), "{out}");
        assert!(
            out.contains("\" The `tenant` argument of `send`; also the job's fairness key: claims share the starts between the values of `tenant` in proportion to their weights.\""),
            "{out}"
        );
        // without `#[fair_key]`: the trait's default
        let out = expand(
            quote!(),
            quote!(
                async fn send(#[group] tenant: String) {}
            ),
        );
        assert!(!out.contains("fn fair_key"), "{out}");
    }

    #[test]
    fn group_and_fair_key_on_one_parameter() {
        let out = expand(
            quote!(),
            quote!(
                async fn send(
                    #[group]
                    #[fair_key]
                    tenant: String,
                ) {
                }
            ),
        );
        assert!(!out.contains("compile_error"), "{out}");
        assert!(
            out.starts_with("async fn send (tenant : String ,) { }"),
            "{out}"
        );
        assert!(out.contains("fn group (& self)"), "{out}");
        assert!(
            out.contains(
                "Some (:: harel_jobs :: __private :: fair_key :: < String > (& self . tenant))"
            ),
            "{out}"
        );
        assert!(
            out.contains("in enqueue order; also the job's fairness key:"),
            "{out}"
        );
    }

    #[test]
    fn fair_key_errors() {
        let out = expand(
            quote!(),
            quote!(
                async fn send(
                    #[fair_key] ctx: JobContext<App>,
                    #[fair_key] a: String,
                    #[fair_key] b: String,
                ) {
                }
            ),
        );
        assert!(!out.contains("struct"), "{out}");
        assert!(
            out.starts_with(
                "async fn send (ctx : JobContext < App > , a : String , b : String ,) { }"
            ),
            "{out}"
        );
        assert_eq!(out.matches("compile_error").count(), 2, "{out}");
        assert!(
            out.contains("`#[fair_key]` cannot mark the job context"),
            "{out}"
        );
        assert!(
            out.contains("only one parameter can be `#[fair_key]`"),
            "{out}"
        );
    }

    #[test]
    fn errors_keep_the_function() {
        let out = expand(
            quote!(priority = 9),
            quote!(
                fn ping(#[group] n: u32) {}
            ),
        );
        // the function, without `#[group]`, and the errors; no struct (the signature is wrong)
        assert!(out.starts_with("fn ping (n : u32) { }"), "{out}");
        assert!(!out.contains("struct"), "{out}");
        assert_eq!(out.matches("compile_error").count(), 2, "{out}");
    }

    #[test]
    fn argument_errors_keep_the_expansion() {
        let out = expand(
            quote!(priority = 9),
            quote!(
                async fn ping() {}
            ),
        );
        assert!(out.contains("struct Ping"), "{out}");
        assert_eq!(out.matches("compile_error").count(), 1, "{out}");
    }

    #[test]
    fn not_a_function() {
        let out = expand(
            quote!(),
            quote!(
                struct Ping;
            ),
        );
        assert!(out.starts_with("struct Ping ;"), "{out}");
        assert!(out.contains("compile_error"), "{out}");
    }
}
