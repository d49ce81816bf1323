//! `replay --explain`: what each column of the table says, printed under it, for the columns
//! the table shows.

use std::fmt::Write as _;

use super::report::{Report, WorthColumns};

/// One line per column shown, after a line that says which columns answer "is it safe" and
/// which "is it worth it".
pub fn explain(report: &Report, worth: Option<&WorthColumns>) -> String {
    let shown = report.shown();
    let target = report.target_utilization;
    let mut rows: Vec<(String, String)> = vec![
        ("policy".into(), "colocate (colocate-usage: its workers BestEffort on the CPU the services leave unused), or a cluster without it: preemption (training fills the cluster; the scheduler preempts workers for online pods), gang and gang-backfill (rigid jobs), online-only (the services alone)".into()),
        ("avg CPU alloc".into(), "CPU requested by system, online and training pods over allocatable CPU, averaged over the run".into()),
        ("avg CPU usage".into(), "CPU used by system, online and training pods over allocatable CPU, averaged over the run: utilization".into()),
    ];
    if shown.gpu {
        rows.push(("avg GPU alloc".into(), "the same for nvidia.com/gpu".into()));
    }
    let more: [(&str, String); 7] = [
        ("time >= target", format!("share of the run with allocation at or above the target utilization ({target:.2})")),
        ("SLO viol. s", "seconds in which some service's p99 was above its SLO. online-only's is the floor (the HPA lags a rising load); what a policy has above it is latency training cost the services".into()),
        ("pending online pod s", "seconds online pods waited for a node, summed over pods: replicas the HPA asked for that the service did not get".into()),
        ("killed: sched.+forced", "workers killed without a graceful shrink: preempted by the scheduler + deleted by colocate past its release deadline (0 in replay, whose masters release at once), + BestEffort workers evicted for memory where there are any. Each kill rolls its job back to its last checkpoint".into()),
        ("rescales", "changes of a job's worker count, summed over jobs; each pauses the job for its rescale_cost".into()),
        ("training samples", "samples processed and kept, summed over jobs. Not comparable across policies: samples of different jobs cost differently".into()),
        ("makespan s", "when the last job finished; - when one did not, or runs to the end (no work)".into()),
    ];
    rows.extend(more.map(|(c, e)| (c.to_string(), e)));
    if shown.jct {
        let jct: [(&str, &str); 3] = [
            (
                "avg, p95 JCT s",
                "completion minus arrival, over the jobs with work; one not finished counts until the end (p95 by nearest rank)",
            ),
            (
                "avg, p95 queue s",
                "arrival until a job first had min_workers running; a job never started counts until the end",
            ),
            ("unfinished", "jobs with work not finished when the run ended"),
        ];
        rows.extend(jct.map(|(c, e)| (c.to_string(), e.to_string())));
    }
    if let Some(w) = worth {
        let u = w.unit;
        rows.push((format!("training {u}-h"), format!("{u}-hours held by workers over the run: what training got")));
        rows.push((
            "of idle room %".into(),
            format!(
                "training {u}-h over the {u}-hours online-only leaves unrequested (allocatable minus what system and \
                 online pods request; online-only is replayed for it when not asked for): comparable across \
                 policies. Above 100%, training held room the services needed"
            ),
        ));
    }
    let width = rows.iter().map(|(c, _)| c.len()).max().unwrap_or(0);
    let mut out = String::new();
    let intro = "Is it safe: SLO viol. s against online-only's, pending online pod s, killed. Is it worth it: avg \
                 alloc against online-only's, training hours and their share of the idle room, the jobs' times.";
    for line in wrap(intro, LINE) {
        let _ = writeln!(out, "{line}");
    }
    for (column, meaning) in rows {
        for (k, line) in wrap(&meaning, LINE - width - 4).into_iter().enumerate() {
            let column = if k == 0 { column.as_str() } else { "" };
            let _ = writeln!(out, "  {column:<width$}  {line}");
        }
    }
    out
}

/// The explanation's width in characters: a terminal's, with a margin.
const LINE: usize = 100;

/// `text` in lines of at most `width` characters, broken between words.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::report::PolicyResult;

    fn report(gpu: bool, jct: bool) -> Report {
        let r = PolicyResult {
            policy: "colocate".into(),
            avg_gpu_allocation: gpu.then_some(0.5),
            avg_jct_s: jct.then_some(100.0),
            ..PolicyResult::default()
        };
        Report::of(vec![r])
    }

    #[test]
    fn every_column_shown_is_explained_and_no_other() {
        let worth = WorthColumns { unit: "GPU", hours: vec![1.0], shares: vec![Some(0.5)], note: None };
        let r = report(true, true);
        let table = r.table_with(Some(&worth));
        let text = explain(&r, Some(&worth));
        let header = table.lines().nth(1).unwrap();
        for column in ["avg GPU alloc", "time >= target", "unfinished", "training GPU-h", "of idle room %"] {
            assert!(header.contains(column) && text.contains(&format!("  {column} ")), "{column}: {text}");
        }
        assert!(text.contains("(0.90)"), "{text}");
        let plain = explain(&report(false, false), None);
        for column in ["avg GPU alloc", "JCT", "unfinished", "idle room %"] {
            assert!(!plain.contains(column), "{column} explained but not shown: {plain}");
        }
        assert!(plain.contains("  makespan s "), "{plain}");
        assert!(text.lines().all(|l| l.chars().count() <= LINE), "{text}");
        assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
    }
}
