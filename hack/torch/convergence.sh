#!/usr/bin/env bash
# The convergence experiment, one command: replays scenarios/elasticdl-nginx.yaml, takes the
# wide-deep job's targets from the colocate policy's intents.csv as the elastic schedule, and
# trains both model families rigid at 4 and 8 workers, elastic 4..8 (graceful, through the
# torchrun master) and elastic with shrinks as kills, three seeds each. About an hour on 2 cores.
#
#   hack/torch/convergence.sh [OUT_DIR] [extra flags for python -m colocate_torchrun.convergence]
#
# Writes OUT_DIR/table.md, OUT_DIR/wide-deep.svg, OUT_DIR/mlp.svg and OUT_DIR/runs.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-out/convergence}
shift || true
python=$(hack/torch/venv.sh)
cargo build --release --locked --quiet
mkdir -p "$out"
target/release/colocate replay scenarios/elasticdl-nginx.yaml --out "$out/replay" >/dev/null
PYTHONPATH=python exec "$python" -m colocate_torchrun.convergence --intents "$out/replay/intents.csv" \
  --job wide-deep --out "$out" --python "$python" "$@"
