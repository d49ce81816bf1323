//! The module graph reads top-down, checked on the source: the decision core imports nothing of
//! the rest of the crate and no I/O crate (it is pure by construction, not by habit), telemetry
//! does not import the live controller, and no two files import each other through a cycle of
//! `use`s (a child importing from its parent module, or a parent naming its children, is not a
//! cycle: that is where shared definitions live, and how children are declared).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `src/`, as its module path (`src/sim/engine.rs` -> `sim::engine`,
/// `src/live/mod.rs` -> `live`), with its text.
fn modules() -> BTreeMap<String, String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&root, &mut files);
    files
        .into_iter()
        .filter_map(|path| {
            let rel = path.strip_prefix(&root).unwrap().with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            // The binary's own modules (main.rs, cli) are the top; lib.rs is the crate root.
            if parts == ["main"] || parts == ["lib"] {
                return None;
            }
            Some((parts.join("::"), std::fs::read_to_string(&path).unwrap()))
        })
        .collect()
}

/// The paths a file's `use` items name, each resolved to an absolute path from the crate root
/// (`crate::`, `super::` and `self::` expanded), and the external crates it uses.
fn uses(module: &str, text: &str, mods: &BTreeMap<String, String>) -> (Vec<Vec<String>>, BTreeSet<String>) {
    let here: Vec<String> = module.split("::").map(String::from).collect();
    let children: BTreeSet<&str> =
        mods.keys().filter_map(|m| m.strip_prefix(&format!("{module}::"))).filter(|c| !c.contains("::")).collect();
    let mut paths = Vec::new();
    let mut external = BTreeSet::new();
    // `use` items, including multi-line ones, up to their `;` (test modules too: a test that
    // imports a file is an edge like any other).
    let mut items = Vec::new();
    let mut open: Option<String> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(acc) = open.as_mut() {
            acc.push_str(t);
        } else if let Some(rest) =
            ["use ", "pub use ", "pub(crate) use ", "pub(super) use "].iter().find_map(|p| t.strip_prefix(p))
        {
            open = Some(rest.to_string());
        }
        if open.as_ref().is_some_and(|acc| acc.contains(';')) {
            let acc = open.take().unwrap();
            items.push(acc[..acc.find(';').unwrap()].chars().filter(|c| !c.is_whitespace()).collect::<String>());
        }
    }
    for body in items {
        for path in expand(&body) {
            let mut segs = path.split("::").map(String::from).collect::<Vec<_>>();
            let mut abs = match segs.first().map(String::as_str) {
                Some("crate") => Vec::new(),
                Some("super") => {
                    let mut base = here.clone();
                    while segs.first().is_some_and(|s| s == "super") {
                        base.pop();
                        segs.remove(0);
                    }
                    segs.insert(0, "self".into());
                    base
                }
                Some("self") => here.clone(),
                // A child module named without `self::` (`pub use config::Config` in a mod.rs).
                Some(child) if children.contains(child) => {
                    segs.insert(0, "self".into());
                    here.clone()
                }
                Some(krate) => {
                    external.insert(krate.to_string());
                    continue;
                }
                None => continue,
            };
            abs.extend(segs.into_iter().skip(1));
            paths.push(abs);
        }
    }
    (paths, external)
}

/// `a::{b, c::{d, e}}` -> `a::b`, `a::c::d`, `a::c::e`.
fn expand(body: &str) -> Vec<String> {
    let Some(open) = body.find('{') else { return vec![body.to_string()] };
    let prefix = &body[..open];
    let inner = &body[open + 1..body.rfind('}').unwrap_or(body.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts.into_iter().filter(|p| !p.is_empty()).flat_map(|p| expand(&format!("{prefix}{p}"))).collect()
}

/// The file a resolved path lands in: its longest prefix that is a module.
fn target(path: &[String], mods: &BTreeMap<String, String>) -> Option<String> {
    (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|m| mods.contains_key(m))
}

#[test]
fn the_core_imports_nothing_but_itself_and_plain_data_crates() {
    let mods = modules();
    for (module, text) in mods.iter().filter(|(m, _)| m.starts_with("core")) {
        let (paths, external) = uses(module, text, &mods);
        for p in paths {
            assert_eq!(p.first().map(String::as_str), Some("core"), "{module} imports {}", p.join("::"));
        }
        let io: Vec<&String> =
            external.iter().filter(|k| !["std", "serde", "humantime", "thiserror"].contains(&k.as_str())).collect();
        assert!(io.is_empty(), "{module} uses {io:?}");
        for io in ["std::fs", "std::net", "std::process", "std::thread", "std::time::Instant", "SystemTime"] {
            assert!(!text.contains(io), "{module} uses {io}");
        }
    }
}

#[test]
fn telemetry_does_not_import_the_live_controller() {
    let mods = modules();
    for (module, text) in mods.iter().filter(|(m, _)| m.starts_with("telemetry")) {
        for p in uses(module, text, &mods).0 {
            let top = p.first().map(String::as_str);
            assert!(!matches!(top, Some("live" | "sim" | "cli")), "{module} imports {}", p.join("::"));
        }
    }
}

#[test]
fn no_two_files_import_each_other() {
    let mods = modules();
    // file -> files it imports, leaving out itself and its ancestors.
    let mut edges: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (module, text) in &mods {
        let set = edges.entry(module).or_default();
        for p in uses(module, text, &mods).0 {
            if let Some(t) = target(&p, &mods) {
                // A child importing from its parent is where shared definitions live; a parent
                // naming its children is how it declares and re-exports them.
                let ancestor = module.starts_with(&format!("{t}::"));
                let descendant = t.starts_with(&format!("{module}::"));
                if t != *module && !ancestor && !descendant {
                    set.insert(t);
                }
            }
        }
    }
    // A cycle is a path back to where it started; report the first one found from each file.
    let mut cycles = Vec::new();
    for start in edges.keys() {
        let mut stack: Vec<(String, Vec<String>)> = vec![(start.to_string(), vec![start.to_string()])];
        let mut seen = BTreeSet::new();
        while let Some((at, path)) = stack.pop() {
            for next in edges.get(at.as_str()).into_iter().flatten() {
                if next == start {
                    cycles.push(format!("{} -> {start}", path.join(" -> ")));
                    stack.clear();
                    break;
                }
                if seen.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next.clone(), p));
                }
            }
        }
    }
    assert!(cycles.is_empty(), "use cycles between files:\n{}", cycles.join("\n"));
}
