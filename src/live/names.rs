//! The names colocate reads and writes on Kubernetes objects (`colocate.dev/*`), and
//! Kubernetes' rules for names, in one place each.

/// Every label and annotation of ours starts with this.
pub const PREFIX: &str = "colocate.dev/";

// The master protocol (docs/master-protocol.md): how masters and workers are found.
pub const MASTER_LABEL: &str = "colocate.dev/master";
pub const JOB_LABEL: &str = "colocate.dev/job";
pub const ROLE_LABEL: &str = "colocate.dev/role";
/// Overrides the address derived from the Service (`http://host:port`). For a controller
/// running outside the cluster (development, the test bed) where Service DNS names do not
/// resolve; not part of protocol v1.
pub const MASTER_URL_ANNOTATION: &str = "colocate.dev/master-url";

// A job's settings, on its master's object or its adapter's job object.
pub const PRIORITY_ANNOTATION: &str = "colocate.dev/priority";
pub const WEIGHT_ANNOTATION: &str = "colocate.dev/weight";
pub const MIN_WORKERS_ANNOTATION: &str = "colocate.dev/min-workers";
pub const MAX_WORKERS_ANNOTATION: &str = "colocate.dev/max-workers";

// Jobs steered through Kubernetes adapters (docs/adapters.md).
/// The label that opts a job object in (value `"true"`); watches filter on it server-side.
pub const ELASTIC_LABEL: &str = "colocate.dev/elastic";
/// How to change the worker count: [`ScaleVia`](crate::live::adapters::ScaleVia).
pub const SCALE_VIA_ANNOTATION: &str = "colocate.dev/scale-via";
/// The job's name, i.e. the value of its workers' [`JOB_LABEL`] (default: the object's name).
pub const JOB_ANNOTATION: &str = JOB_LABEL;
/// How long the whole job pauses on a membership change (humantime: `30s`, `2m`).
pub const RESCALE_COST_ANNOTATION: &str = "colocate.dev/rescale-cost";
/// The Volcano task whose replicas are the workers.
pub const WORKER_TASK_ANNOTATION: &str = "colocate.dev/worker-task";

// What the controller writes.
/// The controller's last decision about the job, on the object that announces it.
pub const LAST_DECISION_ANNOTATION: &str = "colocate.dev/last-decision";

/// Whether a label or annotation is one of ours.
pub fn is_ours(key: &str) -> bool {
    key.starts_with(PREFIX)
}

/// `namespace/name`: how a namespaced object is named in keys, logs and metrics.
pub fn object_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// A label value: empty, or at most 63 of `[A-Za-z0-9_.-]` beginning and ending alphanumeric.
pub fn is_label_value(v: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    v.is_empty()
        || (v.len() <= 63
            && edge(v.chars().next())
            && edge(v.chars().last())
            && v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
}

/// A label key: a name like a non-empty value, optionally behind a DNS subdomain prefix and `/`.
pub fn is_label_key(k: &str) -> bool {
    let (prefix, name) = k.rsplit_once('/').map_or((None, k), |(p, n)| (Some(p), n));
    let prefix_ok = prefix.is_none_or(|p| {
        p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && !l.starts_with('-')
                    && !l.ends_with('-')
                    && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    });
    prefix_ok && !name.is_empty() && is_label_value(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_and_keys() {
        for ok in ["", "a", "wd-1", "A.b_c", &"x".repeat(63)] {
            assert!(is_label_value(ok), "{ok:?}");
        }
        for bad in ["-a", "a-", "a b", "é", &"x".repeat(64)] {
            assert!(!is_label_value(bad), "{bad:?}");
        }
        for ok in ["app", "colocate.dev/job", "a.b-c/x_y"] {
            assert!(is_label_key(ok), "{ok:?}");
        }
        for bad in ["", "Colocate.dev/job", "a/", "-a.b/x", "a..b/x"] {
            assert!(!is_label_key(bad), "{bad:?}");
        }
        assert!(is_ours(LAST_DECISION_ANNOTATION) && !is_ours("kubectl.kubernetes.io/last-applied-configuration"));
        assert_eq!(object_key("ml", "wd"), "ml/wd");
    }
}
