//! `capacity: usage` on the cluster: the names of the batch resources, what a node carries and a
//! worker requests of them, and the writer that publishes each node's batch capacity on its
//! status (the decision core decides the value, `core::publish` when it is worth a write).
//!
//! A node carries them as extended resources in `status.capacity` and `status.allocatable`
//! (the kubelet recomputes allocatable from capacity at each status update and drops an
//! extended resource capacity does not have, so both are written). CPU is a count of
//! millicores (`"12000"` is 12 CPU): an extended resource takes whole numbers only. A worker
//! asks for them in its containers' `limits` (an extended resource's request is its limit) and
//! requests no `cpu` or `memory`, which makes it BestEffort.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node as KubeNode, Pod as KubePod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::core::resources::parse_memory;
use crate::core::Resources;

/// Which names the batch resources have (`run.batch_resources`).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BatchNames {
    /// `colocate.dev/batch-cpu` and `colocate.dev/batch-memory`.
    #[default]
    Colocate,
    /// Koordinator's `kubernetes.io/batch-cpu` and `kubernetes.io/batch-memory`, so that jobs
    /// written for Koordinator run unchanged (do not run both: each would overwrite the other).
    Koordinator,
}

impl BatchNames {
    pub fn cpu(self) -> &'static str {
        match self {
            BatchNames::Colocate => "colocate.dev/batch-cpu",
            BatchNames::Koordinator => "kubernetes.io/batch-cpu",
        }
    }

    pub fn memory(self) -> &'static str {
        match self {
            BatchNames::Colocate => "colocate.dev/batch-memory",
            BatchNames::Koordinator => "kubernetes.io/batch-memory",
        }
    }
}

/// A batch quantity that does not parse: where, and its text.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{object}: {field} = {value:?} is not a whole number ({problem})")]
pub struct BadBatchQuantity {
    pub object: String,
    pub field: String,
    pub value: String,
    pub problem: String,
}

/// CPU (millicores) and memory (bytes) of the batch resources in `map`; `None` when it has
/// neither.
fn batch_in(
    map: Option<&BTreeMap<String, Quantity>>,
    names: BatchNames,
    object: &dyn Fn() -> String,
    field: &str,
) -> Result<Option<Resources>, BadBatchQuantity> {
    let Some(map) = map else { return Ok(None) };
    let get = |name: &str| -> Result<Option<i64>, BadBatchQuantity> {
        let Some(q) = map.get(name) else { return Ok(None) };
        // A count (suffixes such as k allowed), not CPU units: "12000" is 12,000 millicores.
        parse_memory(&q.0).map(Some).map_err(|e| BadBatchQuantity {
            object: object(),
            field: format!("{field}.{name}"),
            value: q.0.clone(),
            problem: e.to_string(),
        })
    };
    let (cpu, memory) = (get(names.cpu())?, get(names.memory())?);
    if cpu.is_none() && memory.is_none() {
        return Ok(None);
    }
    Ok(Some(Resources::new(cpu.unwrap_or(0), memory.unwrap_or(0), 0)))
}

/// The batch capacity a node carries now (its `status.allocatable`), as the scheduler sees it.
pub fn carried(n: &KubeNode, names: BatchNames) -> Result<Option<Resources>, BadBatchQuantity> {
    let object = || format!("node/{}", n.metadata.name.as_deref().unwrap_or(""));
    batch_in(n.status.as_ref().and_then(|s| s.allocatable.as_ref()), names, &object, "status.allocatable")
}

/// What a pod asks of the batch resources, summed over its containers: each container's
/// requests, or its limits where it requests none (an extended resource's request defaults to
/// its limit).
pub fn requested(p: &KubePod, names: BatchNames) -> Result<Resources, BadBatchQuantity> {
    let object = || {
        format!("pod/{}/{}", p.metadata.namespace.as_deref().unwrap_or(""), p.metadata.name.as_deref().unwrap_or(""))
    };
    let mut sum = Resources::ZERO;
    for c in p.spec.iter().flat_map(|s| &s.containers) {
        let r = c.resources.as_ref();
        let field = format!("containers[{}].resources", c.name);
        let asked = batch_in(r.and_then(|r| r.requests.as_ref()), names, &object, &format!("{field}.requests"))?;
        let asked = match asked {
            Some(a) => Some(a),
            None => batch_in(r.and_then(|r| r.limits.as_ref()), names, &object, &format!("{field}.limits"))?,
        };
        sum += asked.unwrap_or(Resources::ZERO);
    }
    Ok(sum)
}

/// The JSON merge patch of a node's status that makes it carry `batch` (`None`: carry none).
/// A merge patch, not a JSON patch: `null` removes a key whether or not it is there, where a
/// JSON patch's `remove` fails on a node that carries nothing.
pub fn status_patch(batch: Option<Resources>, names: BatchNames) -> Value {
    let values = match batch {
        Some(b) => {
            json!({ names.cpu(): b.cpu_milli.max(0).to_string(), names.memory(): b.memory_bytes.max(0).to_string() })
        }
        None => json!({ names.cpu(): null, names.memory(): null }),
    };
    json!({ "status": { "capacity": values, "allocatable": values } })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_node_carries_what_its_allocatable_says_in_millicores_and_bytes() {
        let node: KubeNode = from(json!({"metadata": {"name": "n1"}, "status": {"allocatable": {
            "cpu": "32", "colocate.dev/batch-cpu": "12000", "colocate.dev/batch-memory": "40Gi"}}}));
        assert_eq!(carried(&node, BatchNames::Colocate), Ok(Some(Resources::new(12_000, 40 << 30, 0))));
        assert_eq!(carried(&node, BatchNames::Koordinator), Ok(None));
        let bare: KubeNode = from(json!({"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "32"}}}));
        assert_eq!(carried(&bare, BatchNames::Colocate), Ok(None));
    }

    #[test]
    fn a_batch_quantity_that_is_not_a_number_is_named() {
        let node: KubeNode = from(json!({"metadata": {"name": "n1"}, "status": {"allocatable": {
            "kubernetes.io/batch-cpu": "lots"}}}));
        let err = carried(&node, BatchNames::Koordinator).unwrap_err();
        assert_eq!(err.object, "node/n1");
        assert_eq!(err.field, "status.allocatable.kubernetes.io/batch-cpu");
        assert!(err.to_string().contains("\"lots\" is not a whole number"), "{err}");
    }

    #[test]
    fn a_worker_asks_by_its_limits_where_it_requests_nothing() {
        let pod: KubePod = from(json!({"metadata": {"name": "w", "namespace": "ml"}, "spec": {"containers": [
            {"name": "a", "resources": {"limits": {"colocate.dev/batch-cpu": "2000", "colocate.dev/batch-memory": "4Gi"}}},
            {"name": "b", "resources": {"requests": {"colocate.dev/batch-cpu": "500"}, "limits": {"colocate.dev/batch-cpu": "500"}}},
            {"name": "c"}
        ]}}));
        assert_eq!(requested(&pod, BatchNames::Colocate), Ok(Resources::new(2_500, 4 << 30, 0)));
        assert_eq!(requested(&pod, BatchNames::Koordinator), Ok(Resources::ZERO));
    }

    #[test]
    fn the_patch_writes_capacity_and_allocatable_and_null_removes_both() {
        let patch = status_patch(Some(Resources::new(12_000, 1 << 30, 3)), BatchNames::Colocate);
        let want = json!({"colocate.dev/batch-cpu": "12000", "colocate.dev/batch-memory": "1073741824"});
        assert_eq!(patch, json!({"status": {"capacity": want, "allocatable": want}}));
        let removal = status_patch(None, BatchNames::Koordinator);
        let gone = json!({"kubernetes.io/batch-cpu": null, "kubernetes.io/batch-memory": null});
        assert_eq!(removal, json!({"status": {"capacity": gone, "allocatable": gone}}));
    }
}
