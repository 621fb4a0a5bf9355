#!/usr/bin/env bash
# The GPU record, in one device call: the device's facts, the roofline measured
# again, every seed at every size (the task's published held-out included), and
# bench_gpu.py (timers against each other, S over fresh processes, probe curves).
# Each step has its own time limit and writes under $OUT as it goes, so a step
# cut short loses only itself.
#     bash bench/gpu_record.sh [BACKEND]     (default cuda; sim to check the script)
set -u
backend=${1:-cuda}
out=${OUT:-/tmp/gpu_record}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
log=$out/record.log
start=$SECONDS
left() { local l=$(( ${DEADLINE_S:-100000} - (SECONDS - start) )); [ $l -lt 20 ] && l=20; [ $l -lt "$1" ] && echo $l || echo "$1"; }
step() { echo "== $(date -u +%T) $*" | tee -a "$log"; }

step device
{ nvidia-smi 2>&1; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv 2>&1
  "$py" -c "import mlx.core as mx; print('mlx', mx.__version__)"; git log -1 --format='commit %H %cI' 2>/dev/null; } > "$out/device.txt"

step roofline
timeout "$(left "${ROOF_S:-120}")" "$py" -m mlxsci.roofline --backend "$backend" --refresh --json > "$out/roofline.json" 2>>"$log"
echo "rc $?" >> "$log"

step seeds
for t in saxpy heat2d wave3d nbody hmc lbm ising lj gradshaf fft3d adi3d morton; do
  step "seed $t"
  timeout "$(left "${SEED_S:-90}")" "$py" -m mlxsci.eval "$t" --backend "$backend" --sizes all --held-out metal-sci --json \
    > "$out/seed_$t.json" 2>>"$log"
  echo "rc $?" >> "$log"
done
# One file for the seeds (the device call returns at most 8 files).
"$py" - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
with open(out / "seeds.jsonl", "w") as f:
    for p in sorted(out.glob("seed_*.json")):
        text = p.read_text().strip()
        try:
            f.write(json.dumps({"task": p.stem[5:], "result": json.loads(text)}) + "\n")
        except ValueError:
            f.write(json.dumps({"task": p.stem[5:], "raw": text[-4000:]}) + "\n")
        p.unlink()
PY

step bench_gpu
sizes=in-dist; [ "$backend" = sim ] && sizes=smoke
timeout "$(left "${BENCH_S:-300}")" "$py" bench/bench_gpu.py --backend "$backend" --sizes "$sizes" \
  --processes "${PROCESSES:-2}" --out "$out/bench" > "$out/bench_gpu.log" 2>&1
echo "rc $?" >> "$log"
step done
