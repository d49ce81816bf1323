//! Runs docs/quickstart.md: every ```sh block, in order, in one bash with `set -euo pipefail`,
//! from the repository's root, so the page cannot rot. The colocate under test is first on
//! PATH (the page builds one only if none is there). On failure the output and the logs of the
//! processes the page started are printed, and whatever it started is stopped.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The `sh` blocks of a Markdown page, in order.
fn sh_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match &mut current {
            None if line.trim_end() == "```sh" => current = Some(String::new()),
            Some(block) if line.trim_end() == "```" => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    assert!(current.is_none(), "an unclosed ```sh block");
    blocks
}

#[test]
fn sh_blocks_are_found_in_order_and_others_skipped() {
    let page = "text\n```sh\na\nb\n```\n```yaml\nx: 1\n```\n```sh\nc\n```\n";
    assert_eq!(sh_blocks(page), ["a\nb\n", "c\n"]);
}

/// Stops what the page started if it did not get to its own clean-up.
const CLEANUP: &str = r#"
cleanup() {
  status=$?
  set +e
  if [ -n "${QS:-}" ] && [ -d "$QS" ]; then
    for f in "$QS"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
    if [ $status -ne 0 ]; then
      for f in "$QS"/*.log; do [ -f "$f" ] && { echo "----- $f"; tail -n 40 "$f"; }; done
    fi
    [ -f "$QS/cluster/pids" ] && hack/testbed/down.sh "$QS/cluster" >/dev/null 2>&1
  fi
  exit $status
}
trap cleanup EXIT
trap 'exit 143' TERM
"#;

#[test]
fn the_quickstart_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/quickstart.md")).unwrap();
    let blocks = sh_blocks(&page);
    assert!(blocks.len() >= 8, "docs/quickstart.md has {} sh blocks", blocks.len());
    let script = format!("set -euo pipefail\n{CLEANUP}\n{}", blocks.join("\n"));
    let bin = Path::new(env!("CARGO_BIN_EXE_colocate")).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let started = Instant::now();
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(root)
        .env("PATH", path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash runs");
    // Both pipes are read on threads so that neither fills up and blocks the page.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let limit = Duration::from_secs(600);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > limit {
            // TERM lets the page's trap stop what it started.
            let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    eprintln!("quickstart took {:.0} s", started.elapsed().as_secs_f64());
    assert!(
        status.is_some_and(|s| s.success()),
        "docs/quickstart.md failed ({status:?}, limit {limit:?})\n--- stdout\n{out}\n--- stderr\n{err}"
    );
    // What the page promises to show.
    for shown in ["online-headroom", "colocate_job_target_workers{", "Shrink", "Grow"] {
        assert!(out.contains(shown), "the quickstart's output does not show `{shown}`:\n{out}");
    }
}
