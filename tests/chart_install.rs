//! `helm install` of the chart into a real kube-apiserver with RBAC authorization (the test
//! bed), then `kubectl auth can-i` as the controller's ServiceAccount: every request the
//! controller makes is allowed, and writes it never makes are refused. A second release limits
//! job writes to two namespaces (rbac.jobNamespaces) and one adapter kind.

mod chart_support;
mod support;

use std::process::Command;

use chart_support::{helm, output, run};
use serde_json::{json, Value};
use support::testbed::Testbed;

/// A minimal CRD for a job kind the adapters scale, so that kubectl resolves its resource name
/// as a cluster running Kubeflow or Volcano would.
fn crd(group: &str, kind: &str, plural: &str, scale: bool) -> Value {
    let mut version = json!({
        "name": "v1",
        "served": true,
        "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
    });
    if scale {
        version["subresources"] = json!({"scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
        }});
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
            "scope": "Namespaced",
            "versions": [version],
        },
    })
}

/// `helm install` (Helm's own state in a temp dir) with `args`; panics with Helm's output.
fn install(tb: &Testbed, home: &std::path::Path, release: &str, namespace: &str, args: &[&str]) {
    run(Command::new(helm())
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .arg("install")
        .arg(release)
        .arg(chart_support::chart_dir())
        .args(["--namespace", namespace, "--create-namespace", "--kubeconfig"])
        .arg(&tb.kubeconfig)
        .args(args));
}

/// `kubectl auth can-i` as `sa` (namespace/name); `request` is what follows `can-i`. Its own
/// discovery cache: another control plane once on the same port must not hide the test CRDs.
fn can_i(tb: &Testbed, cache: &std::path::Path, sa: &str, request: &str) -> bool {
    let (ns, name) = sa.split_once('/').unwrap();
    let out = output(
        tb.kubectl()
            .arg("--cache-dir")
            .arg(cache)
            .args(["auth", "can-i"])
            .args(request.split_whitespace())
            .arg(format!("--as=system:serviceaccount:{ns}:{name}")),
    );
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        answer == "yes" || answer == "no",
        "kubectl auth can-i {request}: {answer} / {}",
        String::from_utf8_lossy(&out.stderr)
    );
    answer == "yes"
}

/// Checks every request; reports all mismatches at once.
#[track_caller]
fn expect(tb: &Testbed, cache: &std::path::Path, sa: &str, allowed: &[&str], refused: &[&str]) {
    let mut wrong = Vec::new();
    for r in allowed {
        if !can_i(tb, cache, sa, r) {
            wrong.push(format!("refused but needed: {r}"));
        }
    }
    for r in refused {
        if can_i(tb, cache, sa, r) {
            wrong.push(format!("allowed but never needed: {r}"));
        }
    }
    assert!(wrong.is_empty(), "{sa}:\n{}", wrong.join("\n"));
}

#[test]
fn installed_chart_grants_exactly_what_the_controller_needs() {
    let tb = Testbed::start();
    let home = tempfile::tempdir().unwrap();
    tb.kubectl_run(&["create", "namespace", "ml"]);
    tb.kubectl_run(&["create", "namespace", "research"]);
    tb.kubectl_run(&["create", "namespace", "web"]);
    tb.kubectl_apply(&crd("kubeflow.org", "PyTorchJob", "pytorchjobs", true));
    tb.kubectl_apply(&crd("batch.volcano.sh", "Job", "jobs", false));
    tb.kubectl_run(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/pytorchjobs.kubeflow.org",
        "crd/jobs.batch.volcano.sh",
    ]);

    // Every adapter kind on (the defaults grant none; tests/chart.rs checks that).
    let all_adapters = "rbac.adapters.deployments=true,rbac.adapters.statefulsets=true,\
                        rbac.adapters.pytorchjobs=true,rbac.adapters.volcanoJobs=true";
    install(&tb, home.path(), "colocate", "colocate-system", &["--set", all_adapters]);
    let objects = tb.kubectl_run(&[
        "get",
        "deployment,service,configmap,serviceaccount,poddisruptionbudget,role,rolebinding",
        "-n",
        "colocate-system",
        "-o",
        "name",
    ]);
    for o in [
        "deployment.apps/colocate",
        "service/colocate",
        "configmap/colocate",
        "serviceaccount/colocate",
        "poddisruptionbudget.policy/colocate",
        "role.rbac.authorization.k8s.io/colocate-lease",
        "rolebinding.rbac.authorization.k8s.io/colocate-lease",
    ] {
        assert!(objects.lines().any(|l| l == o), "{o} not created; have:\n{objects}");
    }
    let sa = "colocate-system/colocate";
    let cache = home.path().join("kube-cache");
    expect(
        &tb,
        &cache,
        sa,
        &[
            // The reflectors: cluster-wide reads.
            "list nodes",
            "watch nodes",
            "list pods -A",
            "watch pods -A",
            "get pods -n web",
            "list services -A",
            "watch services -A",
            "list horizontalpodautoscalers.autoscaling -A",
            "watch horizontalpodautoscalers.autoscaling -A",
            // Acting on jobs, in any namespace.
            "delete pods -n ml",
            "patch services -n research",
            "create events.events.k8s.io -n ml",
            "patch events.events.k8s.io -n ml",
            "get deployments.apps --subresource=scale -n ml",
            "patch deployments.apps --subresource=scale -n ml",
            "patch statefulsets.apps --subresource=scale -n ml",
            "patch pytorchjobs.kubeflow.org --subresource=scale -n ml",
            "patch jobs.batch.volcano.sh -n ml",
            "list deployments.apps -A",
            "watch pytorchjobs.kubeflow.org -A",
            "patch pods -n ml",
            // Leader election on its own Lease.
            "create leases.coordination.k8s.io -n colocate-system",
            "get leases.coordination.k8s.io/colocate -n colocate-system",
            "update leases.coordination.k8s.io/colocate -n colocate-system",
        ],
        &[
            "delete nodes",
            "patch nodes",
            "create events -n ml",
            "create pods -n ml",
            "update pods -n ml",
            "update deployments.apps -n ml",
            "patch deployments.apps -n ml",
            "update deployments.apps --subresource=scale -n ml",
            "delete deployments.apps -n ml",
            "patch statefulsets.apps -n ml",
            "delete jobs.batch.volcano.sh -n ml",
            "update services -n ml",
            "delete services -n ml",
            "patch horizontalpodautoscalers.autoscaling -n web",
            "get secrets -n colocate-system",
            "list secrets -A",
            "update leases.coordination.k8s.io/other -n colocate-system",
            "delete leases.coordination.k8s.io/colocate -n colocate-system",
            "get leases.coordination.k8s.io/colocate -n kube-system",
            "create leases.coordination.k8s.io -n kube-system",
            "create clusterrolebindings.rbac.authorization.k8s.io",
            "update configmaps -n colocate-system",
        ],
    );

    // Job writes limited to ml and research, Deployments the only adapted kind.
    let namespaced = chart_support::chart_dir().join("ci/namespaced-values.yaml");
    install(&tb, home.path(), "limited", "colocate-limited", &["-f", namespaced.to_str().unwrap()]);
    expect(
        &tb,
        &cache,
        "colocate-limited/colocate-controller",
        &[
            "list pods -A",
            "watch horizontalpodautoscalers.autoscaling -A",
            // An HPA service's pods come from its target's /scale selector, wherever it runs.
            "get deployments.apps --subresource=scale -n web",
            "delete pods -n ml",
            "delete pods -n research",
            "patch services -n ml",
            "create events.events.k8s.io -n research",
            "patch deployments.apps --subresource=scale -n research",
            "create leases.coordination.k8s.io -n colocate-limited",
            // The Lease is named like the release, so two releases elect apart.
            "update leases.coordination.k8s.io/limited-colocate -n colocate-limited",
        ],
        &[
            "delete pods -n web",
            "patch services -n web",
            "create events -n web",
            "patch deployments.apps --subresource=scale -n web",
            "patch statefulsets.apps --subresource=scale -n ml",
            "patch pytorchjobs.kubeflow.org --subresource=scale -n ml",
            "patch jobs.batch.volcano.sh -n ml",
            "list pytorchjobs.kubeflow.org -A",
            "update leases.coordination.k8s.io/colocate -n colocate-system",
            "update leases.coordination.k8s.io/colocate -n colocate-limited",
        ],
    );
    let config = tb.kubectl_run(&["get", "configmap", "-n", "colocate-limited", "limited-colocate", "-o", "yaml"]);
    assert!(config.contains("lease_name: limited-colocate"), "the controller is not told its Lease:\n{config}");
    assert!(
        config.contains("job_namespaces:\n      - ml\n      - research"),
        "the controller is not limited to the namespaces it may act in:\n{config}"
    );
}
