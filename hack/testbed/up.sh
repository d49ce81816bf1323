#!/usr/bin/env bash
# Start a throw-away control plane on loopback: etcd, kube-apiserver,
# kube-scheduler and kwok (fake nodes/pods), all as background processes.
#
#   hack/testbed/up.sh DIR        # DIR is created; everything lives there
#   KUBECONFIG=DIR/kubeconfig kubectl get ns
#   hack/testbed/down.sh DIR
#
# Writes into DIR:
#   kubeconfig   admin (system:masters) via a bearer token, CA-verified TLS
#   pids         "<name> <pid>" per line, read by down.sh
#   env          KUBECONFIG, APISERVER_URL, ports ... (sourceable)
#   logs/*.log   one per component; pki/ etcd-data/ config files
#
# Fake nodes: kwok manages nodes with the annotation kwok.x-k8s.io/node=fake
# (see hack/testbed/smoke.sh); give them the taint kwok.x-k8s.io/node=fake:NoSchedule
# if real-looking pods should stay off them unless they tolerate it.
#
# Binaries come from hack/testbed/build.sh (cached; instant when built), or
# from $TESTBED_BIN if set.  Ports are picked at random among free ones.
# TESTBED_KCM_CONTROLLERS: its --controllers (default "*"; tests that play the HPA
#   controller themselves pass "*,-horizontalpodautoscaling").
# TESTBED_KWOK_GRACEFUL_DELETE=1: kwok removes a deleted pod only once its grace period is over
#   (hack/testbed/kwok-graceful-delete.yaml), not at once.
# TESTBED_KWOK_RESIZE=1: kwok reports container resources as a kubelet does and actuates
#   in-place resizes (`/resize`) of running pods a second later (hack/testbed/kwok-resize.yaml).
# TESTBED_SCHEDULER_V: kube-scheduler's log verbosity (default 1; 5 logs every queue move, to
#   see when a waiting pod is retried; keep the logs with TESTBED_KEEP=1).
# TESTBED_SCHEDULER_FEATURE_GATES: kube-scheduler's --feature-gates (default: none, v1.34's
#   defaults), e.g. SchedulerAsyncPreemption=false (with it on, a preemptor whose victims are
#   being evicted misses the pod deletions of that moment: kubernetes/kubernetes#141694).
# TESTBED_APISERVER_AUDIT_POLICY: an audit policy file; the apiserver then writes its audit log
#   (JSON lines) to DIR/logs/audit.log (tests/scale.rs counts one client's requests with it).
# TESTBED_WITH_KCM=1 also starts kube-controller-manager (Deployments, Jobs,
# GC, namespace deletion, default ServiceAccounts); without it the
# ServiceAccount and TaintNodesByCondition admission plugins are disabled
# (see below).
set -euo pipefail

DIR=${1:?usage: up.sh DIR}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WITH_KCM=${TESTBED_WITH_KCM:-0}
TIMEOUT=${TESTBED_TIMEOUT:-90}   # seconds per component to become healthy

log() { echo "[testbed-up] $*" >&2; }

if [[ -z "${TESTBED_BIN:-}" ]]; then
  if [[ $WITH_KCM == 1 ]]; then
    TESTBED_BIN=$(TESTBED_COMPONENTS="etcd kube-apiserver kube-scheduler kwok kube-controller-manager" "$HERE/build.sh")
  else
    TESTBED_BIN=$("$HERE/build.sh")
  fi
fi
BIN=$TESTBED_BIN
for b in etcd kube-apiserver kube-scheduler kwok stages.yaml; do
  [[ -e "$BIN/$b" ]] || { log "missing $BIN/$b (run hack/testbed/build.sh)"; exit 1; }
done
[[ $WITH_KCM != 1 || -e "$BIN/kube-controller-manager" ]] || { log "missing $BIN/kube-controller-manager"; exit 1; }

mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
if [[ -s "$DIR/pids" ]]; then log "$DIR/pids exists: run down.sh first"; exit 1; fi
mkdir -p "$DIR/logs" "$DIR/pki"
: >"$DIR/pids"

# ---- ports ----------------------------------------------------------------
PICKED=" "
port_free() {
  if command -v ss >/dev/null; then
    [[ -z "$(ss -Htan "sport = :$1" 2>/dev/null)" ]]
  else
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
  fi
}
# Below the kernel's ephemeral range: a port picked inside it can be taken by any outgoing
# connection before its server binds it (CI saw kube-controller-manager's secure port, picked
# from 20000-49999, in use 2 s later: "bind: address already in use").
read -r EPHEMERAL_LOW _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || EPHEMERAL_LOW=32768
if (( EPHEMERAL_LOW > 12000 )); then PORT_BASE=10000; PORT_SPAN=$((EPHEMERAL_LOW - 10000)); else PORT_BASE=20000; PORT_SPAN=30000; fi
pick_port() {
  local p
  while :; do
    p=$((PORT_BASE + RANDOM % PORT_SPAN))
    [[ $PICKED == *" $p "* ]] && continue
    port_free "$p" && { PICKED+="$p "; echo "$p"; return; }
  done
}
ETCD_PORT=$(pick_port); PICKED+="$ETCD_PORT "
ETCD_PEER_PORT=$(pick_port); PICKED+="$ETCD_PEER_PORT "
APISERVER_PORT=$(pick_port); PICKED+="$APISERVER_PORT "
SCHEDULER_PORT=$(pick_port); PICKED+="$SCHEDULER_PORT "
KWOK_PORT=$(pick_port); PICKED+="$KWOK_PORT "
KCM_PORT=$(pick_port); PICKED+="$KCM_PORT "

# ---- pki ------------------------------------------------------------------
P=$DIR/pki
ossl() { openssl "$@" 2>/dev/null; }
ossl req -x509 -newkey rsa:2048 -nodes -days 3650 -keyout "$P/ca.key" -out "$P/ca.crt" \
  -subj "/CN=colocate-testbed-ca" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
leaf() {  # leaf <name> <subject> <extensions>
  ossl req -newkey rsa:2048 -nodes -keyout "$P/$1.key" -out "$P/$1.csr" -subj "$2"
  printf '%s\n' "$3" >"$P/$1.ext"
  ossl x509 -req -in "$P/$1.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial \
    -days 3650 -out "$P/$1.crt" -extfile "$P/$1.ext"
}
leaf apiserver "/CN=kube-apiserver" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1"
leaf admin "/O=system:masters/CN=kubernetes-admin" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
ossl genrsa -out "$P/sa.key" 2048
ossl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub"
TOKEN=$(openssl rand -hex 24)
echo "$TOKEN,admin,admin,system:masters" >"$P/tokens.csv"
chmod 600 "$P"/*.key "$P/tokens.csv"

APISERVER_URL="https://127.0.0.1:$APISERVER_PORT"
cat >"$DIR/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: testbed
  cluster:
    server: $APISERVER_URL
    certificate-authority-data: $(base64 -w0 "$P/ca.crt")
users:
- name: admin
  user:
    token: $TOKEN
contexts:
- name: testbed
  context:
    cluster: testbed
    user: admin
    namespace: default
current-context: testbed
EOF
chmod 600 "$DIR/kubeconfig"

# ---- helpers --------------------------------------------------------------
start() {  # start <name> <cmd...>
  local name=$1; shift
  nohup "$@" </dev/null >"$DIR/logs/$name.log" 2>&1 &
  echo "$name $!" >>"$DIR/pids"
  log "started $name (pid $!), log $DIR/logs/$name.log"
}
fail() {
  log "$1 did not become healthy within ${TIMEOUT}s; last log lines:"
  tail -n 30 "$DIR/logs/$1.log" >&2 || true
  "$HERE/down.sh" "$DIR" || true
  exit 1
}
wait_for() {  # wait_for <name> <curl args...>
  local name=$1; shift
  local t0=$SECONDS
  until [[ "$(curl -fsS --max-time 2 "$@" 2>/dev/null)" == ok* ]]; do
    pid=$(awk -v n="$name" '$1 == n {print $2}' "$DIR/pids")
    kill -0 "$pid" 2>/dev/null || fail "$name"
    (( SECONDS - t0 < TIMEOUT )) || fail "$name"
    sleep 0.2
  done
  log "$name healthy after $((SECONDS - t0))s"
}

# ---- etcd -----------------------------------------------------------------
start etcd "$BIN/etcd" \
  --name=testbed --data-dir="$DIR/etcd-data" \
  --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster="testbed=http://127.0.0.1:$ETCD_PEER_PORT" \
  --unsafe-no-fsync --auto-compaction-retention=1 --quota-backend-bytes=2147483648 \
  --log-level=warn
# etcd answers /health with JSON, not "ok"
t0=$SECONDS
until curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; do
  kill -0 "$(awk '$1=="etcd"{print $2}' "$DIR/pids")" 2>/dev/null || fail etcd
  (( SECONDS - t0 < TIMEOUT )) || fail etcd
  sleep 0.2
done
log "etcd healthy after $((SECONDS - t0))s"

# ---- kube-apiserver -------------------------------------------------------
ADMISSION=()
# Without kube-controller-manager nothing creates the "default" ServiceAccount
# (pods would be rejected) and nothing removes the node.kubernetes.io/not-ready
# taint that TaintNodesByCondition puts on every new node (pods would stay
# Pending): turn both admission plugins off in that case.
[[ $WITH_KCM == 1 ]] || ADMISSION=(--disable-admission-plugins=ServiceAccount,TaintNodesByCondition)
AUDIT=()
[[ -z ${TESTBED_APISERVER_AUDIT_POLICY:-} ]] ||
  AUDIT=(--audit-policy-file="$TESTBED_APISERVER_AUDIT_POLICY" --audit-log-path="$DIR/logs/audit.log")
start kube-apiserver "$BIN/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
  --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
  --client-ca-file="$P/ca.crt" --token-auth-file="$P/tokens.csv" \
  --authorization-mode=Node,RBAC \
  --service-cluster-ip-range=10.96.0.0/16 \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
  --allow-privileged=true \
  --cert-dir="$DIR/pki/apiserver-certs" \
  "${ADMISSION[@]}" "${AUDIT[@]}" \
  --v=1
AUTH=(--cacert "$P/ca.crt" -H "Authorization: Bearer $TOKEN")
wait_for kube-apiserver "${AUTH[@]}" "$APISERVER_URL/readyz"

# ---- kube-controller-manager (optional) ------------------------------------
if [[ $WITH_KCM == 1 ]]; then
  start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig="$DIR/kubeconfig" --authentication-kubeconfig="$DIR/kubeconfig" --authorization-kubeconfig="$DIR/kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
    --authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics \
    --leader-elect=false \
    --controllers="${TESTBED_KCM_CONTROLLERS:-*}" \
    --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
    --service-cluster-ip-range=10.96.0.0/16 \
    --cert-dir="$DIR/pki/kcm-certs" --v=1
  wait_for kube-controller-manager -k "https://127.0.0.1:$KCM_PORT/healthz"
  # pods in "default" are rejected until the serviceaccount controller made its SA
  t0=$SECONDS
  until curl -fsS --max-time 2 "${AUTH[@]}" -o /dev/null "$APISERVER_URL/api/v1/namespaces/default/serviceaccounts/default" 2>/dev/null; do
    (( SECONDS - t0 < TIMEOUT )) || fail kube-controller-manager
    sleep 0.2
  done
  log "default ServiceAccount present after $((SECONDS - t0))s"
fi

# ---- kube-scheduler -------------------------------------------------------
start kube-scheduler "$BIN/kube-scheduler" \
  --kubeconfig="$DIR/kubeconfig" \
  --authentication-kubeconfig="$DIR/kubeconfig" --authorization-kubeconfig="$DIR/kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" \
  --authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics \
  --cert-dir="$DIR/pki/scheduler-certs" \
  --leader-elect=false --v="${TESTBED_SCHEDULER_V:-1}" \
  ${TESTBED_SCHEDULER_FEATURE_GATES:+--feature-gates="$TESTBED_SCHEDULER_FEATURE_GATES"}
wait_for kube-scheduler -k "https://127.0.0.1:$SCHEDULER_PORT/healthz"

# ---- kwok -----------------------------------------------------------------
KWOK_STAGES=(--config="$BIN/stages.yaml")
[[ ${TESTBED_KWOK_GRACEFUL_DELETE:-0} != 1 ]] || KWOK_STAGES+=(--config="$HERE/kwok-graceful-delete.yaml")
[[ ${TESTBED_KWOK_RESIZE:-0} != 1 ]] || KWOK_STAGES+=(--config="$HERE/kwok-resize.yaml")
start kwok "$BIN/kwok" \
  --kubeconfig="$DIR/kubeconfig" \
  "${KWOK_STAGES[@]}" \
  --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --node-ip=127.0.0.1 --node-lease-duration-seconds=40 \
  --server-address="127.0.0.1:$KWOK_PORT"
wait_for kwok "http://127.0.0.1:$KWOK_PORT/healthz"

cat >"$DIR/env" <<EOF
KUBECONFIG=$DIR/kubeconfig
APISERVER_URL=$APISERVER_URL
APISERVER_TOKEN=$TOKEN
APISERVER_CA=$P/ca.crt
ETCD_ENDPOINT=http://127.0.0.1:$ETCD_PORT
SCHEDULER_PORT=$SCHEDULER_PORT
KWOK_PORT=$KWOK_PORT
TESTBED_DIR=$DIR
TESTBED_PIDS=$DIR/pids
EOF
log "up: KUBECONFIG=$DIR/kubeconfig"
echo "$DIR/kubeconfig"
