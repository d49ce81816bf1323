//! What Grafana sends to Prometheus for the chart's dashboards (`charts/colocate/files/
//! dashboards/*.json`): panel targets, annotation queries and `label_values` variable queries,
//! with Grafana's variables replaced as Grafana replaces them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

pub struct Dashboard {
    /// File name, e.g. `colocate-cluster.json`.
    pub file: String,
    pub json: Value,
}

/// One query of a panel.
pub struct Target {
    pub ref_id: String,
    pub expr: String,
    /// Grafana runs it at the end of the range only (otherwise as a range query).
    pub instant: bool,
    pub legend: String,
}

pub struct Panel {
    pub title: String,
    pub targets: Vec<Target>,
}

pub struct Annotation {
    pub name: String,
    pub expr: String,
}

/// A variable filled by `label_values(selector, label)`.
pub struct Variable {
    pub name: String,
    pub selector: String,
    pub label: String,
}

/// The dashboards the chart ships, by file name.
pub fn dashboards() -> Vec<Dashboard> {
    let dir = files_dir().join("dashboards");
    let mut out: Vec<Dashboard> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("a readable dashboard");
            let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            Dashboard { file: p.file_name().unwrap().to_string_lossy().into_owned(), json }
        })
        .collect();
    out.sort_by(|a, b| a.file.cmp(&b.file));
    out
}

/// `charts/colocate/files`: the dashboards and the rule file the chart deploys.
pub fn files_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("charts/colocate/files")
}

impl Dashboard {
    /// Panels with queries (rows have none), nested ones (collapsed rows) included.
    pub fn panels(&self) -> Vec<Panel> {
        fn walk(panels: &Value, out: &mut Vec<Panel>) {
            for p in panels.as_array().into_iter().flatten() {
                let targets: Vec<Target> = p["targets"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| Target {
                        ref_id: t["refId"].as_str().unwrap_or("?").to_string(),
                        expr: t["expr"].as_str().expect("a Prometheus target has an expr").to_string(),
                        instant: t["instant"].as_bool().unwrap_or(false),
                        legend: t["legendFormat"].as_str().unwrap_or_default().to_string(),
                    })
                    .collect();
                if !targets.is_empty() {
                    out.push(Panel { title: p["title"].as_str().unwrap_or("?").to_string(), targets });
                }
                walk(&p["panels"], out);
            }
        }
        let mut out = Vec::new();
        walk(&self.json["panels"], &mut out);
        out
    }

    pub fn annotations(&self) -> Vec<Annotation> {
        let list = self.json["annotations"]["list"].as_array().into_iter().flatten();
        list.filter_map(|a| {
            let expr = a["expr"].as_str()?;
            Some(Annotation { name: a["name"].as_str().unwrap_or("?").to_string(), expr: expr.to_string() })
        })
        .collect()
    }

    pub fn variables(&self) -> Vec<Variable> {
        let list = self.json["templating"]["list"].as_array().into_iter().flatten();
        list.filter(|v| v["type"] == "query")
            .map(|v| {
                let q = v["query"]["query"].as_str().or(v["definition"].as_str()).unwrap_or_default();
                let inner = q.trim().strip_prefix("label_values(").and_then(|r| r.strip_suffix(')'));
                let (selector, label) = inner
                    .and_then(|i| i.rsplit_once(','))
                    .unwrap_or_else(|| panic!("variable {}: not label_values(selector, label): {q}", v["name"]));
                Variable {
                    name: v["name"].as_str().unwrap_or("?").to_string(),
                    selector: selector.trim().to_string(),
                    label: label.trim().to_string(),
                }
            })
            .collect()
    }
}

/// Grafana's built-in interval variables and the dashboard variables' selected values.
pub struct Variables {
    /// `$__interval`: the step of the range queries.
    pub interval: String,
    /// `$__rate_interval`: max(`$__interval` + scrape interval, 4 × scrape interval).
    pub rate_interval: String,
    /// `$__range`: the dashboard's time range.
    pub range: String,
    /// Dashboard variable name to its selected values.
    pub selected: BTreeMap<String, Vec<String>>,
}

impl Variables {
    /// `expr` as Grafana sends it; panics naming a variable it does not know (a typo in a
    /// dashboard would otherwise reach Prometheus as a parse error or, worse, a literal `$`).
    pub fn substitute(&self, expr: &str) -> String {
        let mut values: Vec<(String, String)> = vec![
            ("__rate_interval".into(), self.rate_interval.clone()),
            ("__interval".into(), self.interval.clone()),
            ("__range".into(), self.range.clone()),
        ];
        values.extend(self.selected.iter().map(|(k, v)| (k.clone(), multi_value(v))));
        let mut out = String::new();
        let mut rest = expr;
        while let Some(at) = rest.find('$') {
            out.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            let (name, len) = match after.strip_prefix('{') {
                Some(braced) => {
                    let end = braced.find('}').unwrap_or_else(|| panic!("unclosed ${{ in {expr}"));
                    (&braced[..end], end + 2)
                }
                None => {
                    let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
                    (&after[..end], end)
                }
            };
            let value = values.iter().find(|(k, _)| k == name).map(|(_, v)| v);
            out.push_str(value.unwrap_or_else(|| panic!("unknown Grafana variable ${name} in {expr}")));
            rest = &after[len..];
        }
        out.push_str(rest);
        out
    }
}

/// A multi-value variable in a PromQL regex matcher, as Grafana's Prometheus data source
/// formats it: one value as is, several as `(a|b)`, regex metacharacters escaped (with the
/// backslash doubled for the PromQL string).
pub fn multi_value(values: &[String]) -> String {
    let escaped: Vec<String> = values
        .iter()
        .map(|v| {
            let mut e = String::new();
            for c in v.chars() {
                match c {
                    '\\' => e.push_str("\\\\\\\\"),
                    c if "$^*{}[]'+?.()|".contains(c) => {
                        e.push_str("\\\\");
                        e.push(c);
                    }
                    c => e.push(c),
                }
            }
            e
        })
        .collect();
    match escaped.as_slice() {
        [one] => one.clone(),
        many => format!("({})", many.join("|")),
    }
}

/// Label names a legend format uses (`{{job}} target` uses `job`).
pub fn legend_labels(legend: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = legend;
    while let Some(start) = rest.find("{{") {
        let Some(end) = rest[start..].find("}}") else { break };
        out.push(rest[start + 2..start + end].trim().to_string());
        rest = &rest[start + end + 2..];
    }
    out
}
