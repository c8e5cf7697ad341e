//! Imports only run downward, in every crate of the workspace: no module
//! names (through `crate::`) a module that names it back, directly or
//! through others. Doc comments and tests do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace's library and binary source trees.
fn source_trees() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut trees: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .map(|e| e.expect("entry").path().join("src"))
        .collect();
    for top in ["executor", "precompiler"] {
        trees.push(root.join(top).join("src"));
    }
    trees.retain(|t| t.is_dir());
    trees.sort();
    trees
}

/// The top-level module a file belongs to (`hostapi/memory.rs` is
/// `hostapi`), or `None` for the crate root.
fn module_of(tree: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(tree).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_owned())
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("source dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Each top-level module of the crate at `tree` and the modules it names.
fn imports(tree: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(tree, &mut files);
    let mut modules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let Some(name) = module_of(tree, &file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("source");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let named = modules.entry(name.clone()).or_default();
        for line in code.lines() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for rest in line.split("crate::").skip(1) {
                let m: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if !m.is_empty() && m != name {
                    named.insert(m);
                }
            }
        }
    }
    // Names that are not modules (macros exported at the root, items of
    // lib.rs) are not edges.
    let known: BTreeSet<String> = modules.keys().cloned().collect();
    for named in modules.values_mut() {
        named.retain(|m| known.contains(m));
    }
    modules
}

/// A circle through `m`, if one is reachable from it.
fn circle(
    m: &str,
    path: &mut Vec<String>,
    modules: &BTreeMap<String, BTreeSet<String>>,
) -> Option<String> {
    if let Some(at) = path.iter().position(|p| p == m) {
        return Some(format!("{} -> {m}", path[at..].join(" -> ")));
    }
    path.push(m.to_owned());
    for next in modules.get(m).into_iter().flatten() {
        if let Some(found) = circle(next, path, modules) {
            return Some(found);
        }
    }
    path.pop();
    None
}

#[test]
fn no_crate_has_an_import_circle() {
    let trees = source_trees();
    assert!(trees.len() >= 10, "found {trees:?}");
    let mut circles = Vec::new();
    for tree in &trees {
        let modules = imports(tree);
        if let Some(found) = modules
            .keys()
            .find_map(|m| circle(m, &mut Vec::new(), &modules))
        {
            circles.push(format!("{}: {found}", tree.display()));
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

/// The checker finds a circle where there is one.
#[test]
fn a_circle_is_found() {
    let modules: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(m, n)| (m.to_owned(), n.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(
        circle("a", &mut Vec::new(), &modules).as_deref(),
        Some("a -> b -> c -> a")
    );
    assert_eq!(circle("d", &mut Vec::new(), &modules), None);
}
