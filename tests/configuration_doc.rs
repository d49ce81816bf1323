//! docs/configuration.md against `colocate check-config`, so that the page cannot drift from
//! what the controller accepts:
//! - every key the file accepts has a row, and every row names a key that exists. The keys are
//!   not listed here: they are read from check-config's own refusals, whose unknown-field error
//!   lists every field a block expects; each field is then probed in turn to find nested blocks
//!   (`run.master_tls`, `services[].load.scrape`), so a key added anywhere is found;
//! - each documented default is check-config's effective value for an empty file;
//! - the values an enumerated key takes (`run.log_format`) are named in its row;
//! - the flags and environment variables are `colocate run`'s, and each of those is documented;
//! - the page's YAML examples pass check-config, and the full example sets every key.

#[path = "support/certs.rs"]
mod certs;
#[path = "support/settings.rs"]
mod settings;

use settings::{printed_settings, same_value};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const DOC: &str = "docs/configuration.md";

/// A key no block accepts, placed where a block's keys are probed.
const PROBE: &str = "zz_not_a_configuration_key";

fn doc_text() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(DOC);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

struct Checked {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// `colocate check-config` on a file holding `yaml`.
fn check_config(yaml: &str) -> Checked {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_colocate")).arg("check-config").arg(&path).output().unwrap();
    Checked {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// One step of a key path: a field of a map, or an item of a list.
#[derive(Clone, Debug)]
enum Step {
    Field(String),
    Item,
}

/// The path as the page writes it: `services[].load.scrape.url`.
fn doc_path(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Field(f) if out.is_empty() => out.push_str(f),
            Step::Field(f) => {
                out.push('.');
                out.push_str(f);
            }
            Step::Item => out.push_str("[]"),
        }
    }
    out
}

/// The path as check-config's errors write it: `services[0].load.scrape.url`.
fn error_path(path: &[Step]) -> String {
    doc_path(path).replace("[]", "[0]")
}

/// A file with `leaf` (JSON, which is YAML) at `path`.
fn file_with(path: &[Step], leaf: &str) -> String {
    path.iter().rev().fold(leaf.to_string(), |inner, step| match step {
        Step::Field(f) => format!("{{\"{f}\": {inner}}}"),
        Step::Item => format!("[{inner}]"),
    })
}

/// The backquoted words of `text`.
fn quoted(text: &str) -> Vec<String> {
    text.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// What a map with an unknown key at `path` tells about the value there.
enum Probed {
    /// A block: the keys it accepts.
    Fields(Vec<String>),
    /// An enumeration: the values it takes.
    Variants(Vec<String>),
    /// Anything else: a plain value (the error says what it expected).
    Value(String),
}

fn probe(path: &[Step]) -> Probed {
    let at = error_path(path);
    let unknown = if at.is_empty() { PROBE.to_string() } else { format!("{at}.{PROBE}") };
    let as_map = check_config(&file_with(path, &format!("{{\"{PROBE}\": 1}}")));
    if let Some(rest) = error_line(&as_map.stderr, &format!(": {unknown}: unknown field")) {
        assert_eq!(as_map.code, Some(2), "{}", as_map.stderr);
        return Probed::Fields(quoted(rest.split_once("expected").map_or("", |(_, e)| e)));
    }
    assert_eq!(as_map.code, Some(2), "a map at {at} was accepted: {}", as_map.stdout);
    // An enumeration is written as a string: an unknown one lists the values it takes.
    let as_string = check_config(&file_with(path, &format!("\"{PROBE}\"")));
    if let Some(rest) = error_line(&as_string.stderr, &format!(": {at}: unknown variant `{PROBE}`")) {
        return Probed::Variants(quoted(rest.split_once("expected").map_or("", |(_, e)| e)));
    }
    Probed::Value(as_map.stderr)
}

/// What follows `marker` on the first line of `stderr` that holds it.
fn error_line(stderr: &str, marker: &str) -> Option<String> {
    stderr.lines().find_map(|l| l.split_once(marker).map(|(_, rest)| rest.to_string()))
}

/// Every key check-config accepts, as the page writes it, with the values of enumerated ones.
fn accepted_keys() -> BTreeMap<String, Vec<String>> {
    let mut keys = BTreeMap::new();
    let Probed::Fields(top) = probe(&[]) else { panic!("the top level of the file is not a block") };
    assert!(top.len() >= 3, "no expected keys in the top level's unknown-field error: {top:?}");
    walk(&[], top, &mut keys);
    keys
}

fn walk(block: &[Step], fields: Vec<String>, keys: &mut BTreeMap<String, Vec<String>>) {
    for field in fields {
        let mut path = block.to_vec();
        path.push(Step::Field(field));
        let mut variants = Vec::new();
        match probe(&path) {
            Probed::Fields(inner) => walk(&path, inner, keys),
            Probed::Variants(v) => variants = v,
            // A list: its items may be blocks (`services[]`).
            Probed::Value(error) if error.contains("expected a sequence") => {
                let mut item = path.clone();
                item.push(Step::Item);
                if let Probed::Fields(inner) = probe(&item) {
                    walk(&item, inner, keys);
                }
            }
            Probed::Value(_) => {}
        }
        keys.insert(doc_path(&path), variants);
    }
}

/// A row of one of the page's key tables: its cells by the table's column names.
struct Row {
    line: usize,
    cells: BTreeMap<String, String>,
}

impl Row {
    fn cell(&self, column: &str) -> &str {
        self.cells.get(column).map_or("", String::as_str)
    }
}

fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|c| c.trim().to_string()).collect()
}

/// The rows of every table whose first column is `Key`, by the key in their first code span.
fn documented_rows(doc: &str) -> BTreeMap<String, Row> {
    let lines: Vec<&str> = doc.lines().collect();
    let mut rows = BTreeMap::new();
    let mut header: Option<Vec<String>> = None;
    for (i, line) in lines.iter().enumerate() {
        if !line.trim_start().starts_with('|') {
            header = None;
            continue;
        }
        let row = cells(line);
        if row.iter().all(|c| c.chars().all(|ch| ch == '-' || ch == ':')) {
            continue;
        }
        let Some(columns) = &header else {
            header = Some(row);
            continue;
        };
        if columns.first().map(String::as_str) != Some("Key") {
            continue;
        }
        assert_eq!(
            row.len(),
            columns.len(),
            "{DOC}:{}: {} cells, the table has {} columns",
            i + 1,
            row.len(),
            columns.len()
        );
        let key = quoted(&row[0]).into_iter().next().unwrap_or_else(|| panic!("{DOC}:{}: no `key` in the row", i + 1));
        let cells = columns.iter().cloned().zip(row).collect();
        if let Some(earlier) = rows.insert(key.clone(), Row { line: i + 1, cells }) {
            panic!("{DOC}: `{key}` has two rows (lines {} and {})", earlier.line, i + 1);
        }
    }
    rows
}

#[test]
fn every_accepted_key_has_a_row_and_every_row_an_accepted_key() {
    let accepted = accepted_keys();
    for key in ["controller.target_utilization", "run.master_tls.ca_file", "services[].load.scrape.url"] {
        assert!(accepted.contains_key(key), "the probe did not find {key}: {:?}", accepted.keys());
    }
    assert!(
        accepted.get("run.log_format").is_some_and(|v| !v.is_empty()),
        "the probe found no values of run.log_format"
    );
    let rows = documented_rows(&doc_text());
    let missing: Vec<_> = accepted.keys().filter(|k| !rows.contains_key(*k)).collect();
    let stale: Vec<_> = rows.keys().filter(|k| !accepted.contains_key(*k)).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "{DOC} is out of step with `colocate check-config`:\n  keys without a row: {missing:?}\n  rows of keys it \
         refuses: {stale:?}"
    );
    for (key, variants) in &accepted {
        let row = &rows[key];
        let named: BTreeSet<String> = row.cells.values().flat_map(|c| quoted(c)).collect();
        for v in variants {
            assert!(named.contains(v), "{DOC}:{}: `{key}` takes `{v}`, which its row does not name", row.line);
        }
    }
}

/// `key: value` lines of `check-config`'s output, as `controller.key` and `run.key`.
fn effective_defaults() -> BTreeMap<String, String> {
    let checked = check_config("{}\n");
    assert_eq!(checked.code, Some(0), "an empty file is refused: {}", checked.stderr);
    let out = printed_settings(&checked.stdout);
    assert!(out.len() >= 30, "too few settings in check-config's output:\n{}", checked.stdout);
    out
}

#[test]
fn documented_defaults_are_check_configs() {
    let rows = documented_rows(&doc_text());
    let mut wrong = Vec::new();
    for (key, value) in effective_defaults() {
        let row = rows.get(&key).unwrap_or_else(|| panic!("check-config prints `{key}`, which {DOC} has no row for"));
        // What check-config prints for an unset value ("(none)", "(all)", "system roots") is
        // prose in the page.
        if value.starts_with('(') || value == "system roots" {
            continue;
        }
        let default = row.cell("Default");
        match quoted(default).first() {
            Some(documented) if same_value(documented, &value) => {}
            _ => wrong.push(format!("{DOC}:{}: `{key}` defaults to `{value}`; the page says: {default}", row.line)),
        }
    }
    assert!(
        wrong.is_empty(),
        "defaults out of step with `colocate check-config` on an empty file:\n{}",
        wrong.join("\n")
    );
}

/// `colocate run`'s flags and their environment variables, from its help.
fn run_flags() -> BTreeMap<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_colocate")).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut flags = BTreeMap::new();
    for line in help.lines() {
        let Some(flag) = line.split_whitespace().find(|w| w.starts_with("--")) else { continue };
        if flag == "--help" || flag == "--version" {
            continue;
        }
        let env = line.split_once("[env: ").map(|(_, rest)| rest.split(['=', ']']).next().unwrap_or("").to_string());
        flags.insert(flag.to_string(), env.unwrap_or_else(|| panic!("{flag} has no environment variable: {line}")));
    }
    assert!(flags.len() >= 10, "too few flags in `colocate run --help`:\n{help}");
    flags
}

#[test]
fn flags_and_environment_variables_are_colocate_runs() {
    let doc = doc_text();
    let rows = documented_rows(&doc);
    let flags = run_flags();
    for (key, row) in &rows {
        let flag = quoted(row.cell("Flag")).into_iter().next();
        let env = quoted(row.cell("Environment variable")).into_iter().next();
        match (&flag, &env) {
            (None, None) => {}
            (Some(flag), Some(env)) => match flags.get(flag) {
                Some(expected) if expected == env => {}
                Some(expected) => panic!("{DOC}:{}: `{key}`: {flag}'s variable is {expected}, not {env}", row.line),
                None => panic!("{DOC}:{}: `{key}`: `colocate run` has no {flag}", row.line),
            },
            _ => panic!("{DOC}:{}: `{key}` names a flag or a variable without the other", row.line),
        }
    }
    let named: BTreeSet<String> = doc.lines().filter(|l| !l.trim_start().starts_with("```")).flat_map(quoted).collect();
    for (flag, env) in &flags {
        assert!(named.contains(flag) && named.contains(env), "{DOC} does not name `colocate run {flag}` ({env})");
    }
}

/// The page's ```yaml blocks, with the heading each is under.
fn yaml_examples(doc: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut block: Option<String> = None;
    for line in doc.lines() {
        match &mut block {
            Some(text) if line.trim_start().starts_with("```") => {
                out.push((heading.clone(), std::mem::take(text)));
                block = None;
            }
            Some(text) => {
                text.push_str(line);
                text.push('\n');
            }
            None if line.trim_start().starts_with("```yaml") => block = Some(String::new()),
            None if line.starts_with('#') => heading = line.trim_start_matches('#').trim().to_string(),
            None => {}
        }
    }
    out
}

/// The example with its `*_file:` paths pointing at files made here (a CA bundle, a
/// certificate and its key, a token), so that check-config can read them.
fn with_local_files(yaml: &str, dir: &Path) -> String {
    let ca = certs::Ca::new("configuration example CA");
    let issued = ca.issue(&["colocate"]);
    let write = |name: &str, text: &str| -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let files = [
        ("ca_file:", write("ca.crt", &ca.pem)),
        ("cert_file:", write("tls.crt", &issued.cert_pem)),
        ("key_file:", write("tls.key", &issued.key_pem)),
        ("token_file:", write("token", "t0ken\n")),
    ];
    let mut out = String::new();
    for line in yaml.lines() {
        let mut line = line.to_string();
        if let Some((key, _)) = line.split_once(": ") {
            if let Some((_, path)) = files.iter().find(|(suffix, _)| format!("{key}:").ends_with(suffix)) {
                line = format!("{key}: {}", path.display());
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The key paths a YAML document sets, as the page writes them.
fn set_keys(value: &serde_norway::Value, prefix: &str, out: &mut BTreeSet<String>) {
    match value {
        serde_norway::Value::Mapping(map) => {
            for (k, v) in map {
                let k = k.as_str().expect("string keys");
                let path = if prefix.is_empty() { k.to_string() } else { format!("{prefix}.{k}") };
                out.insert(path.clone());
                set_keys(v, &path, out);
            }
        }
        serde_norway::Value::Sequence(items) if items.iter().any(|i| i.is_mapping()) => {
            for item in items {
                set_keys(item, &format!("{prefix}[]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_examples_pass_check_config_and_the_full_one_sets_every_key() {
    let doc = doc_text();
    let examples = yaml_examples(&doc);
    assert!(examples.len() >= 2, "{DOC}: no minimal and full examples");
    let dir = tempfile::tempdir().unwrap();
    for (heading, yaml) in &examples {
        let checked = check_config(&with_local_files(yaml, dir.path()));
        assert!(
            checked.code == Some(0) && checked.stderr.is_empty(),
            "{DOC}: the example under \"{heading}\" does not pass check-config cleanly:\n{}",
            checked.stderr
        );
    }
    let (_, full) = examples
        .iter()
        .find(|(heading, _)| heading == "Full example")
        .unwrap_or_else(|| panic!("{DOC}: no yaml block under \"## Full example\""));
    let mut set = BTreeSet::new();
    set_keys(&serde_norway::from_str(full).unwrap(), "", &mut set);
    let unset: Vec<_> = accepted_keys().into_keys().filter(|k| !set.contains(k)).collect();
    assert!(unset.is_empty(), "{DOC}: the full example does not set {unset:?}");
}
