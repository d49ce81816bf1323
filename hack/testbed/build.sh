#!/usr/bin/env bash
# Build the binaries of the colocate test bed from Go modules (the Go module
# proxy is the only source used: no GitHub, no dl.k8s.io):
#
#   kube-apiserver, kube-scheduler   k8s.io/kubernetes            ${KUBE_VERSION}
#   etcd                             go.etcd.io/etcd/server/v3    ${ETCD_VERSION}
#   kwok (the controller, not kwokctl) sigs.k8s.io/kwok/cmd/kwok  ${KWOK_VERSION}
#
# Outputs are cached in ${COLOCATE_TESTBED_CACHE:-$HOME/.cache/colocate-testbed}/<component>-<version>/
# and a component whose binary is already there is not rebuilt.  At the end
# the script refreshes <cache>/bin/ (symlinks), writes <cache>/testbed.env and
# prints the bin directory on stdout (everything else goes to stderr), so
#
#   BIN=$(hack/testbed/build.sh)
#
# works.  The kwok stage manifests (node-initialize, node-heartbeat-with-lease,
# pod-ready, pod-complete, pod-delete) from the pinned kwok module are copied
# to <cache>/kwok-<version>/stages.yaml, since the kwok controller binary has no
# built-in default stages (kwokctl adds them; we don't use kwokctl).
#
# Environment:
#   COLOCATE_TESTBED_CACHE  cache root (default $HOME/.cache/colocate-testbed)
#   TESTBED_NICE            nice level for go builds (default 19)
#   TESTBED_COMPONENTS      what to build (default: all five, "etcd kube-apiserver
#                           kube-scheduler kwok kube-controller-manager"; the tests that
#                           need Deployments to get pods start kube-controller-manager)
set -euo pipefail

# ---- pinned versions -------------------------------------------------------
KUBE_VERSION=v1.34.10   # k8s.io/kubernetes; staging modules pinned to v0.34.10
ETCD_VERSION=v3.6.16    # go.etcd.io/etcd/server/v3 (and api, client, pkg at the same version)
KWOK_VERSION=v0.8.0     # sigs.k8s.io/kwok
# ---------------------------------------------------------------------------

CACHE=${COLOCATE_TESTBED_CACHE:-$HOME/.cache/colocate-testbed}
NICE=${TESTBED_NICE:-19}
COMPONENTS=${TESTBED_COMPONENTS:-"etcd kube-apiserver kube-scheduler kwok kube-controller-manager"}
STAGING_VERSION="v0.${KUBE_VERSION#v1.}"

export CGO_ENABLED=0          # upstream builds these server binaries statically too
export GOTOOLCHAIN=local      # never try to download a toolchain (no internet)
export GOFLAGS="-mod=mod -buildvcs=false"
export GOWORK=off

log() { echo "[testbed-build] $*" >&2; }

command -v go >/dev/null || { log "go not found in PATH"; exit 1; }
mkdir -p "$CACHE"
# One build at a time per cache: concurrent runs (test binaries, checkouts)
# would otherwise race on the *.tmp files below and on testbed.env.
if command -v flock >/dev/null; then
  exec 9>"$CACHE/.build.lock"
  flock 9
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/colocate-testbed-build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

want() { [[ " $COMPONENTS " == *" $1 "* ]]; }

# go_build <module-dir> <out-binary> <package> [ldflags]
go_build() {
  local dir=$1 out=$2 pkg=$3 ldflags=${4:-}
  local start=$SECONDS
  local name total blog
  name=$(basename "$out")
  total=$(cd "$dir" && go list -deps "$pkg" 2>/dev/null | wc -l)
  log "building $pkg -> $out ($total packages to compile; progress every 250)"
  mkdir -p "$(dirname "$out")"
  # -v names each package as it is compiled: a progress line every 250, the whole log on failure.
  blog="$WORK/$name.build.log"
  if ! (cd "$dir" && nice -n "$NICE" go build -v -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp" "$pkg" 2>&1) |
    tee "$blog" |
    awk -v name="$name" -v total="$total" 'NR % 250 == 0 { printf "[testbed-build] %s: %d of %d packages\n", name, NR, total > "/dev/stderr"; fflush("/dev/stderr") }'; then
    log "go build of $pkg failed; its output:"
    tail -n 60 "$blog" >&2
    exit 1
  fi
  mv -f "$out.tmp" "$out"
  log "built $(basename "$out") in $((SECONDS - start))s"
}

# ---- etcd -----------------------------------------------------------------
build_etcd() {
  local dest="$CACHE/etcd-$ETCD_VERSION"
  if [[ -x "$dest/etcd" ]]; then log "etcd $ETCD_VERSION cached"; return; fi
  local mod="$WORK/etcd"
  mkdir -p "$mod"
  # server/v3's own go.mod replaces its siblings with ../api etc. (ignored for
  # a dependency), so pin them explicitly to the same published version.
  cat >"$mod/go.mod" <<EOF
module colocate.local/testbed/etcd

go 1.26.0

require go.etcd.io/etcd/server/v3 $ETCD_VERSION

replace (
	go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/pkg/v3 => go.etcd.io/etcd/client/pkg/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/v3 => go.etcd.io/etcd/client/v3 $ETCD_VERSION
	go.etcd.io/etcd/pkg/v3 => go.etcd.io/etcd/pkg/v3 $ETCD_VERSION
)
EOF
  (cd "$mod" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION") >&2
  go_build "$mod" "$dest/etcd" go.etcd.io/etcd/server/v3
}

# ---- kubernetes -----------------------------------------------------------
kube_module() {
  local mod="$WORK/kube"
  if [[ -f "$mod/go.mod" ]]; then echo "$mod"; return; fi
  mkdir -p "$mod"
  local upstream
  upstream=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  [[ -f "$upstream" ]] || { log "could not download k8s.io/kubernetes@$KUBE_VERSION"; exit 1; }
  # Every staging module that k8s.io/kubernetes requires (as v0.0.0 and
  # replaces with ./staging/src/...) is pinned to the published v0.X.Y.
  # (sample-cli-plugin/sample-controller are only in upstream's replace block,
  # not required, and are not on the proxy for every patch release: skipped.)
  local staging
  staging=$(awk '
    /^require[[:space:]]*\(/ {inreq=1; next}
    inreq && /^\)/ {inreq=0; next}
    inreq && $2 == "v0.0.0" {req[$1]=1}
    $2 == "=>" && $3 ~ /^\.\/staging\/src\// && ($1 in req) {print $1}
  ' "$upstream" | sort -u)
  [[ -n "$staging" ]] || { log "found no staging modules in $upstream"; exit 1; }
  {
    echo "module colocate.local/testbed/kube"
    echo
    grep -E '^go [0-9]' "$upstream"
    grep -E '^godebug ' "$upstream" || true    # e.g. godebug default=go1.24
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    echo "replace ("
    for m in $staging; do printf '\t%s => %s %s\n' "$m" "$m" "$STAGING_VERSION"; done
    echo ")"
  } >"$mod/go.mod"
  log "k8s go.mod: $(echo "$staging" | wc -l) staging modules pinned to $STAGING_VERSION"
  (cd "$mod" && go get "k8s.io/kubernetes/cmd/kube-apiserver@$KUBE_VERSION" "k8s.io/kubernetes/cmd/kube-scheduler@$KUBE_VERSION" "k8s.io/kubernetes/cmd/kube-controller-manager@$KUBE_VERSION") >&2
  echo "$mod"
}

kube_ldflags() {
  local minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  local date
  date=$(cd "$WORK" && go list -m -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"Time": "\(.*\)",\{0,1\}$/\1/p')
  local f=""
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    f+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    f+=" -X $p.gitTreeState=clean -X $p.buildDate=${date:-1970-01-01T00:00:00Z}"
  done
  echo "$f"
}

build_kube() {
  local name=$1
  local dest="$CACHE/$name-$KUBE_VERSION"
  if [[ -x "$dest/$name" ]]; then log "$name $KUBE_VERSION cached"; return; fi
  local mod
  mod=$(kube_module)
  go_build "$mod" "$dest/$name" "k8s.io/kubernetes/cmd/$name" "$(kube_ldflags)"
}

# ---- kwok -----------------------------------------------------------------
build_kwok() {
  local dest="$CACHE/kwok-$KWOK_VERSION"
  if [[ -x "$dest/kwok" && -f "$dest/stages.yaml" ]]; then log "kwok $KWOK_VERSION cached"; return; fi
  local mod="$WORK/kwok"
  mkdir -p "$mod"
  printf 'module colocate.local/testbed/kwok\n\ngo 1.26.0\n\nrequire sigs.k8s.io/kwok %s\n' "$KWOK_VERSION" >"$mod/go.mod"
  (cd "$mod" && go get "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION") >&2
  local src
  src=$(cd "$mod" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  mkdir -p "$dest"
  local s first=1
  {
    for s in node/fast/node-initialize.yaml \
             node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
             pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
      [[ $first == 1 ]] || echo "---"
      first=0
      cat "$src/kustomize/stage/$s"
    done
  } >"$dest/stages.yaml.tmp"
  mv -f "$dest/stages.yaml.tmp" "$dest/stages.yaml"
  [[ -x "$dest/kwok" ]] || go_build "$mod" "$dest/kwok" sigs.k8s.io/kwok/cmd/kwok
}

total=$SECONDS
want etcd && build_etcd
want kube-apiserver && build_kube kube-apiserver
want kube-scheduler && build_kube kube-scheduler
want kwok && build_kwok
want kube-controller-manager && build_kube kube-controller-manager

# ---- bin dir + env file ----------------------------------------------------
BIN="$CACHE/bin"
mkdir -p "$BIN"
ENVF="$CACHE/testbed.env"
{
  echo "# generated by hack/testbed/build.sh"
  echo "TESTBED_BIN=$BIN"
  echo "KUBE_VERSION=$KUBE_VERSION"
  echo "ETCD_VERSION=$ETCD_VERSION"
  echo "KWOK_VERSION=$KWOK_VERSION"
} >"$ENVF.tmp"
link() {   # link <VAR> <path>
  if [[ -e "$2" ]]; then
    ln -sfn "$2" "$BIN/$(basename "$2")"
    echo "$1=$2" >>"$ENVF.tmp"
  fi
}
link ETCD "$CACHE/etcd-$ETCD_VERSION/etcd"
link KUBE_APISERVER "$CACHE/kube-apiserver-$KUBE_VERSION/kube-apiserver"
link KUBE_SCHEDULER "$CACHE/kube-scheduler-$KUBE_VERSION/kube-scheduler"
link KUBE_CONTROLLER_MANAGER "$CACHE/kube-controller-manager-$KUBE_VERSION/kube-controller-manager"
link KWOK "$CACHE/kwok-$KWOK_VERSION/kwok"
link KWOK_STAGES "$CACHE/kwok-$KWOK_VERSION/stages.yaml"
mv -f "$ENVF.tmp" "$ENVF"
log "done in $((SECONDS - total))s; env file: $ENVF"
echo "$BIN"
