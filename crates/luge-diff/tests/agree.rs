//! Every engine agrees: on hand-written edge cases, each with the outcome
//! it must have, and on a fixed seed of generated cases.

use std::time::Duration;

use luge_diff::{Case, Class, Engines, Source, TrapKind, Verdict};
use luge_engines::EngineKind;

fn engines() -> Engines {
    Engines::new(&EngineKind::built_in()).expect("every engine builds")
}

fn case(wat: &str, timeout: Duration) -> Case {
    Case {
        source: Source::Structured,
        index: 0,
        wasm: wat::parse_str(wat).expect("valid text"),
        stdin: Vec::new(),
        timeout,
    }
}

/// Runs `wat` everywhere; says where an engine did not end as `class`.
fn expect(
    engines: &Engines,
    name: &str,
    wat: &str,
    timeout: Duration,
    class: Class,
) -> Vec<String> {
    let runs = luge_diff::run_case(engines, &case(wat, timeout));
    runs.iter()
        .filter(|run| run.class != class)
        .map(|run| {
            format!(
                "{name}: {} ended {:?} ({}), not {class:?}",
                run.engine.name(),
                run.class,
                run.detail
            )
        })
        .collect()
}

#[test]
fn hand_written_edges_end_the_same_everywhere() {
    let engines = engines();
    let short = luge_diff::SPIN_TIMEOUT;
    const MEMORY: &str = r#"(memory (export "memory") 1)"#;
    // A growth refused by the module's own maximum is the guest's doing;
    // one refused by Luge's limit (8 MiB here) makes the trap after it the
    // memory limit.
    let grow_then_trap = |max: &str, pages: u32| {
        format!(
            r#"(module (memory (export "memory") 1 {max})
                 (func (export "_start")
                   (if (i32.eq (memory.grow (i32.const {pages})) (i32.const -1))
                     (then unreachable))))"#
        )
    };
    // A start function runs at instantiation, before `_start`: it is the
    // tenant's code all the same, under the same limits.
    let start = |body: &str| {
        format!(r#"(module {MEMORY} (func $s {body}) (start $s) (func (export "_start")))"#)
    };
    // proc_exit's status: its low 8 bits, as a POSIX parent sees it.
    let exit = |status: &str| {
        format!(
            r#"(module (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
                 {MEMORY} (func (export "_start") (call $exit (i32.const {status}))))"#
        )
    };
    let edges: Vec<(&str, String, Duration, Class)> = vec![
        // Segments that do not fit trap at instantiation (found by the
        // seed 20261125 at 5000 cases: Wasmer and WAMR called it a
        // failure).
        (
            "a data segment past the end of memory",
            format!(r#"(module {MEMORY} (data (i32.const 65535) "ab") (func (export "_start")))"#),
            short,
            Class::Trap(TrapKind::MemoryOutOfBounds),
        ),
        (
            "an element segment past the end of its table",
            format!(
                r#"(module {MEMORY} (table 1 funcref) (func $f) (elem (i32.const 1) $f)
                     (func (export "_start")))"#
            ),
            short,
            Class::Trap(TrapKind::TableOutOfBounds),
        ),
        (
            "a start function that traps",
            start("unreachable"),
            short,
            Class::Trap(TrapKind::Unreachable),
        ),
        (
            "a start function that never returns",
            start("(loop $l (br $l))"),
            short,
            Class::TimedOut,
        ),
        (
            "a start function that recurses without end",
            start("call $s"),
            luge_diff::TIMEOUT,
            Class::Trap(TrapKind::StackOverflow),
        ),
        // The function ABI: a WASI command exports its memory as "memory".
        (
            "no memory",
            r#"(module (func (export "_start")))"#.into(),
            short,
            Class::Refused,
        ),
        (
            "an unexported memory",
            r#"(module (memory 1) (func (export "_start")))"#.into(),
            short,
            Class::Refused,
        ),
        (
            "a memory exported under another name",
            r#"(module (memory (export "mem") 1) (func (export "_start")))"#.into(),
            short,
            Class::Refused,
        ),
        // An import returning two values can never link; Wasmer's
        // single-pass compiler panicked on one. Refused before any
        // compiler sees it.
        (
            "a two-result import",
            format!(
                r#"(module (import "luge" "two" (func (result i32 i32)))
                     {MEMORY} (func (export "_start")))"#
            ),
            short,
            Class::Refused,
        ),
        ("proc_exit(200)", exit("200"), short, Class::Exited(200)),
        ("proc_exit(256)", exit("256"), short, Class::Exited(0)),
        ("proc_exit(-1)", exit("-1"), short, Class::Exited(255)),
        (
            "a growth past the module's own maximum",
            grow_then_trap("4", 8),
            short,
            Class::Trap(TrapKind::Unreachable),
        ),
        (
            "a growth past Luge's limit",
            grow_then_trap("", 200),
            short,
            Class::OutOfMemory,
        ),
        (
            "a growth past 4 GiB",
            grow_then_trap("", 65536),
            short,
            Class::Trap(TrapKind::Unreachable),
        ),
        (
            "an empty command",
            format!(r#"(module {MEMORY} (func (export "_start")))"#),
            short,
            Class::Exited(0),
        ),
    ];
    let wrong: Vec<String> = edges
        .into_iter()
        .flat_map(|(name, wat, timeout, class)| expect(&engines, name, &wat, timeout, class))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A fixed seed: no disagreement, and the outcomes the generators aim at
/// all occur.
#[test]
fn a_fixed_seed_of_generated_cases_agrees() {
    let engines = engines();
    let mut seen = std::collections::BTreeSet::new();
    let mut disagreements = Vec::new();
    for index in 0..CASES {
        let Some(case) = luge_diff::case(SEED, index) else {
            continue;
        };
        let runs = luge_diff::run_case(&engines, &case);
        match luge_diff::judge(&runs) {
            Verdict::Agree => {
                seen.insert(runs[0].class.clone());
            }
            Verdict::Known(_) => {}
            Verdict::Disagree => disagreements.push(format!(
                "case {index}: {:?}",
                runs.iter()
                    .map(|r| (r.engine.name(), &r.class, &r.detail))
                    .collect::<Vec<_>>()
            )),
        }
    }
    assert!(
        disagreements.is_empty(),
        "luge-diff --seed {SEED}: {}",
        disagreements.join("\n")
    );
    for class in [
        Class::Exited(0),
        Class::TimedOut,
        Class::OutOfMemory,
        Class::Trap(TrapKind::StackOverflow),
        Class::Trap(TrapKind::DivideByZero),
        Class::Trap(TrapKind::MemoryOutOfBounds),
        Class::Trap(TrapKind::Unreachable),
    ] {
        assert!(seen.contains(&class), "no case ended {class:?}: {seen:?}");
    }
    assert!(
        seen.iter()
            .any(|c| matches!(c, Class::Exited(n) if *n != 0)),
        "no case exited non-zero: {seen:?}"
    );
}

const SEED: u64 = 20261125;
const CASES: u64 = 300;
