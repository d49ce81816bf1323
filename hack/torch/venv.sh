#!/usr/bin/env bash
# Installs PyTorch (hack/torch/requirements.txt) into a venv and prints the path of its python.
# One venv per content of the requirements file, in a cache outside the repository, so a second
# run only prints the path. The first run downloads about 3 GB (torch's CUDA libraries come with
# the Linux wheel even for CPU use) and takes 1-2 minutes on a 2-core machine.
set -euo pipefail
reqs=$(cd "$(dirname "$0")" && pwd)/requirements.txt
for tool in python3 flock sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || { echo "hack/torch/venv.sh: $tool is needed (apt-get install -y python3 python3-venv util-linux coreutils)" >&2; exit 1; }
done
dir=${COLOCATE_TOOLS_CACHE:-$HOME/.cache/colocate-tools}/torch-$(sha256sum "$reqs" | cut -c1-12)
# A venv records its own path in its scripts, so it is built in place; the stamp marks it whole.
if [ ! -e "$dir/.complete" ]; then
  mkdir -p "$(dirname "$dir")"
  exec 9>"$dir.lock"
  flock 9
  if [ ! -e "$dir/.complete" ]; then
    rm -rf "$dir"
    python3 -m venv "$dir" >&2 || { echo "hack/torch/venv.sh: python3 -m venv failed (apt-get install -y python3-venv)" >&2; exit 1; }
    "$dir/bin/pip" install --quiet --disable-pip-version-check -r "$reqs" >&2
    "$dir/bin/pip" check >&2
    "$dir/bin/python" -c 'import torch, torch.distributed; assert torch.distributed.is_gloo_available(), "torch without gloo"' \
      || { echo "hack/torch/venv.sh: the installed torch cannot run gloo on CPU" >&2; exit 1; }
    touch "$dir/.complete"
  fi
fi
echo "$dir/bin/python"
