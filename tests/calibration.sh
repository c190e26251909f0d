#!/usr/bin/env bash
# fg+bp on several stages plans its timetable with F times from calibration steps (F ops alone,
# every stage at once, before training). They must leave no trace on training: with an explicit
# select (its ops do not depend on the times) a calibrated run equals an uncalibrated one bit for
# bit, losses and weights. The auto timetable planned with them must backpropagate and train;
# the output names the F times used (and why they are not calibrated); replicas average them;
# a resumed run calibrates again; ranks that share cores do not calibrate.
# usage: calibration.sh FGPIPE CONFIG
. "$(dirname "$0")/lib.sh" "$@"
small_mnist 4096 1000  # a slice of the data: loading all of it was most of a run's start-up
run() {  # run NAME RANKS SETTINGS... [-- FLAGS...]: a 2-stage fg+bp run of 40 steps
  local name=$1 ranks=$2; shift 2
  local sets=(); while [ $# -gt 0 ] && [ "$1" != -- ]; do sets+=(--set "$1"); shift; done
  [ $# -gt 0 ] && shift
  mpirun -np "$ranks" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train \
    --config "$config" --set data_dir="$dir/mnist" --set model=784-64-32-16-10 --set stages=2 \
    --set mode=fg+bp --set perturb=activity --set shrink=0.5 --set warmup_steps=0 --set steps=40 \
    --set print_every=1000000 "${sets[@]}" --out "$dir/$name" "$@" >"$dir/$name.log" 2>&1
}
ok() { [ "$1" -eq 0 ] || tail -n 3 "$dir/$2.log"; }  # ok STATUS NAME: empty when it succeeded

run exact-cal 2 select=2 lag=1 calibrate_steps=3 -- --save-params "$dir/exact-cal.bin"
verdict "an explicit timetable, calibrated, succeeds" "$(ok $? exact-cal)"
run exact-plain 2 select=2 lag=1 calibrate_steps=0 -- --save-params "$dir/exact-plain.bin"
verdict "and uncalibrated" "$(ok $? exact-plain)"
verdict "the calibration leaves no trace: the same losses (loss.csv's step, loss, lr) and weights, bit for bit" \
  "$(cmp <(cut -d, -f1-3 "$dir/exact-cal/loss.csv") <(cut -d, -f1-3 "$dir/exact-plain/loss.csv") 2>&1 | head -n 1)$(
     cmp "$dir/exact-cal.bin" "$dir/exact-plain.bin" 2>&1)"

run auto 2 calibrate_steps=3
verdict "the auto timetable, calibrated, succeeds" "$(ok $? auto)"
line=$(grep "F ms per stage timed over 3 calibration steps:" "$dir/auto.log")
verdict "the calibrated F time of each stage is printed" \
  "$(echo "$line" | awk 'NF < 2 || !($(NF - 1) > 0 && $NF > 0) { print "got: [" $0 "]" }')"
verdict "an uncalibrated run says why" \
  "$(grep -q "from the start-up costs (no calibration: calibrate_steps = 0)" "$dir/exact-plain.log" ||
     echo "got: [$(grep "F ms per stage" "$dir/exact-plain.log")]")"
corr=$(grep "corrections per step by stage" "$dir/auto.log")
# Some stage corrects: more than 0 micro-batches a step (0.5 when a slow or loaded machine's
# timing gives it one every other step).
verdict "the calibrated auto timetable backpropagates" \
  "$(echo "$corr" | grep -Eq ':.* ([1-9][0-9.]*|0\.[0-9]*[1-9][0-9]*) \(lag' || echo "got: [$corr]")"
verdict "and trains: the last 10 steps' loss is below the first step's by a tenth" \
  "$(py_check "$dir/auto/loss.csv" <<'PY'
import sys
rows = [l.split(",") for l in open(sys.argv[1]).read().split("\n")[1:] if l]
loss = [float(r[1]) for r in rows]
if len(loss) != 40 or not sum(loss[-10:]) / 10 < 0.9 * loss[0]: print(f"{len(loss)} rows: {loss[:2]} ... {loss[-2:]}")
PY
)"

# 4 ranks: calibrated with a core each, not where they share cores.
run replicas 4 calibrate_steps=2 replicas=2
rc=$? cores=$(getconf _NPROCESSORS_ONLN) expect="timed over 2 calibration steps"
[ "$cores" -lt 4 ] && expect="no calibration: ranks share cores"
verdict "with 2 replicas on $cores cores: $expect" \
  "$(ok $rc replicas)$(grep -q "$expect" "$dir/replicas.log" || echo "got: [$(grep "F ms" "$dir/replicas.log")]")"
cp -r "$dir/auto" "$dir/resumed"
run resumed 2 calibrate_steps=2 steps=60 -- --resume "$dir/resumed"
verdict "a resumed run calibrates and goes on to step 60" \
  "$(ok $? resumed)$(grep -q "timed over 2 calibration steps" "$dir/resumed.log" || echo "no calibration line")$(
     [ "$(tail -n 1 "$dir/resumed/loss.csv" | cut -d, -f1)" = 59 ] || echo "last row: $(tail -n 1 "$dir/resumed/loss.csv")")"
finish
