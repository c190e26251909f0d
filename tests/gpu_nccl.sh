#!/usr/bin/env bash
# NCCL between GPUs: the same 20 steps on 2 stages with one GPU each, once with
# FGPIPE_TRANSPORT=nccl (cuda/transport_nccl.cu) and once with FGPIPE_TRANSPORT=staged (through
# host memory), give byte-identical losses (loss.csv's step,loss,lr) and final parameters
# (--save-params), for bp (gpipe, 1f1b), fg and fg+bp (lag 0 and 1). With 2 GPUs also 2
# replicas of 1 stage (the gradient sum by ncclAllReduce), with 4 GPUs 2 replicas of 2 stages:
# two replicas sum a + b whichever library adds, so these are bitwise too.
# Exit 77 (ctest: skipped) with fewer than 2 GPUs, or without CUDA or NCCL in the build.
# usage: gpu_nccl.sh FGPIPE CONFIG
. "$(dirname "$0")/lib.sh" "$@"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  visible=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
  [ "$visible" -lt "$gpus" ] && gpus=$visible
fi
if [ "$gpus" -lt 2 ]; then
  echo "gpu_nccl: SKIPPED: needs 2 GPUs, found $gpus" >&2; exit 77
fi
base=(--set model=784-256-128-64-10 --set steps=20 --set warmup_steps=0 --set micro_batches=4
      --set print_every=1000000 --set optimizer=adam --set lr=0.001)

# run NAME TRANSPORT RANKS KEY=VALUE...: a GPU run into $dir/NAME/ and $dir/NAME.bin.
run() {
  local name=$1 np=$3 sets=() kv; export FGPIPE_TRANSPORT=$2; shift 3
  for kv in "$@"; do sets+=(--set "$kv"); done
  timeout 300 mpirun -np "$np" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -x FGPIPE_TRANSPORT \
    "$fgpipe" train --config "$config" "${base[@]}" --device cuda "${sets[@]}" \
    --out "$dir/$name" --save-params "$dir/$name.bin" >"$dir/$name.log" 2>&1
  local rc=$?
  if grep -q "built without \(CUDA\|NCCL\)" "$dir/$name.log"; then
    echo "gpu_nccl: SKIPPED: $(grep -m1 -o 'built without [A-Z]*' "$dir/$name.log")" >&2; exit 77
  fi
  if [ $rc -ne 0 ]; then
    echo "$name exited with $rc: $(grep -m1 error "$dir/$name.log")" >"$dir/$name.problem"
    sed 's/^/#   /' "$dir/$name.log" | tail -5 >&2
  fi
}

# same LABEL NCCL_RUN STAGED_RUN: the NCCL run used NCCL, and both ended alike.
same() {
  local why="" r
  for r in "$2" "$3"; do [ -f "$dir/$r.problem" ] && why="$why$(cat "$dir/$r.problem"); "; done
  if [ -z "$why" ]; then
    grep -q "GPU messages: NCCL on" "$dir/$2.log" || why="the nccl run reports no NCCL link; "
    cmp -s <(cut -d, -f1-3 "$dir/$2/loss.csv") <(cut -d, -f1-3 "$dir/$3/loss.csv") || why="${why}losses differ; "
    cmp -s "$dir/$2.bin" "$dir/$3.bin" ||
      why="${why}params differ ($(cmp -l "$dir/$2.bin" "$dir/$3.bin" 2>/dev/null | wc -l) bytes)"
  fi
  verdict "$1" "$why"
}

# NAME RANKS KEY=VALUE...
cases=(
  "bp-gpipe 2 stages=2 mode=bp schedule=gpipe"
  "bp-1f1b 2 stages=2 mode=bp schedule=1f1b"
  "fg 2 stages=2 mode=fg"
  "fgbp-lag0 2 stages=2 mode=fg+bp estimator=cv lag=0 select=2"
  "fgbp-lag1-K2 2 stages=2 mode=fg+bp estimator=cv lag=1 select=2 tangents=2"
  "replicas-bp 2 stages=1 replicas=2 micro_batches=2 mode=bp"
  "replicas-fgbp 2 stages=1 replicas=2 micro_batches=2 mode=fg+bp estimator=cv lag=1 select=2"
)
[ "$gpus" -ge 4 ] && cases+=(
  "grid-bp 4 stages=2 replicas=2 micro_batches=2 mode=bp"
  "grid-fgbp 4 stages=2 replicas=2 micro_batches=2 mode=fg+bp estimator=cv lag=1 select=2"
)
for c in "${cases[@]}"; do
  read -r name np sets <<<"$c"
  read -r -a sets <<<"$sets"
  run "$name-nccl" nccl "$np" "${sets[@]}"
  run "$name-staged" staged "$np" "${sets[@]}"
  same "$name ($np GPUs): NCCL equals staged, byte for byte" "$name-nccl" "$name-staged"
done
[ "$gpus" -lt 4 ] && echo "# 2 replicas x 2 stages not run: needs 4 GPUs, found $gpus"
finish
