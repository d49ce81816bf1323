//! `colocate replay`: load scenarios, run every policy, print the table, write the artifacts.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use colocate::sim::chart::{render_svg, ChartInput, ChartPanel};
use colocate::sim::explain::explain;
use colocate::sim::jct_chart::{jct_csv, render_jct};
use colocate::sim::report::{intents_csv, job_workers_csv, timeline_csv, TimelineRow, WorthColumns, MAX_JOB_COLUMNS};
use colocate::sim::side_by_side::steps;
use colocate::sim::worth::{columns, Capacity};
use colocate::sim::{replay, Policy, ReplayOutput, Scenario, ScenarioError};

/// The scenario replayed when none is named: shipped in the binary, so it needs no files.
pub const DEFAULT_SCENARIO_PATH: &str = "scenarios/elasticdl-nginx.yaml";
const DEFAULT_SCENARIO: &str = include_str!("../../scenarios/elasticdl-nginx.yaml");

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Scenario files (scenario format v1). Without any, the embedded elasticdl-nginx scenario.
    pub scenarios: Vec<PathBuf>,
    /// Print report v1 as JSON on stdout instead of the table (one line per scenario when
    /// several are given).
    #[arg(long)]
    pub json: bool,
    /// Write report.json, timeline.csv, intents.csv (colocate's decisions and why) and chart.svg
    /// here (a folder per scenario when several); with jobs that have work, also jct.csv and
    /// jct_cdf.svg (completion time per job, and its CDF per policy); with more than 32 jobs,
    /// timeline.csv has the workers in all and job_workers.csv each job's where it changes.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Policies to compare, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "colocate,colocate-usage,preemption,gang,gang-backfill,online-only"
    )]
    pub policies: Vec<Policy>,
    /// No progress bar, even on a terminal.
    #[arg(long)]
    pub quiet: bool,
    /// After the table, a short explanation of each of its columns.
    #[arg(long, conflicts_with = "json")]
    pub explain: bool,
}

/// Failures of `replay`: bad input exits with 2, anything else with 1.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    BadInput(#[from] ScenarioError),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

pub fn run(args: &ReplayArgs) -> Result<(), ReplayError> {
    // Load and check every scenario before running any: a typo in the third file should not
    // cost the time of the first two.
    let scenarios: Vec<Scenario> = if args.scenarios.is_empty() {
        vec![Scenario::parse(Path::new(DEFAULT_SCENARIO_PATH), DEFAULT_SCENARIO)?]
    } else {
        args.scenarios.iter().map(|p| Scenario::load(p)).collect::<Result<_, _>>()?
    };
    for s in &scenarios {
        for w in &s.warnings {
            eprintln!("warning: {}: {w}", s.path.display());
        }
    }
    let several = scenarios.len() > 1;
    let mut stdout = std::io::stdout().lock();
    for scenario in &scenarios {
        // The table's and the chart's worth columns compare with the services alone: replay
        // online-only beside the policies asked for when it is not one of them.
        let baseline = (!args.json || args.out.is_some()) && !args.policies.contains(&Policy::OnlineOnly);
        let (output, online_only) = run_one(scenario, &args.policies, baseline, !args.quiet && !args.json)?;
        let worth = worth_columns(scenario, &output, online_only.as_deref());
        let mut text = if args.json {
            serde_json::to_string(&output.report).context("serializing the report")? + "\n"
        } else {
            output.report.table_with(Some(&worth))
        };
        if args.explain {
            text += "\n";
            text += &explain(&output.report, Some(&worth));
        }
        if let Some(dir) = &args.out {
            let dir = if several { dir.join(&scenario.spec.name) } else { dir.clone() };
            let written = write_artifacts(&dir, scenario, &output, &worth)?;
            if !args.json {
                text += &format!("wrote {}/{}\n", dir.display(), written.join(", "));
            }
        }
        if several && !args.json {
            text.push('\n');
        }
        match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
            Ok(()) => {}
            // A reader that stopped reading (`| head`) is not an error of the replay.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(anyhow::Error::new(e).context("writing to stdout").into()),
        }
    }
    Ok(())
}

/// Replays `policies`, and online-only too when `baseline` asks for it and it is not among
/// them: that run's timeline is returned beside the output, which holds `policies` only.
fn run_one(
    scenario: &Scenario,
    policies: &[Policy],
    baseline: bool,
    show_progress: bool,
) -> anyhow::Result<(ReplayOutput, Option<Vec<TimelineRow>>)> {
    let mut run: Vec<Policy> = policies.to_vec();
    if baseline {
        run.push(Policy::OnlineOnly);
    }
    let total = steps(scenario) * run.len() as u64;
    let bar = if show_progress && std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template("{msg} [{bar:40}] {percent}% ({eta} left)")
                .context("progress bar template")?
                .progress_chars("=> "),
        );
        bar.set_message(format!("replaying {}", scenario.spec.name));
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut output = replay(scenario, &run, &|done| bar.set_position(done));
    bar.finish_and_clear();
    let online_only = if baseline {
        output.report.results.pop();
        output.timelines.pop()
    } else {
        let i = policies.iter().position(|p| *p == Policy::OnlineOnly);
        i.map(|i| output.timelines[i].clone())
    };
    Ok((output, online_only))
}

/// The table's training hours and their share of online-only's idle room.
fn worth_columns(scenario: &Scenario, output: &ReplayOutput, online_only: Option<&[TimelineRow]>) -> WorthColumns {
    let r = &output.report;
    columns(
        &r.results,
        &output.timelines,
        online_only,
        (r.duration_s, r.step_s),
        &Capacity::of(&scenario.spec),
        !scenario.spec.services.is_empty(),
    )
}

/// Writes the files of `--out`; returns their names.
fn write_artifacts(
    dir: &Path,
    scenario: &Scenario,
    output: &ReplayOutput,
    worth: &WorthColumns,
) -> anyhow::Result<Vec<&'static str>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let written = std::cell::RefCell::new(Vec::new());
    let write = |name: &'static str, body: &str| {
        let path = dir.join(name);
        written.borrow_mut().push(name);
        std::fs::write(&path, body).with_context(|| format!("writing {}", path.display()))
    };
    write("report.json", &(serde_json::to_string_pretty(&output.report)? + "\n"))?;
    let panels: Vec<(&str, &[_])> =
        output.report.results.iter().zip(&output.timelines).map(|(r, t)| (r.policy.as_str(), t.as_slice())).collect();
    let services: Vec<String> = scenario.spec.services.iter().map(|s| s.name.clone()).collect();
    let jobs: Vec<String> = scenario.spec.jobs.iter().map(|j| j.name.clone()).collect();
    write("timeline.csv", &timeline_csv(&panels, &services, &jobs))?;
    if jobs.len() > MAX_JOB_COLUMNS {
        write("job_workers.csv", &job_workers_csv(&panels, &jobs))?;
    }
    write("intents.csv", &intents_csv(&output.intents))?;
    let slos_ms: Vec<f64> = scenario.spec.services.iter().map(|s| s.latency.slo_p99.as_secs_f64() * 1e3).collect();
    let report = &output.report;
    let chart = ChartInput {
        scenario: &scenario.spec.name,
        panels: report
            .results
            .iter()
            .zip(&output.timelines)
            .enumerate()
            .map(|(i, (result, rows))| ChartPanel {
                result,
                rows,
                training_h: worth.hours.get(i).copied(),
                share: worth.shares.get(i).copied().flatten(),
            })
            .collect(),
        target: report.target_utilization,
        slos_ms: &slos_ms,
        capacity: Capacity::of(&scenario.spec),
        duration_s: report.duration_s,
        step_s: report.step_s,
    };
    write("chart.svg", &render_svg(&chart))?;
    // Jobs with work: their completion times, per job, and a chart of them per policy.
    let results = &report.results;
    let has_work: Vec<bool> = scenario.spec.jobs.iter().map(|j| j.work.is_some()).collect();
    if has_work.iter().any(|w| *w) {
        write("jct.csv", &jct_csv(results))?;
        let title = format!("{}: job completion time, per policy", scenario.spec.name);
        if let Some(svg) = render_jct(&title, results, &has_work, report.duration_s) {
            write("jct_cdf.svg", &svg)?;
        }
    }
    Ok(written.into_inner())
}
