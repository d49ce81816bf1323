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

# alive <pid>: running, and not a zombie. The components are re-parented to
# pid 1 once up.sh exits; an init that reaps only every couple of seconds (as
# in some sandboxes and containers) leaves them as zombies that `kill -0`
# still sees, which made each stop wait for the reaper (~2s per component).
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0   # no procfs: trust kill -0
  stat=${stat##*) }
  [[ ${stat%% *} != Z ]]
}

mapfile -t lines < <(tac "$PIDS")
for l in "${lines[@]}"; do
  read -r name pid <<<"$l"
  [[ -n "${pid:-}" ]] || continue
  if alive "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.05; done
    if alive "$pid"; then
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
