#!/usr/bin/env bash
# Installs PyTorch (hack/torch/requirements.txt) into a venv and prints the path of its python.
# One venv per content of the requirements file (hack/lib/cached-venv.sh), so a second run only
# prints the path. The first run downloads about 3 GB (torch's CUDA libraries come with the Linux
# wheel even for CPU use) and takes 1.5-2.5 minutes on a 2-core machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/cached-venv.sh"
runs_gloo() {
  "$1/bin/python" -c 'import torch, torch.distributed; assert torch.distributed.is_gloo_available(), "torch without gloo"' \
    || { echo "hack/torch/venv.sh: the installed torch cannot run gloo on CPU" >&2; return 1; }
}
dir=$(cached_venv torch "$here/requirements.txt" runs_gloo)
echo "$dir/bin/python"
