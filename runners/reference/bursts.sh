#!/usr/bin/env bash
# Bursts sized to the server (runners/bursts.py) on a server with batching of its own
# (runners/reference/batcher.py, task gpu-batching): each pair through `python3 -m runners
# verify --design alternate --rounds auto`, isolated, bundles zipped into $OUT.
#   OUT=/tmp/out SIZING=auto|off bash runners/reference/bursts.sh NAME…
# NAME: aa (base vs base again), plant (base+10 → base: the head does 10% less GPU work a
# layer), time (no verification: one batch of each variant timed directly on the GPU, the
# planted effect's ground truth). GPU (h100|h200, by default the card found), SIZING
# (--burst-sizing, auto), REQUESTS (a burst, the task's 128), MAX_ROUNDS (16), LIMIT (seconds a verification, 150), MODES
# (non-streaming).
set -u
: "${OUT:?set OUT to a folder for the bundles}"
limit=${LIMIT:-150}; sizing=${SIZING:-auto}
gpu=${GPU:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -o -i "h[12]00" | tr A-Z a-z)}
gpu=${gpu:-h200}
python3 -m runners sandbox --create-users >/dev/null 2>&1 || true
w=$(mktemp -d); chmod 711 "$w"; git init -q "$w/ref"
commit() {  # variant, note → the new commit's SHA
  echo "$1" > "$w/ref/variant.txt"; echo "$2" > "$w/ref/notes.txt"
  git -C "$w/ref" add . && git -C "$w/ref" -c user.name=r -c user.email=r@l commit -qm "$2"
  git -C "$w/ref" rev-parse HEAD
}
base=$(commit base base); base2=$(commit base base-again); slow=$(commit base+10 base-plus-10pct)
for name in "$@"; do
  case $name in
    aa) b=$base h=$base2 ;; plant) b=$slow h=$base ;;
    time) python3 -m runners.reference.batcher --time-variants base base+10; continue ;;
    *) echo "unknown $name"; continue ;;
  esac
  id="v-bat-$name-$sizing"
  t0=$(date +%s.%N)
  timeout $((limit + 30)) python3 -m runners verify --repo "$w/ref" --base "$b" --head "$h" \
    --task gpu-batching --gpu "$gpu" --modes "${MODES:-non-streaming}" \
    --rounds auto --max-rounds "${MAX_ROUNDS:-16}" --design alternate \
    --burst-sizing "$sizing" ${REQUESTS:+--requests "$REQUESTS"} --repo-name openrsi-bot/gpu-batching --verification-id "$id" \
    --out "$w/$id" --total-timeout "$limit" 2>&1 | tail -1
  python3 - "$w/$id/manifest.json" "$t0" <<'PY'
import json, sys, time
m = json.load(open(sys.argv[1]))
a, d = m.get("adaptive") or {}, m.get("design") or {}
print(m["verification_id"], "wall", round(time.time() - float(sys.argv[2]), 1), "s",
      "gpu_min", m.get("gpu_minutes"), "stopped", a.get("stopped"), "design",
      d.get("name"), d.get("refused"))
last = {}
for look in a.get("looks") or []:
    last[look["row"]] = look
for row, r in (a.get("rows") or {}).items():
    lk = last.get(row) or {}
    print("  ", row, r.get("verdict"), "pairs", r.get("rounds"), "delta", lk.get("delta_pct"),
          "ci", lk.get("ci_pct"), "|", r.get("reason"))
runs = [r for r in m.get("runs") or [] if r.get("status") == "ok"]
print("   burst lengths (requests a burst, in order):", [r.get("requests") for r in runs])
print("   burst_sizing", json.dumps(d.get("burst_sizing")))
for s, recs in (d.get("servers") or {}).items():
    for r in recs:
        print("  server", s, r.get("startup_s"), "vram", r.get("vram_mib"), "of",
              r.get("gpu_memory_total_mib"), "resident_s", r.get("resident_s"))
PY
  (cd "$w" && python3 -c "import shutil,sys; shutil.make_archive(sys.argv[1], 'zip', sys.argv[2])" \
    "$OUT/rsi-bundle-$id-$gpu" "$id")
done
