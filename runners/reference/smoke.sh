set -e
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv
python3 -c "import torch; print(torch.__version__, torch.cuda.is_available())"
for v in eager graph; do
  python3 -m runners.reference.server --port 8123 --variant $v > $OUT/server-$v.log 2>&1 &
  pid=$!
  t0=$(date +%s.%N)
  for i in $(seq 1 120); do curl -sf http://127.0.0.1:8123/health >/dev/null && break; sleep 0.5; done
  echo "$v startup $(echo "$(date +%s.%N) - $t0" | bc)"
  python3 -m runners.reference.client --port 8123 --requests 128 --concurrency 16 --output-dir $OUT/$v-ns
  python3 -m runners.reference.client --port 8123 --requests 128 --concurrency 16 --stream --output-dir $OUT/$v-s
  python3 -c "import json; [print('$v', m, json.load(open('$OUT/$v-'+m+'/speed_results.json'))['summary']) for m in ('ns','s')]"
  kill $pid; wait $pid || true
done
