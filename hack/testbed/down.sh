#!/usr/bin/env bash
# Stop what hack/testbed/up.sh DIR started (only the pids it recorded in
# DIR/pids), in reverse start order. TERM first, KILL after a grace period.
# TESTBED_KEEP=1 keeps DIR (logs, pki, etcd data); otherwise its state is removed
# except logs/.
set -euo pipefail

DIR=${1:?usage: down.sh DIR}
PIDS=$DIR/pids
log() { echo "[testbed-down] $*" >&2; }
[[ -f "$PIDS" ]] || { log "no $PIDS: nothing to stop"; exit 0; }

mapfile -t lines < <(tac "$PIDS")
for l in "${lines[@]}"; do
  read -r name pid <<<"$l"
  [[ -n "${pid:-}" ]] || continue
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      log "$name ($pid) ignored TERM; killing"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    log "stopped $name ($pid)"
  fi
done
rm -f "$PIDS"
if [[ ${TESTBED_KEEP:-0} != 1 ]]; then
  rm -rf "$DIR/etcd-data" "$DIR/pki" "$DIR/kubeconfig" "$DIR/env"
fi
