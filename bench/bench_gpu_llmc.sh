#!/usr/bin/env bash
# fgpipe against llm.c on one GPU (issue 52): GPT-2 124M's real shape (12 layers, 768 wide,
# 12 heads, ctx 1024, vocab 50257 padded to 50304 rows, tied embedding) trained from random
# weights on random token ids, one table from one run on one machine:
# - llm.c's train_gpt2cu (karpathy/llm.c, bf16, `-e d12`: its own random init of this shape),
#   at B = FG_SEQS sequences (fgpipe's batch) and at LLMC_FILL sequences (the batch that fills
#   an 80 GB GPU); its tokens/s is B x 1024 over the median of its printed step times (ms,
#   cudaEvent-timed), the first LLMC_SKIP steps left out;
# - fgpipe: bp in bf16, tf32 and fp32, fg (weight perturbation, K = 1) and fg+bp (cv,
#   backpropagating select = 1 micro-batch) in bf16, all at FG_MB x FG_NMB sequences a step
#   (one stage, one rank, --device cuda), and bp bf16 at FG_FILL_MB x FG_FILL_NMB; tokens/s is
#   the step's tokens over the run's median step time (summary.json's step_seconds, over its
#   STEPS steps: the first step's set-up falls out of the median);
# - MFU in llm.c's convention (train_gpt2.cu, gpt2_estimate_mfu): (6 N + 6 L C T) FLOPs per
#   token, N = 124 475 904 (the padded tied table once, the position table, LayerNorms and
#   biases), the same for both trainers and every mode (fg's FLOPs are not counted
#   differently), over the peak for the precision: bf16 989, tf32 495, fp32 67 TFLOP/s (H100
#   SXM and H200 dense; override with PEAK_BF16, PEAK_TF32, PEAK_FP32; an H100 PCIe is lower);
# - peak GPU memory of the run (nvidia-smi every 50 ms, less what was in use before it).
# llm.c is never built here: LLMC_BIN names a train_gpt2cu built elsewhere (its Makefile, bf16,
# for this GPU); without it the llm.c rows are skipped and say so. Every row that fails says
# why in the table and the others still run; the exit status is 1 when any row failed.
# usage: [LLMC_BIN=.../train_gpt2cu] bench/bench_gpu_llmc.sh [STEPS]
#   STEPS: fgpipe steps per run (default 8); LLMC_STEPS llm.c's (default 30); FG_MB, FG_NMB
#   (default 8, 2); FG_FILL_MB, FG_FILL_NMB (default 16, 4; FG_FILL_MB=0: no such row);
#   LLMC_FILL (default 64; 0: no such row); ROW_TIMEOUT seconds per run (default 90); FG_PRECS
#   (default "bf16 tf32 fp32") the precisions of bp's rows; FG_OTHER=0 leaves out fg's and fg+bp's
set -uo pipefail  # not -e: a failed row must not stop the others
cd "$(dirname "$0")/.." || exit 2
. bench/lib.sh
S=${1:-8}
LLMC_STEPS=${LLMC_STEPS:-30} LLMC_SKIP=${LLMC_SKIP:-3} LLMC_FILL=${LLMC_FILL:-64}
FG_MB=${FG_MB:-8} FG_NMB=${FG_NMB:-2} FG_FILL_MB=${FG_FILL_MB:-16} FG_FILL_NMB=${FG_FILL_NMB:-4}
ROW_TIMEOUT=${ROW_TIMEOUT:-90}
FG_SEQS=$((FG_MB * FG_NMB))
fgpipe=build/fgpipe config=launch/configs/gpt2-124m.conf py=/usr/bin/python3
[ -x "$fgpipe" ] || { echo "bench_gpu_llmc: build first (launch/build.sh)" >&2; exit 2; }
nvidia-smi -L >/dev/null 2>&1 || { echo "bench_gpu_llmc: no GPU visible (nvidia-smi -L)" >&2; exit 2; }
[ "$S" -ge 3 ] || { echo "bench_gpu_llmc: STEPS must be at least 3 (the median drops step 1)" >&2; exit 2; }
[ "$LLMC_STEPS" -gt $((LLMC_SKIP + 2)) ] ||
  { echo "bench_gpu_llmc: LLMC_STEPS must exceed LLMC_SKIP + 2" >&2; exit 2; }
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
declare -A PEAK=([fp32]=${PEAK_FP32:-67} [tf32]=${PEAK_TF32:-495} [bf16]=${PEAK_BF16:-989})
declare -A MODE=([bp]="mode=bp schedule=gpipe" [fg]="mode=fg perturb=weight"
                 [fg+bp]="mode=fg+bp perturb=weight estimator=cv select=1")
L=12 C=768 T=1024 V=50257 VP=50304
N=$(( VP * C + T * C + L * (12 * C * C + 13 * C) + 2 * C ))  # 124 475 904, llm.c's num_parameters
FLOPS_PER_TOKEN=$(( 6 * N + 6 * L * C * T ))
failed=0 failed_logs=()

# Random token ids below 50257, one stream: llm.c's files (a 256-int32 header: magic 20240520,
# version 1, the count; then uint16) and fgpipe's (bare little-endian uint16; val: 16 windows).
"$py" - "$dir" "$V" "$T" <<'PY' || { echo "bench_gpu_llmc: could not write the token files" >&2; exit 2; }
import array, random, struct, sys
out, vocab, ctx = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
n = 1 << 21  # 2 097 152 tokens: 32 steps of llm.c at B = 64
try:
    import numpy as np
    ids = np.random.default_rng(1).integers(0, vocab, n, dtype=np.uint16).astype("<u2").tobytes()
except ImportError:
    r = random.Random(1)
    a = array.array("H", (r.randrange(vocab) for _ in range(n)))
    if sys.byteorder != "little": a.byteswap()
    ids = a.tobytes()
header = struct.pack("<3i", 20240520, 1, n) + bytes(1024 - 12)
with open(f"{out}/llmc-train.bin", "wb") as f: f.write(header + ids)
with open(f"{out}/fg-train.bin", "wb") as f: f.write(ids)
with open(f"{out}/fg-val.bin", "wb") as f: f.write(ids[: 2 * (16 * ctx + 1)])
PY

# sample OUT CMD...: runs CMD (ROW_TIMEOUT) with its output in OUT.txt, peak GPU MiB in OUT.mem
sample() {
  local out=$1; shift
  local base smi rc
  base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 50 >"$out.smi" 2>/dev/null &
  smi=$!
  timeout -k 15 "$ROW_TIMEOUT" "$@" >"$out.txt" 2>&1
  rc=$?
  kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
  sort -n "$out.smi" | tail -n 1 | awk -v b="$base" '{ print $1 - b }' >"$out.mem"
  [ "$rc" -eq 124 ] && echo "timed out after ${ROW_TIMEOUT}s" >>"$out.txt"
  return $rc
}

# row TRAINER MODE PREC BATCH TOKENS_PER_S MEM NOTE: one line of the table (tokens/s "-": failed)
row() {
  "$py" - "$@" "$FLOPS_PER_TOKEN" "${PEAK[$3]}" <<'PY'
import sys
trainer, mode, prec, batch, tps, mem, note, fpt, peak = sys.argv[1:10]
note = note.replace("|", "/").replace("\n", " ")
if tps == "-":
    print(f"| {trainer:<7} | {mode:<5} | {prec:<4} | {batch:<17} | {'FAILED':>9} | {'-':>6} | {mem:>8} | {note} |")
else:
    mfu = 100 * float(tps) * int(fpt) / (float(peak) * 1e12)
    print(f"| {trainer:<7} | {mode:<5} | {prec:<4} | {batch:<17} | {float(tps):>9.0f} | {mfu:>5.1f}% | {mem:>8} | {note} |")
PY
}

declare -A TPS=()  # "trainer mode prec seqs" -> tokens/s, for the ratios

llmc_row() {  # llmc_row B
  local B=$1 r=$dir/llmc-b$1 why tps
  if ! (cd "$dir" && sample "$r" "$LLMC_BIN" -e d12 -b "$B" -t "$T" -x "$LLMC_STEPS" -u 0 \
        -v 1000000 -m 1 -s 0 -h 0 -n 0 -i "$dir/llmc-train.bin" -j "$dir/llmc-train.bin"); then
    why=$(grep -m1 -A1 -E 'ERROR|error|Error|Assertion|timed out|out of memory' "$r.txt" | tr '\n' ' ')
    [ -n "$why" ] || why=$(tail -n 1 "$r.txt")
    row llm.c bp bf16 "$B x $T" - "$(cat "$r.mem" 2>/dev/null || echo -)" "failed (rc != 0): $why"
    failed=1 failed_logs+=("$r.txt"); return
  fi
  if ! tps=$("$py" - "$r.txt" "$B" "$T" "$LLMC_SKIP" <<'PY'
import re, statistics, sys
path, B, T, skip = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
# train_gpt2.cu: "step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e | %.2f ms | %.1f%% bf16 MFU | %.0f tok/s"
pat = re.compile(r"^step\s+(\d+)/(\d+) \|.*\|\s*([0-9.]+) ms \|.*\|\s*([0-9.]+) tok/s\s*$")
ms = [float(m.group(3)) for m in map(pat.match, open(path, errors="replace")) if m and int(m.group(1)) > skip]
if len(ms) < 2: sys.exit(f"{len(ms)} step lines after step {skip}")
print(f"{B * T * 1000.0 / statistics.median(ms):.1f}")
PY
  ); then
    row llm.c bp bf16 "$B x $T" - "$(cat "$r.mem")" "no step lines to read"
    failed=1 failed_logs+=("$r.txt"); return
  fi
  local note="llm.c median step of steps $((LLMC_SKIP + 1))-$LLMC_STEPS" most
  most=$(sed -n 's/.*estimated maximum batch size: \([0-9]*\).*/\1/p' "$r.txt" | head -n 1)
  [ -n "$most" ] && note="$note; it estimates B <= $most fits"
  grep -q 'Fell back to cudaMallocManaged' "$r.txt" && note="$note; WARNING: managed-memory fallback (slow)"
  grep -q -E '^\| precision +\| BF16' "$r.txt" || note="$note; WARNING: not a BF16 build"
  TPS["llm.c bp bf16 $B"]=$tps
  row llm.c bp bf16 "$B x $T" "$tps" "$(cat "$r.mem")" "$note"
}

fgpipe_row() {  # fgpipe_row MODE PREC MB NMB
  local mode=$1 prec=$2 mb=$3 nmb=$4 r=$dir/fg-$1-$2-$3x$4 args=() kv why tps
  for kv in ${MODE[$mode]} precision="$prec" micro_batch="$mb" micro_batches="$nmb"; do args+=(--set "$kv"); done
  mpi_flags 1
  if ! sample "$r" mpirun "${MPI_FLAGS[@]}" "$fgpipe" train --config "$config" \
       --set train_tokens="$dir/fg-train.bin" --set val_tokens="$dir/fg-val.bin" "${args[@]}" \
       --device cuda --set steps="$S" --set warmup_steps=0 --set eval_every=0 \
       --set print_every=1000000 --no-checkpoint --out "$r" --summary-json "$r.json"; then
    why=$(grep -m1 -i -E 'error|timed out' "$r.txt" || tail -n 1 "$r.txt")
    row fgpipe "$mode" "$prec" "$((mb * nmb)) x $T" - "$(cat "$r.mem" 2>/dev/null || echo -)" "failed: $why"
    failed=1 failed_logs+=("$r.txt"); return
  fi
  if ! tps=$("$py" - "$r.json" "$((mb * nmb * T))" "$S" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
if s["steps"] != int(sys.argv[3]) or s["step_seconds"] <= 0: sys.exit(f"summary: {s['steps']} steps, step_seconds {s['step_seconds']}")
print(f"{int(sys.argv[2]) / s['step_seconds']:.1f}")
PY
  ); then
    row fgpipe "$mode" "$prec" "$((mb * nmb)) x $T" - "$(cat "$r.mem")" "no summary to read"
    failed=1 failed_logs+=("$r.txt"); return
  fi
  TPS["fgpipe $mode $prec $((mb * nmb))"]=$tps
  row fgpipe "$mode" "$prec" "$((mb * nmb)) x $T" "$tps" "$(cat "$r.mem")" "$mb x $nmb micro-batches, median of $S steps"
}

echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0)"
echo "GPT-2 124M: L $L, C $C, T $T, vocab $V padded to $VP, N = $N parameters"
echo "MFU = (6 N + 6 L C T) = $FLOPS_PER_TOKEN FLOPs/token x tokens/s over the peak: bf16 ${PEAK[bf16]}, tf32 ${PEAK[tf32]}, fp32 ${PEAK[fp32]} TFLOP/s"
printf '| %-7s | %-5s | %-4s | %-17s | %9s | %6s | %8s | %s |\n' trainer mode prec "batch (seq x ctx)" tokens/s MFU "GPU MiB" note
printf '|%s|%s|%s|%s|%s|%s|%s|%s|\n' --------- ------- ------ ------------------- ----------- -------- ---------- ------
if [ -n "${LLMC_BIN:-}" ] && [ -x "${LLMC_BIN:-}" ]; then
  LLMC_BIN=$(readlink -f "$LLMC_BIN")
  llmc_row "$FG_SEQS"
  [ "$LLMC_FILL" -gt 0 ] && [ "$LLMC_FILL" -ne "$FG_SEQS" ] && llmc_row "$LLMC_FILL"
elif [ -n "${LLMC_BIN:-}" ]; then
  echo "| llm.c   | bp    | bf16 | -                 |    FAILED |      - |        - | LLMC_BIN=$LLMC_BIN is not an executable |"
  failed=1
else
  echo "| llm.c   | bp    | bf16 | -                 |         - |      - |        - | llm.c anchor: skipped (LLMC_BIN not set) |"
  echo "llm.c anchor: skipped (LLMC_BIN not set)" >&2
fi
for prec in ${FG_PRECS:-bf16 tf32 fp32}; do fgpipe_row bp "$prec" "$FG_MB" "$FG_NMB"; done
if [ "${FG_OTHER:-1}" = 1 ]; then  # FG_OTHER=0: bp's rows alone
  fgpipe_row fg bf16 "$FG_MB" "$FG_NMB"
  fgpipe_row fg+bp bf16 "$FG_MB" "$FG_NMB"
fi
[ "$FG_FILL_MB" -gt 0 ] && fgpipe_row bp bf16 "$FG_FILL_MB" "$FG_FILL_NMB"

ratio() {  # ratio SEQS_FGPIPE SEQS_LLMC
  local a=${TPS["fgpipe bp bf16 $1"]:-} b=${TPS["llm.c bp bf16 $2"]:-}
  if [ -n "$a" ] && [ -n "$b" ]; then
    awk -v a="$a" -v b="$b" -v s="$1" -v t="$2" \
      'BEGIN { printf "fgpipe bp bf16 (%d seqs) / llm.c bf16 (%d seqs): %.3f (target >= 0.8)\n", s, t, a / b }'
  else
    echo "fgpipe bp bf16 ($1 seqs) / llm.c bf16 ($2 seqs): n/a (a row is missing)"
  fi
}
ratio "$FG_SEQS" "$FG_SEQS"
[ "$FG_FILL_MB" -gt 0 ] && [ "$LLMC_FILL" -gt 0 ] && ratio $((FG_FILL_MB * FG_FILL_NMB)) "$LLMC_FILL"
echo "tokens/s: llm.c B x 1024 over its median printed step time (steps after the first $LLMC_SKIP);"
echo "fgpipe the step's tokens over summary.json's median step time of $S steps (one stage, one rank)."
echo "fg is weight perturbation (K = 1), fg+bp backpropagates 1 micro-batch per step; the same"
echo "model FLOPs in every row, so MFU compares as tokens/s do."
for log in "${failed_logs[@]}"; do  # the temporary directory goes: show what each failure said
  echo "--- FAILED row, the end of $(basename "$log"):"; tail -n 12 "$log"
done
[ "$failed" -eq 0 ] || echo "bench_gpu_llmc: some rows FAILED (see the table)" >&2
exit "$failed"
