#!/usr/bin/python3
"""One row of bench/bench_time_to_accuracy.sh, and the run's accuracy curves.

usage: time_to_accuracy.py NAME OUT TARGETS PLAN_JSON STARTUP_JSON SCHEDULE MEASURED METRIC
  NAME: the row's mode label; OUT: the run's --out dir (OUT.json its summary, OUT.txt its
  output with the "eval step" lines); TARGETS: "0.85 0.88"; PLAN_JSON: fgpipe plan --json of
  the run's costs the projection takes (--costs OUT.json, --measured where they are),
  STARTUP_JSON: the same with the costs it planned with; SCHEDULE: the run's entry in them;
  METRIC: accuracy (a target is reached at or above it) or val_loss (at or below, nats per
  byte of a GPT's validation split); MEASURED: 1 when the
  run had a core per rank (its seconds are the pipeline's), 0 when it was oversubscribed.

Writes OUT.measured.csv and OUT.projected.csv (step,samples,seconds,accuracy, a '# ' header
line naming the run), prints the table row. Projected seconds: (step + 1) x the planned step
of the run's own timetable and op costs.
"""
import csv
import json
import re
import sys

name, out, targets, plan_path, startup_path, schedule, measured, metric = sys.argv[1:9]
targets = [float(t) for t in targets.split()]
s = json.load(open(out + ".json"))
plan = json.load(open(plan_path))
planned_step = next(x["step_seconds"] for x in plan["schedules"] if x["schedule"] == schedule)
startup_step = next(x["step_seconds"] for x in json.load(open(startup_path))["schedules"]
                    if x["schedule"] == schedule)
seconds, total = {}, 0.0
for row in csv.DictReader(open(out + "/loss.csv")):
    total += float(row["seconds"])
    seconds[int(row["step"])] = total
group, final, reached = (3, s["test_acc"], lambda v, t: v >= t) if metric == "accuracy" else \
    (2, s["test_loss"], lambda v, t: v <= t)
evals = [(int(m.group(1)), float(m.group(group))) for m in
         re.finditer(r"eval step (\d+): test loss (\S+)\s+test accuracy (\S+)", open(out + ".txt").read())]
evals.append((s["steps"] - 1, final))  # the final evaluation
batch = s["micro_batch"] * s["micro_batches"] * s.get("replicas", 1)
kinds = {"measured": lambda step: seconds[step], "projected": lambda step: (step + 1) * planned_step}
for kind, time_of in kinds.items():
    with open(f"{out}.{kind}.csv", "w") as f:
        f.write(f"# mode={name} stages={s['stages']} time={kind}\nstep,samples,seconds,{metric}\n")
        for step, acc in evals:
            if step in seconds:
                f.write(f"{step},{(step + 1) * batch},{time_of(step):.3f},{acc}\n")


def first_hit(t, time_of):
    return next(((step, time_of(step)) for step, v in evals if reached(v, t) and step in seconds), None)


cells, first = [], None
for t in targets:
    hit_measured, hit_projected = first_hit(t, kinds["measured"]), first_hit(t, kinds["projected"])
    if hit_measured and first is None:
        first = hit_measured[0]
    if not hit_measured:
        cells.append("-")
    else:
        cells.append(f"{hit_measured[1]:.1f}" if measured == "1" else "n/a")
    cells.append(f"{hit_projected[1]:.1f}" if hit_projected else "-")
samples = f"{(first + 1) * batch}" if first is not None else "-"
best = (max if metric == "accuracy" else min)(v for _, v in evals)
steps = sorted(float(r["seconds"]) for r in csv.DictReader(open(out + "/loss.csv")))
median_step = steps[len(steps) // 2]
rss = max(s.get("peak_rss_stage", [s["peak_rss_bytes"]])) / 2**20
activations = max(next(x["activation_bytes"] for x in plan["schedules"] if x["schedule"] == schedule)) / 2**20
print(f"| {name:<8} | {cells[0]:>6} | {cells[1]:>6} | {cells[2]:>6} | {cells[3]:>6} | {samples:>7} | "
      f"{best:.4f} | {f'{1e3 * median_step:.1f}' if measured == '1' else 'n/a':>7} | "
      f"{1e3 * planned_step:>7.1f} | {1e3 * startup_step:>8.1f} | {rss:>5.0f} | {activations:>5.2f} |")
