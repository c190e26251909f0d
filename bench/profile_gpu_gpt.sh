#!/usr/bin/env bash
# Where a GPU step of the GPT goes (docs/gpu.md): one stage of bench_gpu_gpt.sh's gpt2 row
# (GPT-2-124M's shape, byte vocabulary, ctx 1024, 4 x 2 sequences) for STEPS steps under Nsight
# Systems, or Nsight Compute where only it is installed; prints the kernels by total GPU time,
# the CUDA API calls by time (synchronisations show a host-bound step), and the run's wall time.
# usage: bench/profile_gpu_gpt.sh [OUTDIR] [MODE] [PRECISION]   (MODE: bp | fg | fg+bp)
#   VOCAB=50257: GPT-2's head (the bytes are its first 256 ids); NCU_KERNELS: launches timed
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
out=${1:-bench/out/gpu-profile} mode=${2:-bp} precision=${3:-fp32} steps=${STEPS:-4}
fgpipe=build/fgpipe config=launch/configs/gpt-kjv.conf
[ -x "$fgpipe" ] || { echo "profile_gpu_gpt: build first (launch/build.sh)" >&2; exit 2; }
mkdir -p "$out"
find_tool() {  # find_tool NAME: on PATH, in the CUDA toolkit, or an Nsight install
  command -v "$1" 2>/dev/null ||
    find /usr/local/cuda*/bin /opt/nvidia /usr/local/cuda*/nsight* -name "$1" -type f 2>/dev/null | head -n 1
}
nsys=$(find_tool nsys) ncu=$(find_tool ncu)
case $nsys in */nsight-compute/*) nsys= ;; esac  # a helper of ncu, not Nsight Systems
declare -A MODE=([bp]="mode=bp schedule=gpipe" [fg]="mode=fg perturb=weight"
                 [fg+bp]="mode=fg+bp perturb=weight estimator=cv select=1")
sets=(model=gpt n_layer=12 n_embd=768 n_head=12 ctx=1024 micro_batch=4 micro_batches=2 vocab="${VOCAB:-256}"
      precision="$precision" ${MODE[$mode]} steps="$steps" warmup_steps=0 eval_every=0)
if [ "${VOCAB:-256}" != 256 ]; then  # random token ids (bare uint16, text_data.h) for a larger head
  /usr/bin/python3 -c 'import random, struct, sys; r = random.Random(1); v = int(sys.argv[3])
for path, n in (sys.argv[1], 1 << 18), (sys.argv[2], 1 << 14):
    open(path, "wb").write(struct.pack("<%dH" % n, *(r.randrange(v) for _ in range(n))))' \
    "$out/train.bin" "$out/val.bin" "$VOCAB"
  sets+=(data=tokens train_tokens="$out/train.bin" val_tokens="$out/val.bin")
fi
args=(); for kv in "${sets[@]}"; do args+=(--set "$kv"); done
cat docs/*.md README.md >"$out/corpus.txt"
run=("$fgpipe" train --config "$config" --set text_file="$out/corpus.txt" "${args[@]}"
     --device cuda --no-checkpoint --out "$out/run" --summary-json "$out/run.json")
mpi_flags 1
if [ -n "$nsys" ]; then
  echo "profile_gpu_gpt: $nsys"
  mpirun "${MPI_FLAGS[@]}" "$nsys" profile -t cuda,cublas -o "$out/gpt" --force-overwrite true \
    "${run[@]}" >"$out/run.txt" 2>&1
  "$nsys" stats -r cuda_gpu_kern_sum,cuda_gpu_mem_time_sum,cuda_api_sum --format table \
    "$out/gpt.nsys-rep" 2>&1 | cut -c1-220 | head -n 150
elif [ -n "$ncu" ]; then
  echo "profile_gpu_gpt: $ncu (no nsys): kernel times only, each kernel serialised"
  mpirun "${MPI_FLAGS[@]}" "$ncu" --metrics gpu__time_duration.sum --csv --page raw -c "${NCU_KERNELS:-2500}" \
    "${run[@]}" >"$out/ncu.csv" 2>"$out/run.txt" || true
  /usr/bin/python3 - "$out/ncu.csv" <<'PY'
import csv, collections, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
rows = rows[[i for i, r in enumerate(rows) if "Kernel Name" in r][0]:]  # the program's own lines before
head = rows[0]; name, t = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
total = collections.defaultdict(float); count = collections.Counter()
ns = {"nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9}.get(rows[1][t], 1)  # the units row
for r in rows[2:]:
    try: total[r[name][:90]] += float(r[t].replace(",", "")) * ns; count[r[name][:90]] += 1
    except ValueError: pass
s = sum(total.values())
for k, v in sorted(total.items(), key=lambda kv: -kv[1])[:40]:
    print(f"{100 * v / s:6.1f}% {v / 1e6:10.2f} ms {count[k]:7d}  {k}")
PY
else
  echo "profile_gpu_gpt: neither nsys nor ncu found; timing the run only"
  mpirun "${MPI_FLAGS[@]}" "${run[@]}" >"$out/run.txt" 2>&1
fi
tail -n 5 "$out/run.txt"
/usr/bin/python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("train_seconds", j["train_seconds"])' "$out/run.json"
