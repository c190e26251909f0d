#!/usr/bin/env bash
# fgpipe against llm.c's CPU trainer (issue 52): GPT-2 124M's shape (12 layers, 768 wide,
# 12 heads, vocab 50257 padded to 50304 rows, tied embedding) at llm.c train_gpt2.c's own
# batch (4 sequences of 64 tokens a step), bp, FP32, one rank, THREADS threads, trained from
# random weights on random token ids; one table from one run on one machine:
# - llm.c's train_gpt2.c (karpathy/llm.c; its Makefile's build): it reads fixed relative paths
#   (gpt2_124M.bin, dev/data/tinyshakespeare/tiny_shakespeare_{train,val}.bin), so it runs in a
#   directory of its own holding a random-weight checkpoint of its format (a 256-int32 header:
#   magic 20240326, version 3, maxT 1024, V, L, NH, C, Vp; then every parameter in
#   fill_in_parameter_sizes' order; matrices N(0, 0.02), LayerNorm weights 1, biases 0) and
#   token files of its format (a 256-int32 header: magic 20240520, version 1, the count; then
#   uint16 ids). Its printed "step N: ... (took X ms)" times the training step alone (the batch,
#   forward, zero_grad, backward, AdamW update); its validation (before steps 0, 10, 20, ...)
#   and generation (before steps 20, 40) run outside that clock. It always runs 41 steps, so
#   the bench stops it once step STEPS is printed; tokens/s is B x T = 256 over the median of
#   steps 1..STEPS (step 0 allocates its activations and gradients and is left out);
# - fgpipe (FGPIPE, default build/fgpipe) once per precision of PRECISIONS (say "fp32 bf16":
#   oneDNN's sgemm, then its BF16 matmul) and, when FGPIPE_BASELINE names a second binary (say
#   the OpenBLAS build, -DFGPIPE_CPU_GEMM=openblas), that one in fp32: launch/configs/gpt2-124m.conf
#   at ctx 64, 4 x 1 sequences a step, bp (schedule gpipe), one stage, one rank, STEPS + 1
#   steps, no evaluation, no checkpoint; tokens/s is 256 over the median step time of steps
#   2..STEPS+1 (loss.csv's seconds column; summary.json's step_seconds, the median of all
#   steps, if loss.csv is missing). Each binary's GEMM library is what it says
#   (a summary.json key or a log line naming oneDNN or OpenBLAS), else its build directory's
#   FGPIPE_CPU_GEMM (the CMakeCache.txt beside it; a bf16 run is oneDNN's BF16 matmul in either
#   build, both of which link both libraries), else what ldd shows, marked "(ldd)".
# The machine may be shared: every round runs each trainer once, in an order rotated each
# round, and the table gives each trainer's best round (and every round), with the load average
# at the start and the end. Speed does not depend on the weights or the ids.
# llm.c is never built here: LLMC_CPU_BIN names a train_gpt2 built elsewhere; without it the
# llm.c row is skipped and says so. The exit status is 1 when any run failed.
# usage: [LLMC_CPU_BIN=.../train_gpt2] [FGPIPE=...] [FGPIPE_BASELINE=...] bench/bench_cpu_llmc.sh [ROUNDS]
#   ROUNDS (default 2); STEPS timed steps a run (default 3, at most 40); THREADS (default 2);
#   PRECISIONS of FGPIPE (default fp32; PRECISION is the old name); RUN_TIMEOUT seconds a run
#   (default 1200). OMP_WAIT_POLICY, when set, reaches every trainer and the table says so.
set -uo pipefail  # not -e: a failed run must not stop the others
cd "$(dirname "$0")/.." || exit 2
. bench/lib.sh
ROUNDS=${1:-2} STEPS=${STEPS:-3} THREADS=${THREADS:-2} PRECISIONS=${PRECISIONS:-${PRECISION:-fp32}}
WAIT=${OMP_WAIT_POLICY:-}
RUN_TIMEOUT=${RUN_TIMEOUT:-1200}
FGPIPE=${FGPIPE:-build/fgpipe} BASELINE=${FGPIPE_BASELINE:-} LLMC=${LLMC_CPU_BIN:-}
config=launch/configs/gpt2-124m.conf py=/usr/bin/python3
L=12 C=768 NH=12 T=64 B=4 V=50257 VP=50304 MAXT=1024
die() { echo "bench_cpu_llmc: $*" >&2; exit 2; }
[ -x "$FGPIPE" ] || die "no fgpipe at $FGPIPE (build first, or FGPIPE=path)"
[ -z "$BASELINE" ] || [ -x "$BASELINE" ] || die "FGPIPE_BASELINE=$BASELINE is not an executable"
[ -z "$LLMC" ] || [ -x "$LLMC" ] || die "LLMC_CPU_BIN=$LLMC is not an executable"
[ "$ROUNDS" -ge 1 ] && [ "$STEPS" -ge 2 ] && [ "$STEPS" -le 40 ] ||
  die "ROUNDS >= 1 and 2 <= STEPS <= 40 (llm.c runs 41 steps and its step 0 is left out)"
"$py" -c 'import numpy' 2>/dev/null || die "$py needs numpy (Debian: python3-numpy)"
command -v stdbuf >/dev/null || die "needs stdbuf (coreutils): llm.c's output, line by line"
FGPIPE=$(readlink -f "$FGPIPE")
[ -n "$BASELINE" ] && BASELINE=$(readlink -f "$BASELINE")
[ -n "$LLMC" ] && LLMC=$(readlink -f "$LLMC")
# In memory when /dev/shm has room (the checkpoint is 0.5 GB; a shared virtual disk writes it
# slowly); TMPDIR otherwise.
shm=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')
if [ -z "${TMPDIR:-}" ] && [ "${shm:-0}" -gt $((3 * 1024 * 1024)) ]; then dir=$(mktemp -d -p /dev/shm)
else dir=$(mktemp -d); fi
llmc_pid=
trap 'exit 130' INT TERM
trap '[ -n "$llmc_pid" ] && kill "$llmc_pid" 2>/dev/null; rm -rf "$dir"' EXIT
start=$SECONDS load0=$(cut -d' ' -f1-3 /proc/loadavg)

# Random token ids below V (one stream: llm.c's files and fgpipe's, bare little-endian uint16)
# and, when llm.c runs, its random-weight checkpoint, written in chunks.
mkdir -p "$dir/llmc/dev/data/tinyshakespeare"
"$py" - "$dir" "$V" "$T" "$( [ -n "$LLMC" ] && echo 1 || echo 0 )" "$MAXT" "$VP" "$L" "$NH" "$C" <<'PY' ||
import struct, sys
import numpy as np
out, V, T, ckpt, maxT, Vp, L, NH, C = sys.argv[1], *map(int, sys.argv[2:])
rng = np.random.default_rng(1)
n = 1 << 16  # 256 batches of 4 x 64: llm.c's train loader shuffles them, fgpipe reads in order
ids = rng.integers(0, V, n, dtype=np.uint16).astype("<u2").tobytes()
head = struct.pack("<3i", 20240520, 1, n) + bytes(1024 - 12)
for split in ("train", "val"):
    with open(f"{out}/llmc/dev/data/tinyshakespeare/tiny_shakespeare_{split}.bin", "wb") as f:
        f.write(head + ids)
with open(f"{out}/fg-train.bin", "wb") as f: f.write(ids)
with open(f"{out}/fg-val.bin", "wb") as f: f.write(ids[: 2 * (16 * T + 1)])
if ckpt:
    # train_gpt2.c: fill_in_parameter_sizes' order; "w" N(0, 0.02), "1" ones, "0" zeros
    sizes = [(Vp * C, "w"), (maxT * C, "w"), (L * C, "1"), (L * C, "0"), (L * 3 * C * C, "w"),
             (L * 3 * C, "0"), (L * C * C, "w"), (L * C, "0"), (L * C, "1"), (L * C, "0"),
             (L * 4 * C * C, "w"), (L * 4 * C, "0"), (L * C * 4 * C, "w"), (L * C, "0"),
             (C, "1"), (C, "0")]
    head = np.zeros(256, "<i4")
    head[:8] = [20240326, 3, maxT, V, L, NH, C, Vp]
    chunk = 1 << 22
    with open(f"{out}/llmc/gpt2_124M.bin", "wb") as f:
        f.write(head.tobytes())
        for n, kind in sizes:
            for i in range(0, n, chunk):
                m = min(chunk, n - i)
                if kind == "w": a = rng.standard_normal(m, dtype=np.float32) * np.float32(0.02)
                else: a = np.full(m, 1.0 if kind == "1" else 0.0, np.float32)
                f.write(a.astype("<f4", copy=False).tobytes())
PY
  die "could not write the checkpoint and token files in $dir"
setup_s=$((SECONDS - start))

# median_after FILE KIND SKIP_TO: the median step seconds of a run's log (llm.c) or loss.csv
# (fgpipe); exits non-zero when fewer than 2 steps were read.
median_after() {
  "$py" - "$@" <<'PY'
import csv, re, statistics, sys
path, kind, last = sys.argv[1], sys.argv[2], int(sys.argv[3])
if kind == "llmc":  # train_gpt2.c: printf("step %d: train loss %f (took %f ms)\n", ...)
    pat = re.compile(r"^step (\d+): train loss \S+ \(took ([0-9.]+) ms\)")
    s = [float(m.group(2)) / 1e3 for m in map(pat.match, open(path, errors="replace"))
         if m and 1 <= int(m.group(1)) <= last]
else:  # loss.csv: step,loss,lr,seconds,...; its first row left out
    rows = list(csv.DictReader(open(path)))
    s = [float(r["seconds"]) for r in rows[1:]]
if len(s) < 2: sys.exit(f"{len(s)} timed steps in {path}")
print(f"{statistics.median(s):.6f} {len(s)}")
PY
}

declare -A TPS=() LABEL=() PREC=() FAILS=()
why_failed() { grep -m1 -i -E 'error|fail|bad |timed out|killed|assert' "$1" || tail -n 1 "$1"; }

llmc_run() {  # llmc_run ROUND
  local log=$dir/llmc-r$1.log pid t0=$SECONDS got
  # one process (env execs stdbuf, which execs llm.c), so that $! is llm.c and kill stops it
  env -C "$dir/llmc" OMP_NUM_THREADS="$THREADS" ${WAIT:+OMP_WAIT_POLICY=$WAIT} stdbuf -oL "$LLMC" >"$log" 2>&1 &
  pid=$! llmc_pid=$!
  while kill -0 "$pid" 2>/dev/null; do  # stop it once step STEPS is printed
    grep -q "^step $STEPS: " "$log" && { kill "$pid"; break; }
    [ $((SECONDS - t0)) -lt "$RUN_TIMEOUT" ] || { kill "$pid"; echo "timed out after ${RUN_TIMEOUT}s" >>"$log"; break; }
    sleep 0.3
  done
  wait "$pid" 2>/dev/null
  llmc_pid=
  if got=$(median_after "$log" llmc "$STEPS" 2>&1); then
    TPS[llmc]+="$(awk -v s="${got% *}" -v n=$((B * T)) 'BEGIN { printf "%.1f", n / s }') "
  else
    TPS[llmc]+="- "; FAILS[llmc]+="round $1: $(why_failed "$log"); "
  fi
  echo "  round $1 llm.c: $(echo "${TPS[llmc]}" | awk '{ print $NF }') tokens/s ($((SECONDS - t0)) s)" >&2
}

fg_run() {  # fg_run TAG BINARY ROUND PRECISION
  local tag=$1 bin=$2 r=$dir/$1-r$3 t0=$SECONDS got label
  PREC[$tag]=$4
  mpi_flags 1
  MPI_FLAGS=(-np 1 --bind-to none -x OMP_NUM_THREADS="$THREADS")
  [ -n "$WAIT" ] && MPI_FLAGS+=(-x OMP_WAIT_POLICY="$WAIT")
  timeout -k 15 "$RUN_TIMEOUT" mpirun "${MPI_FLAGS[@]}" "$bin" train --config "$config" \
    --set train_tokens="$dir/fg-train.bin" --set val_tokens="$dir/fg-val.bin" \
    --set ctx=$T --set micro_batch=$B --set micro_batches=1 --set mode=bp --set schedule=gpipe \
    --set precision="$4" --set steps=$((STEPS + 1)) --set warmup_steps=0 \
    --set eval_every=0 --set print_every=1000000 --no-checkpoint \
    --out "$r" --summary-json "$r.json" >"$r.log" 2>&1
  local rc=$?
  [ "$rc" -eq 124 ] && echo "timed out after ${RUN_TIMEOUT}s" >>"$r.log"
  if [ "$rc" -eq 0 ] && { got=$(median_after "$r/loss.csv" fgpipe 0 2>/dev/null) ||
       got="$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["step_seconds"], 0)' "$r.json" 2>/dev/null)"; }; then
    TPS[$tag]+="$(awk -v s="${got% *}" -v n=$((B * T)) 'BEGIN { printf "%.1f", n / s }') "
  else
    TPS[$tag]+="- "; FAILS[$tag]+="round $3: rc $rc: $(why_failed "$r.log"); "
  fi
  if [ -z "${LABEL[$tag]:-}" ]; then  # what the binary says its GEMMs are, else what it links
    # summary.json: a string key naming the GEMMs (if the binary reports one) and its precision
    label=$("$py" - "$r.json" 2>/dev/null <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(next((v for k, v in s.items() if "gemm" in k.lower() and isinstance(v, str)), ""))
print(s.get("precision", "") if isinstance(s.get("precision"), str) else "")
PY
    )
    label=$(echo "$label" | sed -n 1p)
    [ -n "$label" ] || label=$(grep -i 'gemm' "$r.log" | grep -o -m1 -E 'oneDNN|OpenBLAS')
    # a build directory's binary: its CMakeCache says which library fg_sgemm calls (both builds
    # link both libraries since bf16 needs oneDNN's matmul in either)
    if [ -z "$label" ] && [ -f "$(dirname "$bin")/CMakeCache.txt" ]; then
      case $(sed -n 's/^FGPIPE_CPU_GEMM:[A-Z]*=//p' "$(dirname "$bin")/CMakeCache.txt") in
        onednn) label="oneDNN sgemm" ;;
        openblas) label="OpenBLAS sgemm" ;;
      esac
      [ "$4" = bf16 ] && label="oneDNN bf16 matmul"
    fi
    if [ -z "$label" ]; then
      local libs; libs=$(ldd "$bin" 2>/dev/null)  # (not ldd | grep -q: pipefail)
      case $libs in
        *libdnnl*) label="oneDNN (ldd)" ;;
        *libopenblas*) label="OpenBLAS (ldd)" ;;
        *) label="?" ;;
      esac
    fi
    LABEL[$tag]=$label
  fi
  echo "  round $3 $tag: $(echo "${TPS[$tag]}" | awk '{ print $NF }') tokens/s ($((SECONDS - t0)) s)" >&2
}

trainers=()
for p in $PRECISIONS; do trainers+=("fgpipe-$p"); done
[ -n "$BASELINE" ] && trainers+=(baseline)
[ -n "$LLMC" ] && trainers+=(llmc)
echo "bench_cpu_llmc: $ROUNDS rounds of ${trainers[*]}, $STEPS timed steps a run (set-up ${setup_s}s, in $dir)" >&2
for ((round = 1; round <= ROUNDS; round++)); do
  n=${#trainers[@]}
  for ((i = 0; i < n; i++)); do
    case ${trainers[$(((i + round - 1) % n))]} in
      fgpipe-*) t=${trainers[$(((i + round - 1) % n))]}; fg_run "$t" "$FGPIPE" "$round" "${t#fgpipe-}" ;;
      baseline) fg_run baseline "$BASELINE" "$round" fp32 ;;
      llmc) llmc_run "$round" ;;
    esac
  done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

# best TAG / median TAG: over the rounds that ran ("" when none did)
best() { echo "${TPS[$1]:-}" | tr ' ' '\n' | grep -E '^[0-9]' | sort -g | tail -n 1; }
med() { echo "${TPS[$1]:-}" | tr ' ' '\n' | grep -E '^[0-9]' | sort -g |
        awk '{ a[NR] = $1 } END { if (NR) print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }
ratio() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }' || echo "-"; }

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -x -E 'avx2|avx512f|avx512_bf16|amx_bf16' | tr '\n' ' ')
echo "machine: $cpu, $(nproc) cores ($(grep -c '^processor' /proc/cpuinfo) in /proc/cpuinfo), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo); flags: ${flags% }"
echo "load average (1, 5, 15 min): start $load0, end $load1; $(date -u '+%Y-%m-%d %H:%M UTC'); wall ${SECONDS}s (set-up ${setup_s}s)"
echo "GPT-2 124M: L $L, C $C, NH $NH, vocab $V padded to $VP, ctx $T, $B sequences a step (bp), 1 rank, OMP_NUM_THREADS=$THREADS${WAIT:+, OMP_WAIT_POLICY=$WAIT}"
echo "$ROUNDS rounds, each trainer once a round (order rotated); a run's tokens/s: $((B * T)) over its median step of $STEPS (its first step left out)"
echo
printf '| %-8s | %-18s | %-9s | %13s | %14s | %15s | %s |\n' trainer GEMMs precision "tokens/s best" "ratio to llm.c" "tokens/s median" "each round"
printf '|%s|%s|%s|%s|%s|%s|%s|\n' ---------- -------------------- ----------- --------------- ---------------- ----------------- ------------
lb=$(best llmc)
for tag in "${trainers[@]}"; do
  case $tag in
    llmc) name=llm.c gemm="own loops (OpenMP)" prec=fp32 ;;
    fgpipe-*) name=fgpipe gemm=${LABEL[$tag]:-?} prec=${PREC[$tag]:-${tag#fgpipe-}} ;;
    baseline) name=fgpipe gemm=${LABEL[baseline]:-?} prec=fp32 ;;
  esac
  b=$(best "$tag")
  printf '| %-8s | %-18s | %-9s | %13s | %14s | %15s | %s |\n' "$name" "$gemm" "$prec" "${b:-FAILED}" \
    "$(ratio "$b" "$lb")" "$(med "$tag")" "$(echo ${TPS[$tag]:-})"
done
[ -z "$LLMC" ] && {
  printf '| %-8s | %-18s | %-9s | %13s | %14s | %15s | %s |\n' llm.c - fp32 - - - "llm.c anchor: skipped (LLMC_CPU_BIN not set)"
  echo "llm.c anchor: skipped (LLMC_CPU_BIN not set)" >&2; }
echo
# every trainer against llm.c, and each of fgpipe's precisions against its fp32 and the baseline
desc() { case $1 in baseline) echo "fgpipe $(gemm_of baseline) fp32" ;; *) echo "fgpipe $(gemm_of "$1") ${1#fgpipe-}" ;; esac; }
gemm_of() { echo "${LABEL[$1]:-?}"; }
pair() {  # pair A B: A / B, best of rounds and median of rounds
  echo "$(desc "$1") / $2: $(ratio "$(best "$1")" "$(best "$3")") best of rounds, $(ratio "$(med "$1")" "$(med "$3")") median of rounds"
}
for tag in "${trainers[@]}"; do
  [ "$tag" = llmc ] && continue
  [ -n "$LLMC" ] && pair "$tag" "llm.c" llmc
  case $tag in fgpipe-fp32) ;; fgpipe-*)
    [[ " ${trainers[*]} " == *" fgpipe-fp32 "* ]] && pair "$tag" "$(desc fgpipe-fp32)" fgpipe-fp32 ;; esac
  [ -n "$BASELINE" ] && [ "$tag" != baseline ] && pair "$tag" "$(desc baseline)" baseline
done
[ -z "$LLMC" ] && echo "llm.c anchor: skipped (LLMC_CPU_BIN not set)"
echo "binaries: fgpipe $FGPIPE${BASELINE:+, baseline $BASELINE}${LLMC:+, llm.c $LLMC}"
failed=0
for tag in "${trainers[@]}"; do
  [ -n "${FAILS[$tag]:-}" ] && { echo "FAILED runs of $tag: ${FAILS[$tag]}"; failed=1; }
done
[ "$failed" -eq 0 ] || echo "bench_cpu_llmc: some runs FAILED (see above)" >&2
exit "$failed"
