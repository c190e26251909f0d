#!/usr/bin/python3
"""Rows of bench/bench_memory.sh (issue 43: the memory table and the race).

usage: memory_rows.py planned PLAN_JSON SCHEDULE      the largest stage's planned activations, bytes
       memory_rows.py table NAME OUT SCHEDULE METRIC  one row of the table: OUT.json the run's
           summary, OUT.plan.json fgpipe plan --costs of it; METRIC accuracy or val_loss
       memory_rows.py peak OUT                        the run's largest measured activation peak, bytes
       memory_rows.py plot PNG NEED OUT...            bars of each run's measured activations by
           stage (OUT.json), with lines at an eighth and a quarter of NEED bytes
"""
import csv
import json
import sys

MIB = 2**20


def planned(plan_path, schedule):
    rows = json.load(open(plan_path))["schedules"]
    return next(r for r in rows if r["schedule"] == schedule)


def mib(values):
    return " ".join(f"{v / MIB:.2f}" for v in values)


def table(name, out, schedule, metric):
    s = json.load(open(out + ".json"))
    p = planned(out + ".plan.json", schedule)
    steps = sorted(float(r["seconds"]) for r in csv.DictReader(open(out + "/loss.csv")))
    median = steps[len(steps) // 2]
    final = s["test_acc"] if metric == "accuracy" else s.get("val_loss", s["test_loss"])
    print(f"| {name} | {mib(s['activation_peak_bytes'])} | {mib(p['activation_bytes'])} | "
          f"{1e3 * p['step_seconds']:.1f} | {1e3 * median:.1f} | {final:.4f} |")


def plot(png, need, outs):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = [(o.rsplit("/", 1)[-1].split("-", 1)[1].replace("fgp", "fg+"),
             json.load(open(o + ".json"))["activation_peak_bytes"]) for o in outs]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / max(len(r[1]) for r in runs)
    for i, (name, peaks) in enumerate(runs):
        for s, v in enumerate(peaks):
            ax.bar(i + (s - (len(peaks) - 1) / 2) * width, v / MIB, width, color=f"C{s}",
                   label=f"stage {s}" if i == 0 else None)
    for frac, style in ((4, "--"), (8, ":")):
        ax.axhline(need / frac / MIB, color="k", ls=style, lw=1, label=f"1/{frac} of bp-1f1b's largest stage")
    ax.set_xticks(range(len(runs)), [r[0] for r in runs], rotation=30, ha="right")
    ax.set_ylabel("measured activation peak, MiB")
    ax.set_title("Activations by stage, main job's MLP on 4 stages, micro-batch 32")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)


cmd = sys.argv[1]
if cmd == "planned":
    print(max(planned(sys.argv[2], sys.argv[3])["activation_bytes"]))
elif cmd == "table":
    table(*sys.argv[2:6])
elif cmd == "peak":
    print(max(json.load(open(sys.argv[2] + ".json"))["activation_peak_bytes"]))
elif cmd == "plot":
    plot(sys.argv[2], float(sys.argv[3]), sys.argv[4:])
else:
    sys.exit(f"memory_rows.py: unknown command {cmd}")
