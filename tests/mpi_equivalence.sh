#!/usr/bin/env bash
# A run on M = 1, 2, 4 pipeline stages gives byte-identical losses (loss.csv) and final weights
# (--save-params) after 20 steps, in every mode; and fg+bp backpropagating every micro-batch
# with the cv estimator (coefficients 0, estimate = the exact gradient from the bubble B ops)
# equals single-rank bp with the 1F1B order.  usage: mpi_equivalence.sh FGPIPE CONFIG
set -u
fgpipe=$1 config=$2
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
passed=0 failed=0
base=(--set model=784-64-32-16-10 --set steps=20 --set warmup_steps=0 --set print_every=1000)

run() {  # run NAME M SETS...: trains into $dir/NAME
  local name=$1 M=$2; shift 2
  local sets=(); for kv in "$@"; do sets+=(--set "$kv"); done
  mpirun -np "$M" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train \
    --config "$config" "${base[@]}" --set stages="$M" "${sets[@]}" --out "$dir/$name" \
    --save-params "$dir/$name.bin" >"$dir/$name.log" 2>&1
}

same() {  # same LABEL A B: byte-identical losses and weights
  if cmp -s "$dir/$2/loss.csv" "$dir/$3/loss.csv" && cmp -s "$dir/$2.bin" "$dir/$3.bin"; then
    echo "PASS $1"; passed=$((passed + 1))
  else
    echo "FAIL $1: $2 and $3 differ"; failed=$((failed + 1))
    tail -n 3 "$dir/$2.log" "$dir/$3.log"
  fi
}

cases=(
  "bp-gpipe|mode=bp schedule=gpipe"
  "bp-1f1b|mode=bp schedule=1f1b"
  "fg|mode=fg optimizer=sgd lr=0.0001"
  "fg-K3|mode=fg optimizer=sgd lr=0.0001 tangents=3"
  "fg+bp-cv-lag0|mode=fg+bp estimator=cv lag=0 select=2 optimizer=sgd lr=0.0001"
  "fg+bp-cv-lag1|mode=fg+bp estimator=cv lag=1 select=2 tangents=2 optimizer=sgd lr=0.0001"
  "fg+bp-guided|mode=fg+bp estimator=guided lag=1 select=2 tangents=2 optimizer=sgd lr=0.0001"
  "fg+bp-fg|mode=fg+bp estimator=fg select=1 optimizer=sgd lr=0.0001"
)
for c in "${cases[@]}"; do
  name=${c%%|*}; read -r -a sets <<<"${c#*|}"
  for M in 1 2 4; do run "$name-$M" "$M" "${sets[@]}" || echo "run $name on $M stages failed"; done
  same "$name M=2 vs M=1" "$name-1" "$name-2"
  same "$name M=4 vs M=1" "$name-1" "$name-4"
done

# The exact gradient assembled from the B ops in the bubbles is the bp gradient.
run exact-bp 1 mode=bp schedule=1f1b
run exact-fgbp 4 mode=fg+bp estimator=cv lag=0 select=4
same "fg+bp select=N (M=4) vs bp-1f1b (M=1)" exact-bp exact-fgbp

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
