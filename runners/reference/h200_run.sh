#!/usr/bin/env bash
# The proof run on a real GPU: base (eager decode) vs head (CUDA-graph decode) of the
# GPU reference task through `python3 -m runners verify`, then the runner-overhead bench.
#   bash runners/reference/h200_run.sh OUT_DIR [GPU]
set -euo pipefail
out=${1:?out dir}; gpu=${2:-h200}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
export GIT_AUTHOR_NAME=rsi GIT_AUTHOR_EMAIL=rsi@localhost GIT_COMMITTER_NAME=rsi GIT_COMMITTER_EMAIL=rsi@localhost
git init -q "$work/ref"
echo eager > "$work/ref/variant.txt"; git -C "$work/ref" add .; git -C "$work/ref" commit -qm base
base=$(git -C "$work/ref" rev-parse HEAD)
echo graph > "$work/ref/variant.txt"; git -C "$work/ref" commit -qam head
head=$(git -C "$work/ref" rev-parse HEAD)
cd "$root"
python3 -m runners verify --repo "$work/ref" --base "$base" --head "$head" \
  --task gpu-reference --gpu "$gpu" --rounds 5 --modes streaming,non-streaming \
  --out "$out/bundle" --verification-id v-h200ref --repo-name openrsi-bot/gpu-reference \
  --runner-name "device-$gpu" --runner-labels "self-hosted,linux,$gpu" || echo "verify exit $?"
(cd "$out" && python3 -c "import shutil; shutil.make_archive('rsi-bundle-v-h200ref-$gpu', 'zip', 'bundle')")
RSI_GPU=$gpu python3 bench/runner_overhead.py --out "$out" --rounds 3 || echo "overhead exit $?"
