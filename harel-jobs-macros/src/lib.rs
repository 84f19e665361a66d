//! The `#[job]` attribute of harel-jobs (placeholder: see the `harel-jobs` docs).
use proc_macro::TokenStream;

/// Turns an `async fn` into a typed job (not yet implemented).
#[proc_macro_attribute]
pub fn job(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
