//! Replay's port of Go's `sort.Slice` (`colocate::sim::go_sort`) against Go itself: the same
//! inputs, many of them full of ties as a node's preemption candidates are, sorted by a Go
//! program built with the toolchain that builds the test bed's kube-scheduler, must come out
//! in the same order, ties included. Go is a toolchain hack/test.sh requires.

use std::io::Write;
use std::process::{Command, Stdio};

use colocate::sim::go_sort::sort_slice;

const GO_PROGRAM: &str = r#"package main

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

type item struct{ key, id int }

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		fields := strings.Fields(in.Text())
		items := make([]item, len(fields))
		for i, f := range fields {
			k, err := strconv.Atoi(f)
			if err != nil {
				panic(err)
			}
			items[i] = item{k, i}
		}
		sort.Slice(items, func(i, j int) bool { return items[i].key < items[j].key })
		ids := make([]string, len(items))
		for i, it := range items {
			ids[i] = strconv.Itoa(it.id)
		}
		fmt.Fprintln(out, strings.Join(ids, " "))
	}
}
"#;

/// Inputs shaped like a node's candidates (a few priorities and start seconds, many equal) and
/// like nothing in particular (few and many distinct keys, runs, reversed runs), of lengths on
/// both sides of every threshold in Go's algorithm (12, 50, its heapsort fallback).
fn cases() -> Vec<Vec<i64>> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut cases = Vec::new();
    for n in [1usize, 5, 12, 13, 14, 20, 31, 49, 50, 51, 64, 100, 257, 1000] {
        for distinct in [1u64, 2, 3, 5, 17, 1 << 40] {
            for _ in 0..4 {
                cases.push((0..n).map(|_| (next() % distinct) as i64).collect());
            }
        }
        cases.push((0..n as i64).collect());
        cases.push((0..n as i64).rev().collect());
        cases.push((0..n as i64).map(|i| i / 7).rev().collect());
        cases.push((0..n as i64).map(|i| if i % 10 == 9 { -i } else { i }).collect());
        // Organ pipe and sawtooth: the patterns that unbalance a quicksort's pivots.
        cases.push((0..n as i64).map(|i| i.min(n as i64 - i)).collect());
        cases.push((0..n as i64).map(|i| i % 16).collect());
    }
    cases
}

#[test]
fn the_port_orders_ties_as_go_sort_slice_does() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let program = dir.path().join("sortslice.go");
    std::fs::write(&program, GO_PROGRAM).expect("write the Go program");
    let cases = cases();
    let mut child = Command::new("go")
        .arg("run")
        .arg(&program)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "")
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("`go` on PATH (hack/test.sh requires Go >= 1.26)");
    // Written from another thread: Go answers as it reads, and a full pipe would stop both.
    let mut stdin = child.stdin.take().expect("stdin");
    let input: String =
        cases.iter().map(|case| case.iter().map(i64::to_string).collect::<Vec<_>>().join(" ") + "\n").collect();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().expect("go run finishes");
    writer.join().expect("the writer thread").expect("write the cases");
    assert!(output.status.success(), "go run failed: {}", String::from_utf8_lossy(&output.stderr));
    let go_orders: Vec<Vec<usize>> = String::from_utf8(output.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| l.split_whitespace().map(|id| id.parse().expect("an index")).collect())
        .collect();
    assert_eq!(go_orders.len(), cases.len(), "one answer per case");
    let mut unstable = 0;
    for (case, go_order) in cases.iter().zip(&go_orders) {
        let mut items: Vec<(i64, usize)> = case.iter().copied().zip(0..).collect();
        sort_slice(&mut items, |a, b| a.0 < b.0);
        let ours: Vec<usize> = items.iter().map(|x| x.1).collect();
        assert_eq!(&ours, go_order, "input {case:?}");
        let mut stable: Vec<(i64, usize)> = case.iter().copied().zip(0..).collect();
        stable.sort_by_key(|x| x.0);
        unstable += usize::from(stable.iter().map(|x| x.1).collect::<Vec<_>>() != ours);
    }
    // The check means something only if Go's order is not just a stable sort's.
    assert!(unstable > 10, "only {unstable} of {} cases differ from a stable sort", cases.len());
    eprintln!("{} cases agree with Go's sort.Slice; {unstable} of them differ from a stable sort", cases.len());
}
