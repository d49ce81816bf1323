//! YAML input files (scenarios, controller configuration): parsing with errors that name the
//! file, the line where the problem could be found, and the key path.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{}: cannot read {what}: {message}", file.display())]
    Read { file: PathBuf, what: &'static str, message: String },
    #[error("{}", Located(file, line, key, message))]
    Invalid { file: PathBuf, line: Option<usize>, key: String, message: String },
}

struct Located<'a>(&'a PathBuf, &'a Option<usize>, &'a String, &'a String);

impl fmt::Display for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.display())?;
        if let Some(l) = self.1 {
            write!(f, ":{l}")?;
        }
        if self.2.is_empty() {
            write!(f, ": {}", self.3)
        } else {
            write!(f, ": {}: {}", self.2, self.3)
        }
    }
}

/// Reads `path`; `what` names the kind of file in the error ("the scenario").
pub fn read(path: &Path, what: &'static str) -> Result<String, InputError> {
    std::fs::read_to_string(path).map_err(|e| InputError::Read {
        file: path.to_path_buf(),
        what,
        message: e.to_string(),
    })
}

/// Deserializes `text` (read from `path`) with key paths and lines in every error.
pub fn parse<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, InputError> {
    let de = serde_norway::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| InputError::from_serde(path, text, e))
}

impl InputError {
    pub fn invalid(file: &Path, text: &str, key: String, message: String) -> InputError {
        let line = locate(text, &key);
        InputError::Invalid { file: file.to_path_buf(), line, key, message }
    }

    pub fn from_serde(file: &Path, text: &str, e: serde_path_to_error::Error<serde_norway::Error>) -> InputError {
        let mut key = e.path().to_string();
        if key == "." {
            key.clear();
        }
        let inner = e.inner();
        let line = inner.location().map(|l| l.line());
        let mut message = inner.to_string();
        if let Some(cut) = message.find(" at line ") {
            message.truncate(cut);
        }
        // The YAML error repeats the path of the map it was in; the key path already says it.
        if let Some((prefix, rest)) = message.split_once(": ") {
            if !prefix.contains(' ') && key.starts_with(prefix) {
                message = rest.to_string();
            }
        }
        // The key path already ends with an unknown key's name; the message need not repeat it.
        if let Some(rest) = message.strip_prefix("unknown field `") {
            if let Some(end) = rest.find('`') {
                let field = &rest[..end];
                if !key.ends_with(field) {
                    key = if key.is_empty() { field.to_string() } else { format!("{key}.{field}") };
                }
                message = format!("unknown field{}", &rest[end + 1..]);
            }
        }
        let line = line.or_else(|| locate(text, &key));
        InputError::Invalid { file: file.to_path_buf(), line, key, message }
    }

    pub fn key(&self) -> Option<&str> {
        match self {
            InputError::Invalid { key, .. } => Some(key),
            InputError::Read { .. } => None,
        }
    }
}

/// Finds the line (1-based) of a key path like `jobs[1].min_workers` in block-style YAML by
/// following indentation. Where the path cannot be followed to its end (flow style, say), the
/// line of the deepest part found; `None` when not even the first key is there.
pub fn locate(text: &str, path: &str) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let mut from = 0usize;
    let mut to = lines.len();
    let mut min_indent: isize = -1;
    let mut found = None;
    for seg in path.split('.') {
        let (name, index) = match seg.find('[') {
            Some(b) => (&seg[..b], seg[b + 1..seg.len() - 1].parse::<usize>().ok()),
            None => (seg, None),
        };
        let Some((at, indent)) = find_key(&lines, from, to, min_indent, name) else { break };
        found = Some(at);
        from = at + 1;
        to = block_end(&lines, from, indent, false);
        min_indent = indent as isize;
        if let Some(i) = index {
            let Some((item, item_indent)) = nth_item(&lines, from, to, i) else { break };
            found = Some(item);
            // The item's own keys may sit on its `- ` line.
            from = item;
            to = block_end(&lines, item + 1, item_indent, true).max(item + 1);
            min_indent = item_indent as isize;
        }
    }
    found.map(|l| l + 1)
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

fn is_content(line: &str) -> bool {
    let t = line.trim();
    !t.is_empty() && !t.starts_with('#')
}

fn find_key(lines: &[&str], from: usize, to: usize, min_indent: isize, name: &str) -> Option<(usize, usize)> {
    for (i, line) in lines.iter().enumerate().take(to).skip(from) {
        if !is_content(line) {
            continue;
        }
        let t = line.trim_start().trim_start_matches("- ");
        let indent = line.len() - t.len();
        if (indent as isize) <= min_indent && i != from {
            continue;
        }
        if t.strip_prefix(name).is_some_and(|r| r.trim_start().starts_with(':'))
            || t.strip_prefix(&format!("\"{name}\"")).is_some_and(|r| r.starts_with(':'))
        {
            return Some((i, indent_of(line)));
        }
    }
    None
}

/// End of the block that starts after a key (or a list item, `item`) at `indent`. A key's block
/// may hold `- ` items at the key's own indentation, as YAML allows.
fn block_end(lines: &[&str], from: usize, indent: usize, item: bool) -> usize {
    for (i, line) in lines.iter().enumerate().skip(from) {
        if !is_content(line) {
            continue;
        }
        let ind = indent_of(line);
        if ind < indent || (ind == indent && (item || !line.trim_start().starts_with("- "))) {
            return i;
        }
    }
    lines.len()
}

fn nth_item(lines: &[&str], from: usize, to: usize, n: usize) -> Option<(usize, usize)> {
    let mut item_indent = None;
    let mut count = 0;
    for (i, line) in lines.iter().enumerate().take(to).skip(from) {
        if !is_content(line) || !line.trim_start().starts_with("- ") {
            continue;
        }
        let ind = indent_of(line);
        if *item_indent.get_or_insert(ind) != ind {
            continue;
        }
        if count == n {
            return Some((i, ind));
        }
        count += 1;
    }
    None
}
