//! Kubernetes label selectors in their string form (`app=web,tier in (a,b),!canary`), as the
//! `/scale` subresource reports them in `status.selector`; used to find the pods an HPA scales.

use std::collections::BTreeMap;

use thiserror::Error;

use crate::live::names::{is_label_key, is_label_value};

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed selector; the empty selector matches everything (as in Kubernetes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Debug, Error, PartialEq, Eq)]
#[error("label selector `{selector}`: {problem}")]
pub struct SelectorError {
    pub selector: String,
    pub problem: String,
}

impl LabelSelector {
    pub fn parse(text: &str) -> Result<LabelSelector, SelectorError> {
        let fail = |problem: String| SelectorError { selector: text.to_string(), problem };
        let mut requirements = Vec::new();
        for part in split_top_level(text) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let requirement = if let Some(key) = part.strip_prefix('!') {
                Requirement::DoesNotExist(key.trim().to_string())
            } else if let Some((key, rest)) = split_word(part, " notin ") {
                Requirement::NotIn(key, set(rest).map_err(fail)?)
            } else if let Some((key, rest)) = split_word(part, " in ") {
                Requirement::In(key, set(rest).map_err(fail)?)
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Equals(k.trim().to_string(), v.trim().to_string())
            } else {
                Requirement::Exists(part.to_string())
            };
            let key = match &requirement {
                Requirement::Equals(k, _)
                | Requirement::NotEquals(k, _)
                | Requirement::In(k, _)
                | Requirement::NotIn(k, _)
                | Requirement::Exists(k)
                | Requirement::DoesNotExist(k) => k,
            };
            if !is_label_key(key) {
                return Err(fail(format!("`{part}` has no valid key")));
            }
            let values: &[String] = match &requirement {
                Requirement::Equals(_, v) | Requirement::NotEquals(_, v) => std::slice::from_ref(v),
                Requirement::In(_, vs) | Requirement::NotIn(_, vs) => vs,
                Requirement::Exists(_) | Requirement::DoesNotExist(_) => &[],
            };
            // A value no label can hold would make the requirement silently never match.
            if let Some(bad) = values.iter().find(|v| !is_label_value(v)) {
                return Err(fail(format!(
                    "`{part}`: `{bad}` is not a label value (at most 63 letters, digits, '-', '_' or '.', \
                     starting and ending with a letter or digit)"
                )));
            }
            requirements.push(requirement);
        }
        Ok(LabelSelector { requirements })
    }

    /// True for the selector that matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// From a `matchLabels` map (Deployment `spec.selector.matchLabels`).
    pub fn from_labels(labels: &BTreeMap<String, String>) -> LabelSelector {
        LabelSelector { requirements: labels.iter().map(|(k, v)| Requirement::Equals(k.clone(), v.clone())).collect() }
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn split_word(part: &str, word: &str) -> Option<(String, String)> {
    part.find(word).map(|i| (part[..i].trim().to_string(), part[i + word.len()..].trim().to_string()))
}

fn set(text: String) -> Result<Vec<String>, String> {
    let inner = text
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| format!("`{text}` should be a set in parentheses, like (a, b)"))?;
    Ok(inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn equality_and_set_requirements() {
        let s = LabelSelector::parse("app=web, tier in (front, edge),!canary,track!=beta").unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "edge")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "back")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "edge"), ("canary", "1")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "edge"), ("track", "beta")])));
        assert!(!s.matches(&labels(&[("tier", "edge")])));
    }

    #[test]
    fn exists_notin_and_double_equals() {
        let s = LabelSelector::parse("app==web,env notin (dev),gpu").unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("gpu", "")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("gpu", ""), ("env", "dev")])));
        assert!(!s.matches(&labels(&[("app", "web")])));
    }

    #[test]
    fn empty_selector_matches_all_and_bad_ones_are_named() {
        assert!(LabelSelector::parse("").unwrap().matches(&labels(&[("x", "y")])));
        let e = LabelSelector::parse("app in web").unwrap_err();
        assert!(e.to_string().contains("app in web") && e.problem.contains("parentheses"), "{e}");
        assert!(LabelSelector::parse("=web").is_err());
        // Forms that parse but could never match a label are refused, naming the part.
        for (bad, part) in [
            ("app=a b", "app=a b"),
            ("a!b", "a!b"),
            ("a=b in (c)", "a=b in (c)"),
            ("tier in (front,-x)", "tier in (front,-x)"),
            ("Example.com/app=x", "Example.com/app=x"),
        ] {
            let e = LabelSelector::parse(bad).unwrap_err();
            assert!(e.problem.contains(&format!("`{part}`")), "{bad}: {e}");
        }
        let ok = LabelSelector::parse("app.kubernetes.io/name=web,tier notin (a-1,b_2),x.y/z").unwrap();
        assert!(ok.matches(&labels(&[("app.kubernetes.io/name", "web"), ("x.y/z", ""), ("tier", "c")])));
    }
}
