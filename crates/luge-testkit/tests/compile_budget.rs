//! The compile budget reads a module's shape, not its code: a module just
//! over the function bound is refused without compiling, one at it passes
//! the check.

use luge_registry::{MAX_FUNCTIONS, check_compile_budget};

#[test]
fn modules_over_the_compile_budget_are_refused_unread() {
    let refused = check_compile_budget(&luge_testkit::many_functions(MAX_FUNCTIONS + 1))
        .expect_err("over the budget");
    assert!(
        refused
            .to_string()
            .contains(&format!("{} functions", MAX_FUNCTIONS + 1)),
        "{refused}"
    );
    assert!(check_compile_budget(&luge_testkit::many_functions(MAX_FUNCTIONS)).is_ok());
    assert!(check_compile_budget(b"\0asm\x01\0\0\0").is_ok());
}
