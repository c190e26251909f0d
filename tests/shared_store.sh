#!/usr/bin/env bash
# One node, one copy (DESIGN section 6, docs/out-of-core.md "Replicas"): R data-parallel
# replicas of a streamed stage on one node share ONE weights store (and step store) per stage.
# The node's I/O rank reads each layer once per wave into slots every replica maps, applies the
# update once and writes it back once. Checks, for bp (1F1B, ZB), fg and fg+bp on the MLP and
# the GPT, with R = 2 and 3 on one stage and 2 stages x 2 replicas:
#  - the losses and --save-params bytes equal R replicas in memory;
#  - the weights dir holds one store per stage (no per-replica stores);
#  - the bytes read and written per step (the I/O rank's "out of core" line) equal one replica's
#    (R = 1) exactly: they do not grow with R;
#  - SIGKILL of a replica mid-run leaves the one store at a whole version and --resume-weights
#    ends with the uninterrupted run's weights;
#  - replicas of one node started with another config for the store are refused by name.
# usage: shared_store.sh FGPIPE CONFIG   (CONFIG: the MLP's; the GPT's is found beside it)
. "$(dirname "$0")/lib.sh" "$@"
mlp=$config gpt=$(dirname "$config")/gpt-kjv.conf
docs_corpus
# mem_runtime=0: the budgets here are the stage's own bytes (exact floors and slot counts), not
# the process's, whose measured runtime varies between processes (docs/out-of-core.md)
mlp_base=(--set model=784-512-512-512-512-512-512-512-512-10 --set warmup_steps=0 --set steps=6
          --set print_every=1 --set mem_runtime=0)
gpt_base=(--set text_file="$dir/corpus.txt" --set n_layer=2 --set n_embd=64 --set n_head=2
          --set ctx=16 --set micro_batch=1 --set micro_batches=2 --set steps=6 --set warmup_steps=0
          --set eval_every=0 --set print_every=1 --set mem_runtime=0)

run() {  # run CONF OUT M R BUDGET SETS... [-- ARGS]: M stages x R replicas (BUDGET -: in memory)
  local conf=$1 out=$2 M=$3 R=$4 budget=$5; shift 5
  local sets=() extra=() base=("${mlp_base[@]}")
  [ "$conf" = "$gpt" ] && base=("${gpt_base[@]}")
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do sets+=(--set "$1"); shift; done
  [ "${1:-}" = "--" ] && { shift; extra=("$@"); }
  [ "$budget" != - ] && extra+=(--mem-budget "$budget" --weights-dir "$out.w") && mkdir -p "$out.w"
  timeout 300 mpirun -np $((M * R)) --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train \
    --config "$conf" "${base[@]}" --set stages="$M" --set replicas="$R" "${sets[@]}" --out "$out" \
    --save-params "$out.bin" "${extra[@]}" >"$out.log" 2>&1
}

same() {  # same A B: the problem, if runs A and B differ in step,loss,lr or weights
  cmp -s <(cut -d, -f1-3 "$1/loss.csv") <(cut -d, -f1-3 "$2/loss.csv") || { echo "losses differ"; return; }
  cmp -s "$1.bin" "$2.bin" || echo "weights differ ($(cmp -l "$1.bin" "$2.bin" | wc -l) bytes)"
}

io_per_step() {  # io_per_step LOG: "read,written" GB per step summed over the stages' I/O ranks
  grep -o "a step read [0-9.]* GB and wrote [0-9.]* GB" "$1" |
    awk '{ r += $4; w += $8 } END { printf "%.6f,%.6f", r, w }'
}

# The stores in a weights dir: one weights store per stage, a step store per stage when the
# mode keeps one, none per replica.
stores() { (cd "$1" && ls ./*.h5 2>/dev/null | sed 's|^\./||' | tr '\n' ' '); }

check() {  # check LABEL CONF M R BUDGET SETS...: shared out of core against in memory, same R
  local label=$1 conf=$2 M=$3 R=$4 budget=$5; shift 5
  local out="$dir/$label-M$M-R$R" why=""
  run "$conf" "$out-mem" "$M" "$R" - "$@"; local rc_mem=$?
  run "$conf" "$out-ooc" "$M" "$R" "$budget" "$@"; local rc_ooc=$?
  local files; files=$(stores "$out-ooc.w")
  local n_weights; n_weights=$(ls "$out-ooc.w"/stage-*.h5 2>/dev/null | wc -l)
  if [ "$rc_mem" -ne 0 ] || [ "$rc_ooc" -ne 0 ]; then
    why="exit $rc_mem / $rc_ooc: $(grep -h -m1 error "$out-mem.log" "$out-ooc.log" | head -n 1)"
  elif [ "$(grep -c "streams its layers" "$out-ooc.log")" -ne $((M * R)) ]; then
    why="not every rank streamed"
  elif [ "$(grep -c "shared by the stage's $R replicas on node 0" "$out-ooc.log")" -ne $((M * R)) ]; then
    why="not every rank shares its node's store"
  elif [ "$n_weights" -ne "$M" ] || [[ $files == *replica* ]]; then why="stores: $files"
  else why=$(same "$out-mem" "$out-ooc"); fi
  verdict "$label, $M stage(s) x $R replicas: one store per stage ($files), equals in memory bitwise" "$why"
}

io_check() {  # io_check LABEL CONF M BUDGET SETS...: I/O per step of R = 2, 3 equals R = 1's
  local label=$1 conf=$2 M=$3 budget=$4; shift 4
  local out="$dir/$label-M$M-R1-ooc"
  run "$conf" "$out" "$M" 1 "$budget" "$@"
  local one; one=$(io_per_step "$out.log") why=""
  local all="R=1 $one"
  for R in 2 3; do
    local f="$dir/$label-M$M-R$R-ooc.log"
    [ -f "$f" ] || continue
    local r; r=$(io_per_step "$f")
    all="$all, R=$R $r"
    [ "$r" = "$one" ] || why="differs: $all"
  done
  [ "$one" = "0.000000,0.000000" ] && why="no I/O line: $(grep -m1 error "$out.log")"
  echo "# $label M=$M: GB read,written per step on the node: $all"
  verdict "$label, M=$M: bytes read and written per step do not grow with R ($all)" "$why"
}

# 1. The MLP: every mode, R = 2 and 3 on one stage, 2 stages x 2 replicas (budgets as in
# out_of_core.sh: two slots).
cases=("bp|20M|18M|mode=bp schedule=1f1b"
       "bp-zb|22M|18M|mode=bp schedule=zb"
       "fg|14M|12.5M|mode=fg optimizer=sgd lr=0.0001"
       "fgbp|24M|22M|mode=fg+bp estimator=cv lag=0 select=2 optimizer=sgd lr=0.0001")
for c in "${cases[@]}"; do
  IFS='|' read -r name budget1 budget2 sets <<<"$c"
  read -r -a sets <<<"$sets"
  for R in 2 3; do check "mlp-$name" "$mlp" 1 "$R" "$budget1" "${sets[@]}"; done
  io_check "mlp-$name" "$mlp" 1 "$budget1" "${sets[@]}"
  check "mlp-$name" "$mlp" 2 2 "$budget2" "${sets[@]}"
done

# 2. The GPT (byte-level, tied embedding): two slots at the budget the refusal of a 1-byte
# budget names.
gpt_budget() {  # gpt_budget M SETS...
  local M=$1; shift
  run "$gpt" "$dir/probe" "$M" 1 1 "$@"
  grep -o "at least [0-9]* bytes" "$dir/probe.log" | grep -o "[0-9]*" | sort -n | tail -n 1
}
gcases=("bp|mode=bp schedule=1f1b"
        "bp-zb|mode=bp schedule=zb"
        "fg|mode=fg optimizer=sgd lr=0.0001"
        "fgbp|mode=fg+bp estimator=cv select=1 lag=1 optimizer=sgd lr=0.0001")
for c in "${gcases[@]}"; do
  name=${c%%|*}
  read -r -a sets <<<"${c#*|}"
  b1=$(gpt_budget 1 "${sets[@]}")
  for R in 2 3; do check "gpt-$name" "$gpt" 1 "$R" "${b1:-1}" "${sets[@]}"; done
  io_check "gpt-$name" "$gpt" 1 "${b1:-1}" "${sets[@]}"
  b2=$(gpt_budget 2 "${sets[@]}")
  check "gpt-$name" "$gpt" 2 2 "${b2:-1}" "${sets[@]}"
done

# 3. Replica 0 alone (pipeline_solo: the others wait) evaluates mid-run and writes the final
# checkpoint; a checkpoint loaded into shared stores (the others read theirs into scratch).
esets=(mode=fg optimizer=sgd lr=0.0001 eval_every=2 steps=4)
run "$mlp" "$dir/eval-mem" 1 2 - "${esets[@]}"
run "$mlp" "$dir/eval-ooc" 1 2 14M "${esets[@]}"; rc=$?
evals() { grep -o "eval step [0-9]*: .*" "$1.log"; }
verdict "evaluation every 2 steps, 1 stage x 2 replicas sharing a store: the in-memory run's evaluations, losses and weights" \
  "$([ $rc -eq 0 ] || echo "exit $rc: $(grep -m1 error "$dir/eval-ooc.log")")$([ -n "$(evals "$dir/eval-ooc")" ] && [ "$(evals "$dir/eval-ooc")" = "$(evals "$dir/eval-mem")" ] || echo " evaluations differ")$(same "$dir/eval-mem" "$dir/eval-ooc")"
rsets=(mode=fg optimizer=sgd lr=0.0001 steps=8)
run "$mlp" "$dir/resumed-ooc" 1 2 14M "${rsets[@]}" -- --resume "$dir/eval-ooc"; rc=$?
run "$mlp" "$dir/resumed-mem" 1 2 - "${rsets[@]}" -- --resume "$dir/eval-ooc"
verdict "a checkpoint (step 4) resumed into a shared store, 1 stage x 2 replicas: the in-memory resume's losses and weights" \
  "$([ $rc -eq 0 ] || echo "exit $rc: $(grep -m1 error "$dir/resumed-ooc.log")")$(same "$dir/resumed-mem" "$dir/resumed-ooc")"

# 4. SIGKILL of one rank mid-run (each time another: the I/O rank, a reader, the other stage's
# I/O rank), --resume-weights, and the end equals the uninterrupted run's weights.
kill_rank() {  # kill_rank OUT N RANK: SIGKILLs world rank RANK of the run writing OUT after N more steps
  local pid
  wait_steps "$1" "$2"
  for pid in $(pgrep -f "^$fgpipe train .*--out $1( |$)"); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$3" &&
      kill -KILL "$pid" 2>/dev/null
  done
}
ksets=(mode=fg optimizer=sgd lr=0.0001 steps=30)
out="$dir/killed"
resumed=() intact=""
for round in 1 2 3 4; do
  extra=(); [ "$round" -gt 1 ] && extra=(--resume-weights)
  rm -f "$out.log"  # here, not in the background run: kill_rank must not read the last round's log
  run "$mlp" "$out" 2 2 12.5M "${ksets[@]}" -- "${extra[@]}" &
  pid=$!
  [ "$round" -lt 4 ] && kill_rank "$out" 5 $((round == 1 ? 0 : round == 2 ? 2 : 1))
  wait "$pid"; rc=$?
  [ "$round" -gt 1 ] && resumed+=("$(grep -o "resumed from the layer stores .* at step [0-9]*" "$out.log" |
                                     grep -o "[0-9]*$" || echo none)")
  n=$(ls "$out.w"/stage-*.h5 2>/dev/null | wc -l)
  [ "$n" -eq 2 ] || intact="$intact round $round: $n weights stores;"
done
run "$mlp" "$dir/straight" 2 2 12.5M "${ksets[@]}"
verdict "SIGKILL of a rank (rounds 1-3), --resume-weights (at steps ${resumed[*]}): exit 0, one store per stage, the uninterrupted run's weights" \
  "$([ "$rc" -eq 0 ] || echo "exit $rc: $(grep error "$out.log" | head -n 1)")$intact$(cmp -s "$out.bin" "$dir/straight.bin" || echo " weights differ")$(for s in "${resumed[@]}"; do [ "$s" != none ] && [ "$s" -lt 30 ] || echo " a run was not resumed mid-run"; done | sort -u)"

# 5. Replicas of one node that disagree about the store: refused, naming the store and what
# differs (an MPMD launch: the second replica with another seed; with --resume-weights alone).
refuse() {  # refuse LABEL PATTERN ARGS_OF_REPLICA_1...
  local label=$1 pattern=$2; shift 2
  local w="$dir/refuse.w"; rm -rf "$w"; mkdir -p "$w"
  local common=(--config "$mlp" "${mlp_base[@]}" --set stages=1 --set replicas=2 --set mode=fg
                --set optimizer=sgd --set lr=0.0001 --mem-budget 14M --weights-dir "$w" --out "$dir/refuse")
  timeout 120 mpirun --oversubscribe --bind-to none -np 1 "$fgpipe" train "${common[@]}" : \
    -np 1 "$fgpipe" train "${common[@]}" "$@" >"$dir/refuse.log" 2>&1
  local rc=$?
  verdict "$label" "$([ "$rc" -ne 0 ] && grep -q "$pattern" "$dir/refuse.log" || echo "exit $rc: $(grep -m1 error "$dir/refuse.log")")"
}
# Whichever rank's error comes out first names the store and what differs.
refuse "a replica with another seed on the node: refused by name" \
  "share the layer store $dir/refuse.w/stage-0-17-node-0.h5, but .* seed" --set seed=7
refuse "a replica with --resume-weights beside one without: refused by name" \
  "share the layer store $dir/refuse.w/stage-0-17-node-0.h5, but .* --resume-weights" --resume-weights
finish
