#!/usr/bin/env bash
# --rounds auto on the H200: eager vs CUDA-graph decode (graph), an A/A pair of the eager
# server (aa) or of the CUDA-graph server (aa-graph), at most MAX_ROUNDS rounds a side
# (default 12); the bundles go to $OUT.
#   OUT=/tmp/out bash runners/reference/auto.sh graph|aa|aa-graph|both [AA_SECONDS]
set -u
: "${OUT:?set OUT to a folder for the bundles}"
which=${1:-both}; aa_s=${2:-500}
w=$(mktemp -d); chmod 711 $w
git init -q $w/ref && echo eager > $w/ref/variant.txt && git -C $w/ref add . && git -C $w/ref -c user.name=r -c user.email=r@l commit -qm base
echo graph > $w/ref/variant.txt && git -C $w/ref -c user.name=r -c user.email=r@l commit -qam graph
echo eager > $w/ref/variant.txt && echo same > $w/ref/notes.txt && git -C $w/ref add . && git -C $w/ref -c user.name=r -c user.email=r@l commit -qm same
echo graph > $w/ref/variant.txt && echo "same graph" > $w/ref/notes.txt && git -C $w/ref -c user.name=r -c user.email=r@l commit -qam same-graph
r=$w/ref; b=$(git -C $r rev-parse HEAD~3); g=$(git -C $r rev-parse HEAD~2); s=$(git -C $r rev-parse HEAD~1); g2=$(git -C $r rev-parse HEAD)
common="--repo $r --base $b --task gpu-reference --gpu h200 --rounds auto --modes streaming --repo-name openrsi-bot/gpu-reference"
if [ "$which" = graph ] || [ "$which" = both ]; then
  timeout 150 python3 -m runners verify $common --head $g --out $w/graph --verification-id v-autograph --total-timeout 140 2>&1 | tail -1
  (cd $w && python3 -c "import shutil; shutil.make_archive('$OUT/rsi-bundle-v-autograph-h200', 'zip', 'graph')")
fi
if [ "$which" = aa-graph ]; then
  timeout $((aa_s + 15)) python3 -m runners verify ${common/--base $b/--base $g} --head $g2 --out $w/aag --verification-id v-autoaag --total-timeout $aa_s --max-rounds ${MAX_ROUNDS:-12} 2>&1 | tail -1
  (cd $w && python3 -c "import shutil; shutil.make_archive('$OUT/rsi-bundle-v-autoaag-h200', 'zip', 'aag')")
fi
if [ "$which" = aa ] || [ "$which" = both ]; then
  timeout $((aa_s + 15)) python3 -m runners verify $common --head $s --out $w/aa --verification-id v-autoaa --total-timeout $aa_s --max-rounds ${MAX_ROUNDS:-12} 2>&1 | tail -1
  (cd $w && python3 -c "import shutil; shutil.make_archive('$OUT/rsi-bundle-v-autoaa-h200', 'zip', 'aa')")
fi
