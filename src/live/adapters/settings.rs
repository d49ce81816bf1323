//! What a job object's annotations say about the job: how to scale it, its name, bounds and
//! overrides. Pure: no client.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::live::names::{
    is_label_value, JOB_ANNOTATION, MAX_WORKERS_ANNOTATION, MIN_WORKERS_ANNOTATION, RESCALE_COST_ANNOTATION,
    SCALE_VIA_ANNOTATION, WORKER_TASK_ANNOTATION,
};
use crate::live::translate::{job_overrides, TranslateError};

pub const DEFAULT_WORKER_TASK: &str = "worker";

/// How an adapter changes a job's worker count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScaleVia {
    /// The object's `/scale` subresource (`spec.replicas`).
    ScaleSubresource,
    /// A JSON patch of the worker task's `replicas` in a Volcano Job.
    VolcanoReplicas,
}

impl ScaleVia {
    pub const ALL: [ScaleVia; 2] = [ScaleVia::ScaleSubresource, ScaleVia::VolcanoReplicas];

    /// The annotation's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ScaleVia::ScaleSubresource => "scale-subresource",
            ScaleVia::VolcanoReplicas => "volcano-replicas",
        }
    }

    pub fn parse(s: &str) -> Option<ScaleVia> {
        ScaleVia::ALL.into_iter().find(|v| v.as_str() == s.trim())
    }
}

impl fmt::Display for ScaleVia {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job object's settings, read from its annotations.
#[derive(Clone, Debug, PartialEq)]
pub struct AdapterSettings {
    pub scale_via: ScaleVia,
    /// Namespace-local job name (its workers' `colocate.dev/job` label value).
    pub job: String,
    pub min_workers: u32,
    pub max_workers: u32,
    pub priority: Option<i32>,
    pub weight: Option<f64>,
    pub rescale_cost: Option<Duration>,
    /// Only read with [`ScaleVia::VolcanoReplicas`].
    pub worker_task: String,
}

/// An annotation that is missing or wrong; the message names the object and the annotation.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    #[error("{object}: annotation {annotation} is missing: {why}")]
    Missing { object: String, annotation: &'static str, why: String },
    #[error("{object}: annotation {annotation}=`{value}`: {problem}")]
    Invalid { object: String, annotation: &'static str, value: String, problem: String },
    #[error(transparent)]
    Translate(#[from] TranslateError),
}

/// Reads the settings of the object described as `object` (`Deployment ml/wd`, for messages)
/// and named `name`.
pub fn settings(
    object: &str,
    name: &str,
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<AdapterSettings, SettingsError> {
    let empty = BTreeMap::new();
    let a = annotations.unwrap_or(&empty);
    let missing =
        |annotation, why: &str| SettingsError::Missing { object: object.to_string(), annotation, why: why.to_string() };
    let invalid = |annotation, value: &str, problem: String| SettingsError::Invalid {
        object: object.to_string(),
        annotation,
        value: value.to_string(),
        problem,
    };
    let choices = || ScaleVia::ALL.map(|v| format!("`{v}`")).join(" or ");
    let scale_via = match a.get(SCALE_VIA_ANNOTATION) {
        None => return Err(missing(SCALE_VIA_ANNOTATION, &format!("expected {}", choices()))),
        Some(raw) => {
            ScaleVia::parse(raw).ok_or_else(|| invalid(SCALE_VIA_ANNOTATION, raw, format!("expected {}", choices())))?
        }
    };
    let job = match a.get(JOB_ANNOTATION) {
        Some(raw) => {
            let job = raw.trim();
            check_label_value(job).map_err(|problem| invalid(JOB_ANNOTATION, raw, problem))?;
            job.to_string()
        }
        None => {
            check_label_value(name).map_err(|problem| {
                missing(JOB_ANNOTATION, &format!("the object's name cannot be the job's name ({problem})"))
            })?;
            name.to_string()
        }
    };
    let overrides = job_overrides(object, Some(a))?;
    let why = "adapted jobs have no master to report their bounds";
    let min_workers = overrides.min_workers.ok_or_else(|| missing(MIN_WORKERS_ANNOTATION, why))?;
    let max_workers = overrides.max_workers.ok_or_else(|| missing(MAX_WORKERS_ANNOTATION, why))?;
    if max_workers == 0 {
        let raw = &a[MAX_WORKERS_ANNOTATION];
        return Err(invalid(MAX_WORKERS_ANNOTATION, raw, "expected a whole number 1 or more".into()));
    }
    let rescale_cost = match a.get(RESCALE_COST_ANNOTATION) {
        None => None,
        Some(raw) => Some(
            humantime::parse_duration(raw.trim())
                .map_err(|e| invalid(RESCALE_COST_ANNOTATION, raw, format!("expected a duration such as 30s: {e}")))?,
        ),
    };
    let worker_task = match a.get(WORKER_TASK_ANNOTATION).map(|t| t.trim()) {
        None => DEFAULT_WORKER_TASK.to_string(),
        Some("") => return Err(invalid(WORKER_TASK_ANNOTATION, "", "expected a task name".into())),
        Some(task) => task.to_string(),
    };
    Ok(AdapterSettings {
        scale_via,
        job,
        min_workers,
        max_workers,
        priority: overrides.priority,
        weight: overrides.weight,
        rescale_cost,
        worker_task,
    })
}

/// The job name is a label value on the workers and in the adapter's pod selector, and not
/// empty.
fn check_label_value(v: &str) -> Result<(), String> {
    if v.is_empty() || !is_label_value(v) {
        return Err(
            "a label value: 1 to 63 letters, digits, `-`, `_` or `.`, starting and ending with a letter or digit"
                .to_string(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::names::{PRIORITY_ANNOTATION, WEIGHT_ANNOTATION};

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    const OBJ: &str = "Deployment ml/wd";

    #[test]
    fn full_settings() {
        let a = annotations(&[
            (SCALE_VIA_ANNOTATION, "scale-subresource"),
            (JOB_ANNOTATION, "wide-deep"),
            (MIN_WORKERS_ANNOTATION, "2"),
            (MAX_WORKERS_ANNOTATION, "16"),
            (PRIORITY_ANNOTATION, "5"),
            (WEIGHT_ANNOTATION, "1.5"),
            (RESCALE_COST_ANNOTATION, "45s"),
            (WORKER_TASK_ANNOTATION, "trainer"),
        ]);
        let s = settings(OBJ, "wd", Some(&a)).unwrap();
        assert_eq!(
            s,
            AdapterSettings {
                scale_via: ScaleVia::ScaleSubresource,
                job: "wide-deep".into(),
                min_workers: 2,
                max_workers: 16,
                priority: Some(5),
                weight: Some(1.5),
                rescale_cost: Some(Duration::from_secs(45)),
                worker_task: "trainer".into(),
            }
        );
    }

    #[test]
    fn defaults_job_name_and_worker_task() {
        let a = annotations(&[
            (SCALE_VIA_ANNOTATION, " volcano-replicas "),
            (MIN_WORKERS_ANNOTATION, "1"),
            (MAX_WORKERS_ANNOTATION, "4"),
        ]);
        let s = settings(OBJ, "wd", Some(&a)).unwrap();
        assert_eq!((s.scale_via, s.job.as_str(), s.worker_task.as_str()), (ScaleVia::VolcanoReplicas, "wd", "worker"));
        assert_eq!((s.priority, s.weight, s.rescale_cost), (None, None, None));
    }

    #[test]
    fn problems_name_the_object_and_the_annotation() {
        let base =
            [(SCALE_VIA_ANNOTATION, "scale-subresource"), (MIN_WORKERS_ANNOTATION, "1"), (MAX_WORKERS_ANNOTATION, "4")];
        let with = |k: &'static str, v: &'static str| {
            let mut a = annotations(&base);
            a.insert(k.to_string(), v.to_string());
            settings(OBJ, "wd", Some(&a)).unwrap_err().to_string()
        };
        assert_eq!(
            with(SCALE_VIA_ANNOTATION, "hpa"),
            "Deployment ml/wd: annotation colocate.dev/scale-via=`hpa`: expected `scale-subresource` or `volcano-replicas`"
        );
        assert_eq!(
            with(MAX_WORKERS_ANNOTATION, "lots"),
            "Deployment ml/wd: annotation colocate.dev/max-workers=`lots`: expected a whole number 0 or more"
        );
        let mut zero = annotations(&base);
        zero.insert(MIN_WORKERS_ANNOTATION.into(), "0".into());
        zero.insert(MAX_WORKERS_ANNOTATION.into(), "0".into());
        let zero = settings(OBJ, "wd", Some(&zero)).unwrap_err().to_string();
        assert!(zero.contains("max-workers=`0`: expected a whole number 1 or more"), "{zero}");
        assert!(with(MIN_WORKERS_ANNOTATION, "9").contains("annotation colocate.dev/min-workers=`9`: above"));
        assert!(with(RESCALE_COST_ANNOTATION, "soon").starts_with(
            "Deployment ml/wd: annotation colocate.dev/rescale-cost=`soon`: expected a duration such as 30s"
        ));
        assert!(with(JOB_ANNOTATION, "wide deep").contains("annotation colocate.dev/job=`wide deep`: a label value"));
        assert!(with(WORKER_TASK_ANNOTATION, " ").contains("colocate.dev/worker-task=``: expected a task name"));
        assert!(with(PRIORITY_ANNOTATION, "high").contains("colocate.dev/priority=`high`: expected an integer"));
    }

    #[test]
    fn required_annotations() {
        let none = settings(OBJ, "wd", None).unwrap_err().to_string();
        assert_eq!(
            none,
            "Deployment ml/wd: annotation colocate.dev/scale-via is missing: expected `scale-subresource` or `volcano-replicas`"
        );
        let a = annotations(&[(SCALE_VIA_ANNOTATION, "scale-subresource"), (MIN_WORKERS_ANNOTATION, "1")]);
        assert_eq!(
            settings(OBJ, "wd", Some(&a)).unwrap_err().to_string(),
            "Deployment ml/wd: annotation colocate.dev/max-workers is missing: adapted jobs have no master to report their bounds"
        );
        // A name too long for a label value needs the job annotation.
        let a = annotations(&[
            (SCALE_VIA_ANNOTATION, "scale-subresource"),
            (MIN_WORKERS_ANNOTATION, "1"),
            (MAX_WORKERS_ANNOTATION, "2"),
        ]);
        let long = "x".repeat(64);
        assert!(settings(OBJ, &long, Some(&a)).unwrap_err().to_string().contains("colocate.dev/job is missing"));
    }

    #[test]
    fn label_values() {
        for ok in ["a", "wd", "wide-deep.v2_1", &"x".repeat(63)] {
            assert!(check_label_value(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "a-", "a b", "a/b", &"x".repeat(64)] {
            assert!(check_label_value(bad).is_err(), "{bad}");
        }
    }
}
