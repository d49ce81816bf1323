//! The module graph reads top-down, checked on the source: the decision core (its own crate,
//! crates/core, so the compiler already keeps the rest of colocate out of it) uses no I/O crate
//! and no clock, telemetry does not import the live controller, and no two files of a crate
//! depend on each other through a cycle, whether a file names the other in a `use` or inline
//! (`super::window::WINDOW_STEP_S` in an expression is as much a dependency as an import). A
//! child importing from its parent module, or a parent naming its children, is not a cycle: that
//! is where shared definitions live, and how children are declared.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate of the workspace: its manifest and source folder, relative to the repository root.
struct Crate {
    manifest: &'static str,
    src: &'static str,
}

const COLOCATE: Crate = Crate { manifest: "Cargo.toml", src: "src" };
const CORE: Crate = Crate { manifest: "crates/core/Cargo.toml", src: "crates/core/src" };

fn modules() -> BTreeMap<String, String> {
    modules_of(&COLOCATE)
}

/// Every `.rs` file under the crate's source folder, as its module path (`src/sim/engine.rs` ->
/// `sim::engine`, `src/live/mod.rs` -> `live`), with its text.
fn modules_of(krate: &Crate) -> BTreeMap<String, String> {
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
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(krate.src);
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

/// A file's code without its comments, string and character literals: a path in a doc link,
/// a message or a format string is no dependency.
fn code(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(k).copied().unwrap_or('\0');
        let word = |k: usize| k < c.len() && (c[k].is_alphanumeric() || c[k] == '_');
        // An `r` that starts a literal: not inside an identifier, except a byte string's `br`.
        let starts_literal = i == 0 || !word(i - 1) || (c[i - 1] == 'b' && (i == 1 || !word(i - 2)));
        if c[i] == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && at(i + 1) == '*' {
            // Block comments nest.
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c[i] == 'r' && starts_literal && at((i + 1..).find(|&k| at(k) != '#').unwrap()) == '"' {
            // A raw string: r"..." or r#"..."#, closed by a quote and as many hashes.
            let mut k = i + 1;
            let mut hashes = 0;
            while at(k) == '#' {
                hashes += 1;
                k += 1;
            }
            k += 1;
            loop {
                if k >= c.len() {
                    break;
                }
                if c[k] == '"' && (1..=hashes).all(|h| at(k + h) == '#') {
                    k += 1 + hashes;
                    break;
                }
                k += 1;
            }
            i = k;
            out.push_str("\"\"");
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c[i] == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            // A character literal ('x', '\n', '\''); a lifetime ('a) stays.
            i += 1;
            if at(i) == '\\' {
                i += 2;
            } else {
                i += 1;
            }
            while i < c.len() && c[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// Identifiers (and numbers), `::`, and single punctuation characters.
fn tokens(code: &str) -> Vec<String> {
    let c: Vec<char> = code.chars().collect();
    let word = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if word(c[i]) {
            let start = i;
            while i < c.len() && word(c[i]) {
                i += 1;
            }
            out.push(c[start..i].iter().collect());
        } else if c[i] == ':' && c.get(i + 1) == Some(&':') {
            out.push("::".into());
            i += 2;
        } else {
            if !c[i].is_whitespace() {
                out.push(c[i].to_string());
            }
            i += 1;
        }
    }
    out
}

fn is_ident(t: &str) -> bool {
    t.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// The crates a package depends on, as code names them (`serde_json` for `serde-json`), and
/// the standard library's.
fn dependencies(krate: &Crate) -> BTreeSet<String> {
    let manifest = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(krate.manifest)).unwrap();
    let mut deps: BTreeSet<String> = ["std", "core", "alloc"].map(String::from).into();
    let mut in_deps = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line.ends_with("dependencies]");
        } else if let Some((name, _)) = line.split_once('=').filter(|_| in_deps && !line.starts_with('#')) {
            deps.insert(name.trim().replace('-', "_"));
        }
    }
    deps
}

/// The crate paths a file names, each resolved to an absolute path from the crate root, and the
/// external crates it uses. Read are its `use` items (multi-line ones too, in test modules too:
/// a test that imports a file is an edge like any other) and the paths written inline in
/// expressions, types and attributes: `crate::x::y`, `super::x::y`, `self::x::y`, and `x::y`
/// where `x` is a name a `use` brought in, a child module, or a sibling module. `super` is
/// counted from the module the path is written in, inline `mod` blocks included.
fn uses(
    module: &str,
    text: &str,
    mods: &BTreeMap<String, String>,
    deps: &BTreeSet<String>,
) -> (Vec<Vec<String>>, BTreeSet<String>) {
    let file: Vec<String> = module.split("::").map(String::from).collect();
    let children_of = |m: &[String]| -> BTreeSet<String> {
        let prefix = format!("{}::", m.join("::"));
        mods.keys().filter_map(|k| k.strip_prefix(&prefix)).filter(|c| !c.contains("::")).map(String::from).collect()
    };
    let children = children_of(&file);
    let siblings = children_of(&file[..file.len() - 1]);
    let toks = tokens(&code(text));

    // Resolves a path written in module `here`; `None` for an external crate or a name that is
    // not a module path (a type, a local, a primitive).
    enum Resolved {
        Internal(Vec<String>),
        External(String),
        Other,
    }
    let resolve = |segs: &[String], here: &[String], bound: &BTreeMap<String, Vec<String>>, inline: bool| {
        let rest = |skip: usize, mut base: Vec<String>| {
            base.extend(segs[skip..].iter().cloned());
            Resolved::Internal(base)
        };
        match segs[0].as_str() {
            "crate" => rest(1, Vec::new()),
            "super" => {
                let mut base = here.to_vec();
                let ups = segs.iter().take_while(|s| *s == "super").count();
                base.truncate(base.len().saturating_sub(ups));
                rest(ups, base)
            }
            "self" => rest(1, here.to_vec()),
            first if inline && bound.contains_key(first) => rest(1, bound[first].clone()),
            first if here == file && children.contains(first) => rest(0, file.clone()),
            first if inline && here == file && siblings.contains(first) => rest(0, file[..file.len() - 1].to_vec()),
            first if !inline || deps.contains(first) => Resolved::External(first.to_string()),
            _ => Resolved::Other,
        }
    };

    let mut paths = Vec::new();
    let mut external = BTreeSet::new();
    // Names `use` items bring in, by what they resolve to (internal paths only).
    let mut bound: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // Inline `mod name {` blocks: their names and the brace depth inside them.
    let mut scope: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < toks.len() {
        let here: Vec<String> = file.iter().cloned().chain(scope.iter().map(|(m, _)| m.clone())).collect();
        let t = toks[i].as_str();
        match t {
            "{" => depth += 1,
            "}" => {
                if scope.last().is_some_and(|(_, d)| *d == depth) {
                    scope.pop();
                }
                depth -= 1;
            }
            "mod" if toks.get(i + 2).is_some_and(|t| t == "{") => {
                scope.push((toks[i + 1].clone(), depth + 1));
                depth += 1;
                i += 3;
                continue;
            }
            "use" => {
                // The item up to its `;`, `as` aliases marked with `@`.
                let mut body = String::new();
                i += 1;
                while i < toks.len() && toks[i] != ";" {
                    if toks[i] == "as" {
                        body.push('@');
                    } else {
                        body.push_str(&toks[i]);
                    }
                    i += 1;
                }
                for item in expand(&body) {
                    let (path, alias) = item.split_once('@').map_or((item.as_str(), None), |(p, a)| (p, Some(a)));
                    let mut segs: Vec<String> = path.split("::").map(String::from).collect();
                    if segs.last().is_some_and(|s| s == "self") {
                        segs.pop();
                    }
                    if segs.is_empty() || segs[0].is_empty() {
                        continue;
                    }
                    match resolve(&segs, &here, &bound, false) {
                        Resolved::Internal(abs) => {
                            let name = alias.or(segs.last().map(String::as_str)).unwrap_or_default();
                            if name != "*" && name != "_" {
                                bound.insert(name.to_string(), abs.clone());
                            }
                            paths.push(abs);
                        }
                        Resolved::External(krate) => {
                            external.insert(krate);
                        }
                        Resolved::Other => {}
                    }
                }
            }
            _ if is_ident(t)
                && toks.get(i + 1).is_some_and(|n| n == "::")
                && toks.get(i + 2).is_some_and(|n| is_ident(n))
                && (i == 0 || toks[i - 1] != "::") =>
            {
                let mut segs = vec![t.to_string()];
                let mut k = i + 1;
                while toks.get(k).is_some_and(|n| n == "::") && toks.get(k + 1).is_some_and(|n| is_ident(n)) {
                    segs.push(toks[k + 1].clone());
                    k += 2;
                }
                match resolve(&segs, &here, &bound, true) {
                    Resolved::Internal(abs) => paths.push(abs),
                    Resolved::External(krate) => {
                        external.insert(krate);
                    }
                    Resolved::Other => {}
                }
                i = k;
                continue;
            }
            _ => {}
        }
        i += 1;
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

/// What pure decision logic may use: the standard library and plain-data crates.
const CORE_CRATES: [&str; 4] = ["std", "serde", "humantime", "thiserror"];

#[test]
fn the_core_uses_no_io_crate_and_no_clock() {
    let deps = dependencies(&CORE);
    let extra: Vec<&String> = deps
        .iter()
        .filter(|d| !CORE_CRATES.contains(&d.as_str()) && !["core", "alloc"].contains(&d.as_str()))
        .collect();
    assert!(extra.is_empty(), "{} depends on {extra:?}", CORE.manifest);
    let mods = modules_of(&CORE);
    assert!(mods.contains_key("decide"), "no core modules found under {}", CORE.src);
    for (module, text) in &mods {
        let (_, external) = uses(module, text, &mods, &deps);
        let io: Vec<&String> = external.iter().filter(|k| !CORE_CRATES.contains(&k.as_str())).collect();
        assert!(io.is_empty(), "core::{module} uses {io:?}");
        for io in ["std::fs", "std::net", "std::process", "std::thread", "std::time::Instant", "SystemTime"] {
            assert!(!text.contains(io), "core::{module} uses {io}");
        }
    }
}

#[test]
fn telemetry_does_not_import_the_live_controller() {
    let mods = modules();
    let deps = dependencies(&COLOCATE);
    for (module, text) in mods.iter().filter(|(m, _)| m.starts_with("telemetry")) {
        for p in uses(module, text, &mods, &deps).0 {
            let top = p.first().map(String::as_str);
            assert!(!matches!(top, Some("live" | "sim" | "cli")), "{module} imports {}", p.join("::"));
        }
    }
}

/// Master protocol v1 has one owner of its shapes and semantics, which both sides build on: it
/// imports nothing of the rest of the crate, and no HTTP or Kubernetes crate, so that the
/// controller's client and the reference master each bring their own transport.
#[test]
fn the_master_protocol_imports_nothing_but_itself_and_no_transport() {
    let mods = modules();
    let deps = dependencies(&COLOCATE);
    for (module, text) in mods.iter().filter(|(m, _)| m.starts_with("master_protocol")) {
        let (paths, external) = uses(module, text, &mods, &deps);
        for p in paths {
            assert_eq!(p.first().map(String::as_str), Some("master_protocol"), "{module} imports {}", p.join("::"));
        }
        let allowed = ["std", "serde", "serde_json", "tokio", "tracing", "thiserror"];
        let other: Vec<&String> = external.iter().filter(|k| !allowed.contains(&k.as_str())).collect();
        assert!(other.is_empty(), "{module} uses {other:?}");
    }
}

/// The reference master is a program of its own beside the controller: it builds on the
/// protocol and, of the live side, only on what every worker backend over Kubernetes shares;
/// nothing of the library imports it (the binary's `example-master` command runs it).
#[test]
fn the_reference_master_and_the_controller_are_apart() {
    let mods = modules();
    let allowed: [&[&str]; 5] =
        [&["reference_master"], &["master_protocol"], &["core"], &["live", "kube_backend"], &["live", "error_chain"]];
    let deps = dependencies(&COLOCATE);
    for (module, text) in &mods {
        for p in uses(module, text, &mods, &deps).0 {
            let imports = |prefix: &[&str]| p.len() >= prefix.len() && prefix.iter().zip(&p).all(|(a, b)| a == b);
            if module.starts_with("reference_master") {
                assert!(allowed.iter().any(|a| imports(a)), "{module} imports {}", p.join("::"));
            } else {
                assert!(!imports(&["reference_master"]), "{module} imports {}", p.join("::"));
            }
        }
    }
}

#[test]
fn no_two_files_import_each_other() {
    for krate in [&COLOCATE, &CORE] {
        let cycles = cycles(&modules_of(krate), &dependencies(krate));
        assert!(cycles.is_empty(), "cycles between files of {}:\n{}", krate.src, cycles.join("\n"));
    }
}

/// Each file's first path back to itself through the files it imports.
fn cycles(mods: &BTreeMap<String, String>, deps: &BTreeSet<String>) -> Vec<String> {
    // file -> files it imports, leaving out itself and its ancestors.
    let mut edges: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (module, text) in mods {
        let set = edges.entry(module).or_default();
        for p in uses(module, text, mods, deps).0 {
            if let Some(t) = target(&p, mods) {
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
    cycles
}

#[test]
fn inline_paths_count_and_comments_and_literals_do_not() {
    let mods: BTreeMap<String, String> =
        ["sim", "sim::cluster", "sim::engine", "sim::jobs", "sim::report", "sim::window"]
            .map(|m| (m.to_string(), String::new()))
            .into();
    let text = r##"
use super::engine::World;
/// Paces the loop ([`WINDOW_STEP_S`](super::jobs::Phase)).
fn begin(pace: &mut Pace) {
    let quote = '"';
    let path = "crate::sim::report::Report";
    pace.begin_pass(super::window::WINDOW_STEP_S); // super::report::x
    /* crate::sim::report::y */
}
mod tests {
    fn t() {
        super::super::engine::World::new();
    }
}
"##;
    let (paths, external) = uses("sim::cluster", text, &mods, &dependencies(&COLOCATE));
    let targets: BTreeSet<String> = paths.iter().filter_map(|p| target(p, &mods)).collect();
    assert_eq!(targets, BTreeSet::from(["sim::engine".to_string(), "sim::window".to_string()]));
    assert!(external.is_empty(), "{external:?}");
}
