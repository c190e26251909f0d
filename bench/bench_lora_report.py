"""bench/bench_lora.sh's table, curves and plot, from its output folder.

usage: bench_lora_report.py OUT PLOT "NAME|SETTINGS"...

Each fine-tune's validation curve: step 0 is the zero-shot loss (`fgpipe eval` of the
pretrained checkpoint), then the run's `eval step N: test loss X` lines (eval_every) and its
end-of-run val_loss, each at the training seconds of the steps before it (loss.csv's step
seconds summed: evaluations excluded). Writes OUT/curve-NAME.csv and, unless PLOT is empty,
a PNG of validation loss against seconds and against steps."""
import csv
import json
import os
import re
import sys

MIB = 1048576.0


def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None


def curve(out, name, zero):
    with open(os.path.join(out, f"ft-{name.replace(' ', '-')}", "loss.csv")) as f:
        secs = [float(r["seconds"]) for r in csv.DictReader(f)]
    cum = [0.0]
    for s in secs:
        cum.append(cum[-1] + s)
    pts = [(0, 0.0, zero)]
    for line in open(os.path.join(out, f"ft-{name.replace(' ', '-')}.log")):
        m = re.search(r"eval step (\d+): test loss ([0-9.]+)", line)
        if m:
            n = int(m.group(1))
            pts.append((n, cum[n], float(m.group(2))))
    s = load(os.path.join(out, f"ft-{name.replace(' ', '-')}.json"))
    pts.append((len(secs), cum[-1], s["val_loss"]))
    with open(os.path.join(out, f"curve-{name.replace(' ', '-')}.csv"), "w") as f:
        f.write("step,seconds,val_loss\n")
        for p in pts:
            f.write(f"{p[0]},{p[1]:.3f},{p[2]:.6f}\n")
    return pts, secs


def reads_per_step(sets):  # a streamed step reads the frozen base in F, and again if any B runs
    return 1 if "mode=fg " in sets + " " else 2


def at_time(pts, t):  # the last validation point at or before t seconds
    best = pts[0]
    for p in pts:
        if p[1] <= t + 1e-9:
            best = p
    return best


def main():
    out, plot, rows = sys.argv[1], sys.argv[2], sys.argv[3:]
    pre, zero = load(os.path.join(out, "pretrain.json")), load(os.path.join(out, "zero-shot.json"))
    z = zero["loss"]
    runs = {}
    for r in rows:
        name, sets = r.split("|")
        s = load(os.path.join(out, f"ft-{name.replace(' ', '-')}.json"))
        if s is None:
            print(f"{name}: no result"); continue
        pts, secs = curve(out, name, z)
        runs[name] = (sets, s, pts, secs)
    base = pre["params"]
    wbytes = sum(pre["memory_bytes"]["weights"])  # each distinct tensor once (the tied table once)
    print(f"\npretrained: {pre['steps']} steps of bp on the KJV in {pre['train_seconds']:.0f} s, "
          f"{base} parameters with the tied head's copy, {wbytes / MIB:.2f} MiB of distinct F32 weights; "
          f"KJV validation {pre['val_loss']:.4f}, "
          f"fortunes zero-shot {z:.4f} nats/token\n")
    t_star = min(p[-1][1] for _, _, p, _ in runs.values()) if runs else 0.0
    # equal bytes: the streamed reads of the run that reads least, each run's last point within them
    b_star = min(reads_per_step(r[0]) * wbytes * r[1]["steps"] for r in runs.values()) if runs else 0
    print(f"| mode | settings | trainable | steps | train s | ms/step | fortunes val at end | "
          f"val at {t_star:.0f} s (step) | val at {b_star / MIB:.0f} MiB streamed (step) | "
          f"activation peak MiB | peak RSS MiB |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(f"| zero-shot | pretrained, no fine-tuning | 0 | 0 | 0 | | {z:.4f} | {z:.4f} | {z:.4f} | | |")
    for name, (sets, s, pts, secs) in runs.items():
        ms = 1000 * sum(secs[1:]) / max(1, len(secs) - 1)  # step 0 warms up
        n, _, l = at_time(pts, t_star)
        nb = max(p[0] for p in pts if p[0] * reads_per_step(sets) * wbytes <= b_star)
        lb = [p[2] for p in pts if p[0] == nb][-1]
        print(f"| {name} | {sets} | {s['params'] - base} | {s['steps']} | {s['train_seconds']:.0f} | "
              f"{ms:.0f} | {s['val_loss']:.4f} | {l:.4f} ({n}) | {lb:.4f} ({nb}) | "
              f"{sum(s['activation_peak_bytes']) / MIB:.2f} | {s['peak_rss_bytes'] / MIB:.0f} |")
    for name, (sets, s, pts, _) in runs.items():
        print(f"{name}: {reads_per_step(sets)} x the base per step streamed: "
              f"{reads_per_step(sets) * wbytes * s['steps'] / MIB:.0f} MiB over its {s['steps']} steps")
    print(f"\nstreamed from flash, computed: the frozen base is {wbytes / MIB:.2f} MiB in F32; per "
          f"step fg reads it once ({wbytes / MIB:.2f} MiB), bp and fg+bp twice "
          f"({2 * wbytes / MIB:.2f} MiB: forward, then backward); measured: "
          f"bench_lora_stream_report.py's table")
    v = {k: load(os.path.join(out, f"vocab-{k}.json")) for k in ("4096", "128256")}
    for k, s in v.items():
        if s:
            print(f"vocab {k}: {s['params']} parameters, {1000 * s['step_seconds']:.0f} ms/step "
                  f"(bp, 6 steps), {s['tokens_per_s']:.0f} tokens/s, peak RSS {s['peak_rss_bytes'] / MIB:.0f} MiB")
    if plot and runs:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(1, 3, figsize=(15, 4.4), sharey=True)
        for name, (sets, s, pts, _) in runs.items():
            line, = ax[0].plot([p[1] for p in pts], [p[2] for p in pts], marker=".", label=name)
            ax[1].plot([p[0] for p in pts], [p[2] for p in pts], marker=".", label=name)
            reads = reads_per_step(sets) * wbytes / MIB
            ax[2].plot([p[0] * reads for p in pts], [p[2] for p in pts], ls="--", marker=".",
                       color=line.get_color(), label=name)
        ax[0].set_xlabel("training seconds (one thread, shared 2-core machine)")
        ax[1].set_xlabel("steps (1024 tokens each)")
        ax[2].set_xlabel("MiB of the frozen base read from flash (computed from the steps)")
        ax[0].set_ylabel("fortunes validation loss (nats/token)")
        for a in ax:
            a.axhline(z, color="gray", lw=0.8, ls=":")
            a.grid(alpha=0.3)
        ax[1].legend()
        fig.suptitle("LoRA (r 8, all 7 projections) fine-tuning a KJV-pretrained Llama-shaped model on fortunes")
        fig.tight_layout()
        os.makedirs(os.path.dirname(plot) or ".", exist_ok=True)
        fig.savefig(plot, dpi=110)
        print(f"plot: {plot}")


if __name__ == "__main__":
    main()
