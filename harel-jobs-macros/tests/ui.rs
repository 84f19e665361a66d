//! Compile-time behaviour of `#[job]`: one case per file in `ui/fail/` (with the expected
//! compiler output in its `.stderr`) and `ui/pass/`. Regenerate the `.stderr` files with
//! `TRYBUILD=overwrite cargo test -p harel-jobs-macros --test ui`, then read each one.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
