#!/usr/bin/env bash
# Runs the Dockerfile's build stage without Docker (Docker builds do not work on the CI machine),
# so that a change to Cargo.toml, src/ or the Dockerfile that breaks the image build fails CI
# instead of the first `docker build` a user runs.
#
# It plays the build stage's WORKDIR, COPY and RUN instructions in order, as Docker would, in a
# directory standing for the stage's root; COPY takes only what .dockerignore lets into the
# build context. Then it checks that every `COPY --from=build` of the later stages finds its
# source, and runs the binary the runtime stage would hold: `--version`, and `replay` from an
# empty directory (the default scenario is embedded). Differences from a real build: the host's
# Rust toolchain stands for the image's (a different version is reported, not fatal), and the
# stage's target/ is kept between runs (like a BuildKit cache mount) so that only the crate
# itself is rebuilt once dependencies are built. Any other instruction in the build stage is an
# error: the script would not be playing the Dockerfile faithfully.
#
#   hack/docker/build-stage.sh          root: ${COLOCATE_TOOLS_CACHE:-~/.cache/colocate-tools}/docker-build-stage
set -euo pipefail
# A Docker build starts from the image's environment, not the caller's: settings that move
# cargo's output or change how it compiles (CARGO_TARGET_DIR would put the binary where the
# Dockerfile's strip and COPY do not look) are dropped. CARGO_HOME stays: it stands for the
# registry cache mount, and the toolchain comes from PATH.
unset CARGO_TARGET_DIR CARGO_BUILD_TARGET_DIR CARGO_BUILD_TARGET CARGO_BUILD_RUSTFLAGS RUSTFLAGS \
  CARGO_ENCODED_RUSTFLAGS RUSTC_WRAPPER CARGO_BUILD_RUSTC_WRAPPER CARGO_PROFILE_RELEASE_DEBUG \
  CARGO_PROFILE_RELEASE_STRIP CARGO_INCREMENTAL
repo=$(cd "$(dirname "$0")/../.." && pwd)
dockerfile=$repo/Dockerfile
cache=${COLOCATE_TOOLS_CACHE:-$HOME/.cache/colocate-tools}/docker-build-stage
root=$cache/root
build_stage=build

fail() { echo "build-stage.sh: $*" >&2; exit 1; }

# Instructions, one per line: comments dropped, `\` continuations joined (comment lines inside a
# continuation are dropped too, as Docker does).
mapfile -t instructions < <(
  sed -e '/^[[:space:]]*#/d' "$dockerfile" |
    awk '{ if (sub(/\\[[:space:]]*$/, "")) { buf = buf $0 " "; next } print buf $0; buf = "" }' |
    grep -v '^[[:space:]]*$'
)

# .dockerignore: the last matching pattern decides; `!pattern` lets a path back in. Enough for
# the allow-list form the repository uses (`*` then `!path`).
mapfile -t ignore < <(grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$repo/.dockerignore" 2>/dev/null || true)
in_context() {
  local path=${1%/} included=1 pattern negated
  for pattern in "${ignore[@]}"; do
    negated=0
    if [[ $pattern == '!'* ]]; then negated=1; pattern=${pattern#!}; fi
    pattern=${pattern%/}
    # shellcheck disable=SC2053 # the pattern is a glob on purpose
    if [[ $path == $pattern || $path == $pattern/* ]]; then included=$negated; fi
  done
  [[ $included == 1 ]]
}

# A fresh stage root, keeping target/ of the build stage's first WORKDIR from the last run.
first_workdir=$(printf '%s\n' "${instructions[@]}" | awk 'toupper($1) == "WORKDIR" { print $2; exit }')
[[ $first_workdir == /* ]] || fail "the build stage has no absolute WORKDIR"
kept_target=$root$first_workdir/target saved_target=$cache/target
mkdir -p "$cache"
if [[ -d $kept_target ]]; then rm -rf "$saved_target"; mv "$kept_target" "$saved_target"; fi
rm -rf "$root"
mkdir -p "$root"

in_root() { [[ $1 == /* ]] && echo "$root$1" || echo "$workdir/$1"; }

stage="" workdir=$root restored=0
for line in "${instructions[@]}"; do
  read -r op args <<<"$line"
  op=${op^^}
  if [[ $op == FROM ]]; then
    read -r image _ name <<<"$args"
    stage=${name:-$image}
    if [[ $stage == "$build_stage" && $image == rust:* ]]; then
      wanted=${image#rust:}; wanted=${wanted%%-*}
      have=$(rustc --version | awk '{print $2}')
      [[ $have == "$wanted"* ]] || echo "build-stage.sh: the image builds with Rust $wanted; playing it with the host's $have" >&2
    fi
    continue
  fi
  if [[ $stage != "$build_stage" ]]; then
    # Later stages: check what they take from the build stage.
    if [[ $op == COPY && $args == --from=$build_stage* ]]; then
      read -r _ src _ <<<"$args"
      [[ -e $root$src ]] || fail "\`$line\`: $src is not in the build stage"
      built=$root$src
    fi
    continue
  fi
  echo "build-stage.sh: $op $args" >&2
  case $op in
    WORKDIR)
      workdir=$(in_root "$args"); mkdir -p "$workdir"
      if [[ $restored == 0 && -d $saved_target ]]; then mv "$saved_target" "$kept_target"; fi
      restored=1 ;;
    COPY)
      read -r -a parts <<<"$args"
      dest=$(in_root "${parts[-1]}")
      for src in "${parts[@]:0:${#parts[@]}-1}"; do
        [[ $src == --* ]] && fail "\`$line\`: COPY flags are not played here"
        in_context "$src" || fail "\`$line\`: $src is excluded from the build context by .dockerignore"
        [[ -e $repo/$src ]] || fail "\`$line\`: $src does not exist in the repository"
        if [[ -d $repo/$src ]]; then
          mkdir -p "$dest"; cp -a "$repo/$src/." "$dest/"
        else
          [[ ${parts[-1]} == */ ]] && mkdir -p "$dest"
          cp -a "$repo/$src" "$dest"
        fi
      done ;;
    RUN)
      (cd "$workdir" && sh -c "$args") || fail "\`$line\` failed" ;;
    ENV | ARG | LABEL) ;;
    *) fail "\`$line\`: $op is not played in the build stage" ;;
  esac
done

[[ -n ${built:-} ]] || fail "no stage copies a file from the '$build_stage' stage"
echo "build-stage.sh: the runtime image would hold $built: $("$built" --version)" >&2
empty=$(mktemp -d)
(cd "$empty" && "$built" replay >/dev/null) || fail "$built replay (embedded scenario) failed in an empty directory"
rmdir "$empty"
echo "build-stage.sh: ok ($built replay runs from an empty directory)" >&2
