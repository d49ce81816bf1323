#!/usr/bin/env bash
# Installs kubernetes-validate (PyPI: validates manifests against the Kubernetes OpenAPI schemas
# offline; the schemas ship in the package) into a venv and prints the path of its command.
# Pinned by kubernetes-validate.requirements.txt beside this script; one venv per content of
# that file (hack/lib/cached-venv.sh), so a second run only prints the path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/cached-venv.sh"
works() { "$1/bin/kubernetes-validate" --version >/dev/null; }
dir=$(cached_venv kubernetes-validate "$here/kubernetes-validate.requirements.txt" works --no-deps)
echo "$dir/bin/kubernetes-validate"
