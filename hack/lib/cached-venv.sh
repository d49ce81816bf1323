# Sourced by the scripts that install a pinned Python tool (hack/chart/kubernetes-validate.sh,
# hack/torch/venv.sh): one venv per content of a requirements file, in a cache outside the
# repository, so a second run only finds it.
#
#   cached_venv NAME REQUIREMENTS VERIFY [PIP_ARGS...]
#
# prints the venv's directory, building it first when missing: `pip install PIP_ARGS -r
# REQUIREMENTS`, `pip check`, then `VERIFY DIR` (a function of the caller that fails when the
# installed tool does not work). A venv records its own path in its scripts, so it is built in
# place, under a lock, and a stamp marks it whole only once VERIFY passed.
cached_venv() {
  local name=$1 reqs=$2 verify=$3
  shift 3
  local tool
  for tool in python3 flock sha256sum; do
    command -v "$tool" >/dev/null 2>&1 || { echo "$name: $tool is needed (apt-get install -y python3 python3-venv util-linux coreutils)" >&2; return 1; }
  done
  local dir
  dir=${COLOCATE_TOOLS_CACHE:-$HOME/.cache/colocate-tools}/$name-$(sha256sum "$reqs" | cut -c1-12)
  if [ ! -e "$dir/.complete" ]; then
    mkdir -p "$(dirname "$dir")"
    # Every step checked by hand: errexit does not reach into a subshell on the left of ||.
    (
      flock 9 || exit 1
      if [ ! -e "$dir/.complete" ]; then
        rm -rf "$dir"
        python3 -m venv "$dir" >&2 || { echo "$name: python3 -m venv failed (apt-get install -y python3-venv)" >&2; exit 1; }
        "$dir/bin/pip" install --quiet --disable-pip-version-check "$@" -r "$reqs" >&2 || exit 1
        "$dir/bin/pip" check >&2 || exit 1
        "$verify" "$dir" || exit 1
        touch "$dir/.complete"
      fi
    ) 9>"$dir.lock" || return 1
  fi
  echo "$dir"
}
