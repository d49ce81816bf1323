//! Just enough of PromQL's lexical structure to list the metrics an expression selects and the
//! label matchers it puts on them. Parsing proper is promtool's job (tests/dashboards.rs runs
//! `promtool check rules` on every expression); this only has to find the names reliably in
//! expressions promtool accepts.

/// A vector selector: metric name and its matchers as (label, operator, value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub metric: String,
    pub matchers: Vec<(String, String, String)>,
}

/// Keywords that look like identifiers but name no metric.
const KEYWORDS: [&str; 9] = ["and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "start"];
/// Aggregation operators: `sum by (x) (...)` puts the label list between the name and its `(`.
const AGGREGATIONS: [&str; 14] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
/// Keywords followed by a parenthesized list of label names.
const LABEL_LIST_KEYWORDS: [&str; 6] = ["by", "without", "on", "ignoring", "group_left", "group_right"];

fn ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Index just past the string literal starting at `i` (a quote character).
fn skip_string(s: &[char], i: usize) -> usize {
    let quote = s[i];
    let mut j = i + 1;
    while j < s.len() && s[j] != quote {
        j += if s[j] == '\\' && quote != '`' { 2 } else { 1 };
    }
    j + 1
}

/// Index just past the bracketed group starting at `i` (`(`, `[` or `{`), strings respected.
fn skip_group(s: &[char], i: usize) -> usize {
    let (open, close) = (
        s[i],
        match s[i] {
            '(' => ')',
            '[' => ']',
            _ => '}',
        },
    );
    let mut depth = 0;
    let mut j = i;
    while j < s.len() {
        match s[j] {
            '"' | '\'' | '`' => {
                j = skip_string(s, j);
                continue;
            }
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
        j += 1;
    }
    s.len()
}

fn next_non_space(s: &[char], mut i: usize) -> Option<(usize, char)> {
    while i < s.len() && s[i].is_whitespace() {
        i += 1;
    }
    s.get(i).map(|c| (i, *c))
}

/// The matchers inside `{...}` (without the braces): `label op "value"`, comma separated.
fn matchers(body: &str) -> Vec<(String, String, String)> {
    let s: Vec<char> = body.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if !ident_start(s[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < s.len() && ident_char(s[i]) {
            i += 1;
        }
        let label: String = s[start..i].iter().collect();
        let Some((op_at, _)) = next_non_space(&s, i) else { break };
        let op_len = if s[op_at..].starts_with(&['=', '~'])
            || s[op_at..].starts_with(&['!', '='])
            || s[op_at..].starts_with(&['!', '~'])
        {
            2
        } else {
            1
        };
        let op: String = s[op_at..op_at + op_len].iter().collect();
        let Some((v_at, _)) = next_non_space(&s, op_at + op_len) else { break };
        let end = skip_string(&s, v_at);
        out.push((label, op, s[v_at + 1..end - 1].iter().collect()));
        i = end;
    }
    out
}

/// Every vector selector in `expr`, in order.
pub fn selectors(expr: &str) -> Vec<Selector> {
    let s: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if matches!(c, '"' | '\'' | '`') {
            i = skip_string(&s, i);
        } else if c == '[' || c == '{' {
            i = skip_group(&s, i); // durations, subqueries; a bare `{...}` selector is not used here
        } else if c.is_ascii_digit() || (c == '.' && s.get(i + 1).is_some_and(char::is_ascii_digit)) {
            // Numbers and durations (`1e3`, `0.5`, `5m` after offset).
            while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == '.') {
                i += 1;
            }
        } else if ident_start(c) {
            let start = i;
            while i < s.len() && ident_char(s[i]) {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            let next = next_non_space(&s, i);
            if LABEL_LIST_KEYWORDS.contains(&word.as_str()) {
                if let Some((at, '(')) = next {
                    i = skip_group(&s, at);
                }
            } else if KEYWORDS.contains(&word.to_lowercase().as_str())
                || AGGREGATIONS.contains(&word.as_str())
                || matches!(next, Some((_, '(')))
            {
                // A keyword, or a function or aggregation applied to what follows.
            } else {
                let mut sel = Selector { metric: word, matchers: Vec::new() };
                if let Some((at, '{')) = next {
                    let end = skip_group(&s, at);
                    sel.matchers = matchers(&s[at + 1..end - 1].iter().collect::<String>());
                    i = end;
                }
                out.push(sel);
            }
        } else {
            i += 1;
        }
    }
    out
}
