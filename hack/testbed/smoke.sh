#!/usr/bin/env bash
# Smoke test of the test bed: up, a fake node, a pod that must reach Running, down.
#   hack/testbed/smoke.sh [DIR]     (DIR defaults to a fresh temp dir)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DIR=${1:-$(mktemp -d "${TMPDIR:-/tmp}/colocate-testbed.XXXXXX")}
KUBECTL=${KUBECTL:-kubectl}
trap '"$HERE/down.sh" "$DIR"' EXIT

t0=$SECONDS
export KUBECONFIG
KUBECONFIG=$("$HERE/up.sh" "$DIR")
echo "control plane up in $((SECONDS - t0))s"
"$KUBECTL" get --raw /readyz; echo
"$KUBECTL" get ns

"$KUBECTL" apply -f - <<'YAML'
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-0
  annotations:
    node.alpha.kubernetes.io/ttl: "0"
    kwok.x-k8s.io/node: fake
  labels:
    type: kwok
    kubernetes.io/hostname: kwok-node-0
    kubernetes.io/role: agent
spec:
  taints:
  - key: kwok.x-k8s.io/node
    value: fake
    effect: NoSchedule
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
---
apiVersion: v1
kind: Pod
metadata:
  name: smoke
  namespace: default
spec:
  containers:
  - name: c
    image: fake-image
    resources:
      requests: {cpu: 100m, memory: 64Mi}
  tolerations:
  - key: kwok.x-k8s.io/node
    operator: Exists
    effect: NoSchedule
YAML
t1=$SECONDS
"$KUBECTL" wait --for=condition=Ready node/kwok-node-0 --timeout=60s
"$KUBECTL" wait --for=jsonpath='{.status.phase}'=Running pod/smoke --timeout=60s
echo "node Ready and pod Running $((SECONDS - t1))s after creation"
"$KUBECTL" get nodes -o wide
"$KUBECTL" get pods -o wide
"$KUBECTL" delete pod smoke --wait=true --timeout=60s
echo "smoke: 1 passed, 0 failed"
