"""bench/bench_lora.sh's streamed half: the fine-tunes run again with the stage streaming its
layers from a layer store (the frozen base read-only), beside the same rows in memory.

usage: bench_lora_stream_report.py OUT "NAME|SETTINGS"...

Per row, from OUT/st-NAME.{json,log,budget} and OUT/st-NAME/loss.csv (and OUT/ft-NAME's for
the in-memory row): the budget and the floor, the bytes read and written per step (the stage's
"out of core" line: steps 1-3), ms per step (loss.csv's step seconds, step 0 left out: it
fills the slots), the validation loss at the end, the activation peak and the peak RSS."""
import csv
import os
import re
import sys

from bench_lora_report import MIB, load


def ms_per_step(folder):
    try:
        with open(os.path.join(folder, "loss.csv")) as f:
            secs = [float(r["seconds"]) for r in csv.DictReader(f)]
    except OSError:
        return None
    return 1000 * sum(secs[1:]) / max(1, len(secs) - 1)


def io_line(log):
    text = open(log).read() if os.path.exists(log) else ""
    m = re.search(r"a step read ([0-9.]+) GB and wrote ([0-9.]+) GB; compute ([0-9.]+) s per step"
                  r".*\(I/O ([0-9.]+) s per step\): (\w+)-bound", text)
    slots = re.search(r"through (\d+ slots[^:\n]*)", text)
    if not m:
        return None
    return {"read": float(m.group(1)) * 1e9, "wrote": float(m.group(2)) * 1e9,
            "compute": float(m.group(3)), "io": float(m.group(4)), "bound": m.group(5),
            "slots": slots.group(1) if slots else "?"}


def main():
    out, rows = sys.argv[1], sys.argv[2:]
    print("\nstreamed from flash (the frozen base read-only; budget = the floor unless BUDGET):\n")
    print("| mode | mem_budget MiB | slots | read MiB/step | written KiB/step | I/O s/step | "
          "ms/step streamed | ms/step in memory | val streamed | val in memory | "
          "activation peak MiB | peak RSS MiB (in memory) | bound |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    got = {}
    for r in rows:
        name = r.split("|")[0]
        key = name.replace(" ", "-")
        s, m = load(os.path.join(out, f"st-{key}.json")), load(os.path.join(out, f"ft-{key}.json"))
        io = io_line(os.path.join(out, f"st-{key}.log"))
        if s is None or io is None:
            print(f"| {name} | no result | | | | | | | | | | | |")
            continue
        budget = open(os.path.join(out, f"st-{key}.budget")).read().split()
        ms, ms_mem = ms_per_step(os.path.join(out, f"st-{key}")), ms_per_step(os.path.join(out, f"ft-{key}"))
        got[name] = (io, ms, ms_mem)
        mem_val = f"{m['val_loss']:.4f}" if m else ""
        mem_rss = f" ({m['peak_rss_bytes'] / MIB:.0f})" if m else ""
        print(f"| {name} | {int(budget[0]) / MIB:.2f} | {io['slots']} | {io['read'] / MIB:.2f} | "
              f"{io['wrote'] / 1024:.0f} | {io['io']:.3f} | {ms:.0f} | "
              f"{ms_mem:.0f} | {s['val_loss']:.4f} | {mem_val} | "
              f"{sum(s['activation_peak_bytes']) / MIB:.2f} | {s['peak_rss_bytes'] / MIB:.0f}{mem_rss} | "
              f"{io['bound']} |")
    if "fg" in got and "bp" in got:
        (fio, fms, fmem), (bio, bms, bmem) = got["fg"], got["bp"]
        print(f"\nfg reads {fio['read'] / bio['read']:.2f} x bp's bytes per step "
              f"({fio['read'] / MIB:.2f} against {bio['read'] / MIB:.2f} MiB); its streamed step takes "
              f"{fms / bms:.2f} x bp's ({fms:.0f} against {bms:.0f} ms; in memory {fmem / bmem:.2f} x); "
              f"streaming costs bp {bms / bmem:.2f} x and fg {fms / fmem:.2f} x its in-memory step")


if __name__ == "__main__":
    main()
