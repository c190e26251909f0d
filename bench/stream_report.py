"""The table of a streamed benchmark's runs (bench_lora_8b.sh, bench_full_ft.sh): each step's
I/O line (with the waves' bound: the sum over the step's waves of max(I/O, compute), what
overlap within each wave allows), then per run the losses, peak RSS against the budget, GB read
per step and bound / step over the steps after the first (which fills the store and the slots).

usage: stream_report.py DIR TITLE NAME...
Per run, from DIR/NAME.log (the `--set io_every_step=1` lines and the losses), DIR/NAME.json
(summary.json: peak_rss_bytes) and DIR/NAME.budget (the --mem-budget it ran under)."""
import json
import re
import sys

UNITS = {"K": 2**10, "M": 2**20, "G": 2**30}
STEP = re.compile(r"step (\d+) I/O: read ([0-9.]+) GB, wrote ([0-9.]+) GB, I/O ([0-9.]+) s, "
                  r"compute ([0-9.]+) s, bound ([0-9.]+) s \((\w+)\), step ([0-9.]+) s"
                  r"(?:, bound / step [0-9.]+; the waves' bound ([0-9.]+) s)?")


def size(text):
    return float(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else float(text)


def main(d, title, names):
    print(f"\n| {title} | step | GB read | GB written | I/O s | compute s | bound s | step s | bound / step | "
          "waves' bound / step |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    summary = []
    for n in names:
        log = open(f"{d}/{n}.log").read()
        rows = [m.groups() for m in STEP.finditer(log)]
        for r in rows:
            waves = f"{float(r[8]) / float(r[7]):.2f}" if r[8] else "-"
            print(f"| {n} | {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} ({r[6]}) | {r[7]} | "
                  f"{float(r[5]) / float(r[7]):.2f} | {waves} |")
        losses = [float(x) for x in re.findall(r"step \d+/\d+\s+loss ([0-9.]+)", log)]
        val = re.search(r"val loss ([0-9.]+)", log)
        if val:
            losses.append(float(val.group(1)))  # after the last step
        rss = json.load(open(f"{d}/{n}.json"))["peak_rss_bytes"]
        later = rows[1:] or rows
        ratio = sum(float(r[5]) for r in later) / sum(float(r[7]) for r in later) if later else 0
        read = sum(float(r[1]) for r in later) / len(later) if later else 0
        budget = size(open(f"{d}/{n}.budget").read().strip())
        summary.append((n, losses, rss, read, ratio, budget))
    print("\n| run | loss on the window, each step, then after the last | peak RSS GB | budget GB | "
          "RSS / budget | GB read per step | bound / step (steps 2..) |")
    print("|---|---|---|---|---|---|---|")
    for n, losses, rss, read, ratio, budget in summary:
        print(f"| {n} | {' '.join(f'{x:.3f}' for x in losses)} | {rss / 1e9:.2f} | {budget / 1e9:.2f} | "
              f"{rss / budget:.2f} | {read:.2f} | {ratio:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
