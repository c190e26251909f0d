#!/usr/bin/env bash
# What a newcomer meets first says what it should (issue 51): a short run's result line gives
# the run's first and last loss (not one 20-step window twice) and the largest stage's peak RSS;
# two identical runs of the main job cut the model alike; a long run says early how long it
# takes; fgpipe plan on a model too large to time here says so at once, and stops on SIGTERM.
# usage: newcomer.sh FGPIPE CONFIG   (CONFIG: launch/configs/fashion-mnist-mlp.conf)
. "$(dirname "$0")/lib.sh" "$@"
configs=$(dirname "$config")
mpi=(mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)

# A 5-step run on 2 stages: its first and last step's loss (loss.csv), its largest stage's RSS.
timeout 120 "${mpi[@]}" -np 2 "$fgpipe" train --config "$config" --set stages=2 --set steps=5 \
  --out "$dir/short" --no-checkpoint --summary-json "$dir/short.json" >"$dir/short.log" 2>&1
why=$(py_check "$dir/short.log" "$dir/short/loss.csv" "$dir/short.json" <<'PY'
import csv, json, re, sys
log, rows, s = open(sys.argv[1]).read(), list(csv.DictReader(open(sys.argv[2]))), json.load(open(sys.argv[3]))
m = re.search(r"train loss ([0-9.]+) -> ([0-9.]+) \(first and last step\).*peak RSS (\d+) MiB \(stage (\d), the largest\)", log)
if not m: print("no result line with the first and last step's loss and the largest stage's RSS"); sys.exit()
first, last, rss, stage = float(m[1]), float(m[2]), int(m[3]), int(m[4])
problems = []
if abs(first - float(rows[0]["loss"])) > 6e-5: problems.append(f"first loss {first}, loss.csv's first {rows[0]['loss']}")
if abs(last - float(rows[-1]["loss"])) > 6e-5: problems.append(f"last loss {last}, loss.csv's last {rows[-1]['loss']}")
peaks = s["peak_rss_stage"]
if stage != peaks.index(max(peaks)) or abs(rss - max(peaks) / 2**20) > 1:
    problems.append(f"peak RSS {rss} MiB of stage {stage}; by stage {[round(p / 2**20) for p in peaks]}")
print("; ".join(problems))
PY
)
verdict "a 5-step run's result line: its first and last step's loss, its largest stage's peak RSS" "$why"

# The main job's config, twice, 2 steps each: the same cut.
for i in 1 2; do
  timeout 120 "${mpi[@]}" -np 4 "$fgpipe" train --config "$configs/fashion-mnist-mlp-fgbp.conf" \
    --set steps=2 --no-checkpoint >"$dir/cut$i.log" 2>&1
done
a=$(grep "4 stages:" "$dir/cut1.log") b=$(grep "4 stages:" "$dir/cut2.log")
verdict "two runs of the main job cut it alike ($(grep -o 'stages cut by [a-z ]*' "$dir/cut1.log"))" \
  "$([ -n "$a" ] && [ "$a" = "$b" ] || echo "'$a' against '$b'")"

# A run with many steps says how long it will take before its first progress line.
timeout 120 "$fgpipe" train --config "$config" --set steps=100000 --set print_every=100000 \
  --no-checkpoint >"$dir/eta.log" 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q "^ETA " "$dir/eta.log" && break; sleep 0.1; done
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
verdict "a long run prints its ETA early ($(grep -m1 '^ETA' "$dir/eta.log"))" \
  "$(grep -qE '^ETA ([0-9]+h)?[0-9]+m([0-9]+s)? for the [0-9]+ steps left' "$dir/eta.log" || echo "no ETA line in 30 s")"

# The main job's side by side (tools/fgpipe-compare): its verdict follows the numbers.
root=$(realpath "$configs/../..")
summary() {  # summary FILE MODE TIMETABLE SECONDS ACCURACY PEAK_MIB
  printf '{"mode": "%s", "timetable": "%s", "stages": 2, "steps": 10, "micro_batches": 4, "micro_batch": 32, "train_seconds": %s, "test_acc": %s, "activation_peak_bytes": [%s, 1048576], "n_corr_stage": [4, 4], "lag_stage": [1, 1], "bubble_used_by_b_stage_measured": [0.5, 0.25], "bubble_measured": 0.3}\n' \
    "$2" "$3" "$4" "$5" "$(($6 * 1048576))" >"$dir/$1.json"
}
summary bp bp bp-zb 10 0.87 3; summary fgbp fg+bp fg+bp 12 0.82 6; summary fg fg fg 20 0.79 8
"$root/tools/fgpipe-compare" fg+bp="$dir/fgbp.json" bp="$dir/bp.json" fg="$dir/fg.json" >"$dir/cmp1.txt" 2>&1
summary fg fg fg 20 0.79 2
"$root/tools/fgpipe-compare" fg+bp="$dir/fgbp.json" bp="$dir/bp.json" fg="$dir/fg.json" >"$dir/cmp2.txt" 2>&1
verdict "the side by side's verdict follows its numbers" "$(grep -q 'verdict: the forward gradient paid in nothing here' "$dir/cmp1.txt" &&
  grep -q 'verdict: the forward gradient paid only in memory here.*fg held 1.00 MiB less' "$dir/cmp2.txt" &&
  grep -q 'fg+bp  fg+bp: backprop in the bubbles, per stage micro-batches/step: 4/4 at lag 1 (B ops 50% of its time outside F and U)' "$dir/cmp1.txt" ||
  echo "$(tail -n 1 "$dir/cmp1.txt") / $(tail -n 1 "$dir/cmp2.txt")")"

# fgpipe plan: GPT-2 124M's shape at ctx 1024 is not timed here, at once, and says what to do.
start=$(date +%s)
timeout 60 "$fgpipe" plan --config "$configs/gpt2-124m.conf" >"$dir/plan.log" 2>&1
rc=$? took=$(($(date +%s) - start))
verdict "plan of GPT-2 124M: refused in ${took} s (exit $rc), naming why and --costs" \
  "$([ $rc -eq 2 ] && [ $took -le 10 ] && grep -q "not timed (timing its ops is about" "$dir/plan.log" &&
     grep -q -- "--costs SUMMARY.json" "$dir/plan.log" || echo "exit $rc after $took s: $(tail -n 1 "$dir/plan.log")")"
# ... at ctx 16 it is timed (for minutes): SIGTERM ends it at once, with a message.
"$fgpipe" plan --config "$configs/gpt2-124m.conf" --set ctx=16 >"$dir/term.log" 2>&1 &
pid=$!
sleep 3
kill -TERM "$pid"
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then
  kill -KILL "$pid"; wait "$pid" 2>/dev/null
  verdict "plan stops on SIGTERM" "still running 5 s after SIGTERM"
else
  wait "$pid"; rc=$?
  verdict "plan stops on SIGTERM within 5 s, exit $rc, saying so" \
    "$([ $rc -ne 0 ] && grep -q "plan stopped by a signal" "$dir/term.log" || echo "exit $rc: $(tail -n 1 "$dir/term.log")")"
fi
finish
