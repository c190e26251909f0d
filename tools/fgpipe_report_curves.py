"""fgpipe-report --curves: accuracy (or validation loss) against wall-clock seconds and against
samples for several runs, measured lines solid and projected ones dashed, in one PNG.

A curve file (bench/bench_time_to_accuracy.sh writes them) is CSV with a first line
`# mode=NAME stages=M time=measured|projected` and the columns step,samples,seconds and
accuracy (or val_loss).
"""
import csv
import os


class CurveError(Exception):
    """A curve file that cannot be read: reported by fgpipe-report with exit code 2."""


def read_curve(path):
    try:
        with open(path) as f:
            head = f.readline()
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise CurveError(f"{path}: {e.strerror}")
    if not head.startswith("# "):
        raise CurveError(f"{path}: not a curve file (its first line is not '# mode=... time=...')")
    meta = dict(kv.split("=", 1) for kv in head[2:].split() if "=" in kv)
    metric = "accuracy" if rows and "accuracy" in rows[0] else "val_loss"
    for key in ("samples", "seconds", metric):
        if not rows or key not in rows[0]:
            raise CurveError(f"{path}: no column '{key}' (or no rows)")
    try:
        cols = {k: [float(r[k]) for r in rows] for k in ("samples", "seconds", metric)}
    except ValueError as e:
        raise CurveError(f"{path}: {e}")
    time = meta.get("time", "measured")
    label = f"{meta.get('mode', os.path.basename(path))} M={meta.get('stages', '?')}"
    return {"label": label, "time": time, "metric": metric, **cols}


def plot_curves(curves, path, plt, colors):
    """Two panels (seconds, samples); one color per run, dashed where its time is projected.
    Returns the number of lines drawn in each panel."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True, layout="constrained")
    names = sorted({c["label"] for c in curves})
    color_of = dict(zip(names, colors(len(names))))
    for c in curves:
        style = "--" if c["time"] == "projected" else "-"
        y = c[c["metric"]]
        axes[0].plot(c["seconds"], y, style, color=color_of[c["label"]], marker=".",
                     label=f"{c['label']} ({c['time']})")
    seen = set()
    for c in curves:  # samples do not depend on the clock: one line per run
        if c["label"] in seen:
            continue
        seen.add(c["label"])
        axes[1].plot(c["samples"], c[c["metric"]], "-", color=color_of[c["label"]], marker=".",
                     label=c["label"])
    metric = curves[0]["metric"].replace("val_loss", "validation loss (nats/byte)")
    axes[0].set_title(f"{metric} against training seconds (dashed: projected)")
    axes[0].set_xlabel("training seconds (evaluations excluded)")
    axes[1].set_title(f"{metric} against training samples")
    axes[1].set_xlabel("samples")
    axes[0].set_ylabel(metric)
    if curves[0]["metric"] == "accuracy":  # the race is at the top: leave out the first steps
        values = sorted(v for c in curves for v in c["accuracy"])
        axes[0].set_ylim(bottom=values[len(values) // 10])
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    drawn = len(axes[0].get_lines()), len(axes[1].get_lines())
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return drawn
