#!/usr/bin/env bash
# The measurement designs on the H200: each pair through `python3 -m runners
# verify --rounds auto`, isolated, both modes, bundles zipped into $OUT.
#   OUT=/tmp/out DESIGN=alternate|sequential bash runners/reference/designs.sh NAME…
# NAME: graph (eager → CUDA graph), aag (A/A, CUDA graph), aag-swap (the same, commits
# swapped), plant (graph+5 → graph: the base does 5% more GPU work a step), plant-swap
# (graph → graph+5), aa (A/A, eager), aa-swap. GPU (h100|h200, by default the card found), MAX_ROUNDS (20), LIMIT (seconds a verification, 110), MODES (both).
set -u
: "${OUT:?set OUT to a folder for the bundles}"
design=${DESIGN:-alternate}; limit=${LIMIT:-110}
# GPU: the label the bundles carry; by default the card this machine has (h100 or h200).
gpu=${GPU:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -o -i "h[12]00" | tr A-Z a-z)}
gpu=${gpu:-h200}
python3 -m runners sandbox --create-users >/dev/null 2>&1 || true
w=$(mktemp -d); chmod 711 "$w"; git init -q "$w/ref"
commit() {  # variant, note → the new commit's SHA
  echo "$1" > "$w/ref/variant.txt"; echo "$2" > "$w/ref/notes.txt"
  git -C "$w/ref" add . && git -C "$w/ref" -c user.name=r -c user.email=r@l commit -qm "$2"
  git -C "$w/ref" rev-parse HEAD
}
eager=$(commit eager eager); graph=$(commit graph graph); graph2=$(commit graph graph-again)
slow=$(commit graph+5 graph-plus-5pct); eager2=$(commit eager eager-again)
for name in "$@"; do
  case $name in
    graph) b=$eager h=$graph ;; aag) b=$graph h=$graph2 ;; aag-swap) b=$graph2 h=$graph ;;
    plant) b=$slow h=$graph ;; plant-swap) b=$graph h=$slow ;;
    aa) b=$eager h=$eager2 ;; aa-swap) b=$eager2 h=$eager ;;
    *) echo "unknown $name"; continue ;;
  esac
  id="v-${design:0:3}-$name"
  t0=$(date +%s.%N)
  timeout $((limit + 30)) python3 -m runners verify --repo "$w/ref" --base "$b" --head "$h" \
    --task gpu-reference --gpu "$gpu" --modes "${MODES:-streaming,non-streaming}" \
    --rounds auto --max-rounds "${MAX_ROUNDS:-20}" --design "$design" \
    --repo-name openrsi-bot/gpu-reference --verification-id "$id" --out "$w/$id" \
    --total-timeout "$limit" ${CONTROL:+--control "$CONTROL"} 2>&1 | tail -1
  python3 - "$w/$id/manifest.json" "$t0" <<'PY'
import json, sys, time
m = json.load(open(sys.argv[1]))
a = m.get("adaptive") or {}
print(m["verification_id"], "wall", round(time.time() - float(sys.argv[2]), 1), "s",
      "gpu_min", m.get("gpu_minutes"), "stopped", a.get("stopped"), "design",
      (m.get("design") or {}).get("name"), (m.get("design") or {}).get("refused"))
for row, r in (a.get("rows") or {}).items():
    print("  ", row, r.get("verdict"), r.get("rounds"), r.get("reason"))
c = m.get("control") or {}
if c:
    print("   control", len(c.get("runs") or []), "bursts", c.get("gpu_minutes"), "GPU min")
for s, recs in ((m.get("design") or {}).get("servers") or {}).items():
    for r in recs:
        print("  server", s, r.get("startup_s"), "vram", r.get("vram_mib"), "of",
              r.get("gpu_memory_total_mib"), "resident_s", r.get("resident_s"))
PY
  (cd "$w" && python3 -c "import shutil,sys; shutil.make_archive(sys.argv[1], 'zip', sys.argv[2])" \
    "$OUT/rsi-bundle-$id-$gpu" "$id")
done
