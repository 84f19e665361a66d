//! Collecting compile errors, so that one compile reports every mistake (each at its own
//! span) instead of the first.

use proc_macro2::TokenStream;
use quote::ToTokens;

/// Zero or more spanned errors, combined into one [`syn::Error`].
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    /// Adds an error.
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(errors) => errors.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Adds every error of `other`, after those already here.
    pub(crate) fn append(&mut self, other: Errors) {
        if let Some(error) = other.0 {
            self.push(error);
        }
    }

    /// Whether there is none.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The messages, in order (for tests).
    #[cfg(test)]
    pub(crate) fn messages(&self) -> Vec<String> {
        self.0
            .iter()
            .flat_map(|error| error.clone().into_iter().map(|e| e.to_string()))
            .collect()
    }
}

impl ToTokens for Errors {
    /// One `compile_error!` per error, each at its span.
    fn to_tokens(&self, tokens: &mut TokenStream) {
        if let Some(error) = &self.0 {
            tokens.extend(error.to_compile_error());
        }
    }
}
