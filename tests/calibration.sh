#!/usr/bin/env bash
# fg+bp's auto timetable is planned with F times from calibration steps (F ops alone, every
# stage at once, before training): they must leave no trace on training (step 0's loss, from
# the initial weights, equals an uncalibrated run's bit for bit), hand every stage its F time
# (printed), and be followed by a timetable that backpropagates and trains (the loss falls).
# Also with replicas (the F times are averaged over them) and on a resumed run; not where ranks
# share cores.
# usage: calibration.sh FGPIPE CONFIG
. "$(dirname "$0")/lib.sh" "$@"
run() {  # run NAME RANKS SETTINGS... [-- FLAGS...]: a 2-stage fg+bp run, auto timetable
  local name=$1 ranks=$2; shift 2
  local sets=(); while [ $# -gt 0 ] && [ "$1" != -- ]; do sets+=(--set "$1"); shift; done
  [ $# -gt 0 ] && shift
  mpirun -np "$ranks" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train \
    --config "$config" --set model=784-64-32-16-10 --set stages=2 --set mode=fg+bp --set select=-1 \
    --set perturb=activity --set shrink=0 --set steps=40 --set print_every=1000000 "${sets[@]}" \
    --out "$dir/$name" "$@" >"$dir/$name.log" 2>&1
}
first_loss() { sed -n 2p "$1/loss.csv" | cut -d, -f2; }

run cal 2 calibrate_steps=3
verdict "a calibrated 2-stage run succeeds" "$([ $? -eq 0 ] || tail -n 3 "$dir/cal.log")"
run plain 2 calibrate_steps=0
verdict "an uncalibrated one succeeds" "$([ $? -eq 0 ] || tail -n 3 "$dir/plain.log")"
line=$(grep "timed over 3 calibration steps:" "$dir/cal.log")
verdict "the calibration's F time of each stage is printed" \
  "$(echo "$line" | awk '{ n = 0; for (i = NF - 1; i <= NF; i++) if ($i + 0 > 0) n++; if (n != 2) print "got: " $0 }')"
verdict "without calibration, the output says why" \
  "$(grep -q "timed at start-up, each stage alone (no calibration: calibrate_steps = 0)" "$dir/plain.log" ||
     grep "F ms per stage" "$dir/plain.log")"
verdict "step 0's loss is the uncalibrated run's" \
  "$([ "$(first_loss "$dir/cal")" = "$(first_loss "$dir/plain")" ] || echo "$(first_loss "$dir/cal") vs $(first_loss "$dir/plain")")"
corr=$(grep "corrections per step by stage" "$dir/cal.log")
verdict "the calibrated timetable backpropagates" \
  "$(echo "$corr" | grep -Eq ':.* [1-9][0-9.]* \(lag' || echo "got: $corr")"
verdict "and trains: the loss falls" "$(/usr/bin/python3 - "$dir/cal/loss.csv" <<'PY'
import sys
rows = [l.split(",") for l in open(sys.argv[1]).read().split("\n")[1:] if l]
loss = [float(r[1]) for r in rows]
if not (len(loss) == 40 and sum(loss[-10:]) < 0.9 * sum(loss[:10])): print(f"{loss[:3]} ... {loss[-3:]}")
PY
)"

# 4 ranks: calibrated with a core each, not where they share cores (the F times taken at once
# would measure how the OS shares them).
run replicas 4 calibrate_steps=2 replicas=2
rc=$? cores=$(getconf _NPROCESSORS_ONLN) expect="timed over 2 calibration steps"
[ "$cores" -lt 4 ] && expect="no calibration: ranks share cores"
verdict "with 2 replicas on $cores cores: $expect" \
  "$([ $rc -eq 0 ] && grep -q "$expect" "$dir/replicas.log" || grep "F ms" "$dir/replicas.log" || tail -n 3 "$dir/replicas.log")"
cp -r "$dir/cal" "$dir/resumed"
run resumed 2 calibrate_steps=2 steps=60 -- --resume "$dir/resumed"
verdict "a resumed run calibrates and goes on" \
  "$([ $? -eq 0 ] && grep -q "timed over 2 calibration steps" "$dir/resumed.log" &&
     [ "$(tail -n 1 "$dir/resumed/loss.csv" | cut -d, -f1)" = 59 ] || tail -n 3 "$dir/resumed.log")"
finish
