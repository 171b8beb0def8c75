//! Compile-fail tests of `#[derive(Job)]`'s own error messages.

#[test]
fn derive_errors() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
