#!/usr/bin/env bash
# Installs kubernetes-validate (PyPI: validates manifests against the Kubernetes OpenAPI schemas
# offline; the schemas ship in the package) into a venv and prints the path of its command.
# Pinned by kubernetes-validate.requirements.txt beside this script; one venv per content of
# that file, in a cache outside the repository, so a second run only prints the path.
set -euo pipefail
reqs=$(cd "$(dirname "$0")" && pwd)/kubernetes-validate.requirements.txt
for tool in python3 flock sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || { echo "kubernetes-validate.sh: $tool is needed (apt-get install -y python3 python3-venv util-linux coreutils)" >&2; exit 1; }
done
dir=${COLOCATE_TOOLS_CACHE:-$HOME/.cache/colocate-tools}/kubernetes-validate-$(sha256sum "$reqs" | cut -c1-12)
# A venv records its own path in its scripts, so it is built in place; the stamp marks it whole.
if [ ! -e "$dir/.complete" ]; then
  mkdir -p "$(dirname "$dir")"
  exec 9>"$dir.lock"
  flock 9
  if [ ! -e "$dir/.complete" ]; then
    rm -rf "$dir"
    python3 -m venv "$dir" >&2 || { echo "kubernetes-validate.sh: python3 -m venv failed (apt-get install -y python3-venv)" >&2; exit 1; }
    "$dir/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$reqs" >&2
    "$dir/bin/pip" check >&2
    "$dir/bin/kubernetes-validate" --version >/dev/null
    touch "$dir/.complete"
  fi
fi
echo "$dir/bin/kubernetes-validate"
