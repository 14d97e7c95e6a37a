#!/usr/bin/env bash
# The H200 noise study: an A/A pair of the GPU reference task (eager both sides), 5 rounds,
# streaming, c=16, with the server/client core split on or off; the bundle goes to $OUT.
#   OUT=/tmp/out bash runners/reference/aa.sh split|none
set -u
: "${OUT:?set OUT to a folder for the bundles}"
w=$(mktemp -d); chmod 711 $w
git init -q $w/ref && echo eager > $w/ref/variant.txt && git -C $w/ref add . && git -C $w/ref -c user.name=r -c user.email=r@l commit -qm base && echo "# same" > $w/ref/notes.txt && git -C $w/ref add . && git -C $w/ref -c user.name=r -c user.email=r@l commit -qm head
timeout 280 python3 -m runners verify --repo $w/ref --base $(git -C $w/ref rev-parse HEAD~1) --head $(git -C $w/ref rev-parse HEAD) --task gpu-reference --gpu h200 --rounds 5 --modes streaming --out $w/bundle --verification-id v-aa$1 --repo-name openrsi-bot/gpu-reference --total-timeout 250 --cpu-placement $1 2>&1 | tail -1
(cd $w && python3 -c "import shutil; shutil.make_archive('$OUT/rsi-bundle-v-aa-$1-h200', 'zip', 'bundle')")
