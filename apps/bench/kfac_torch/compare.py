#!/usr/bin/env python3
"""K-FAC (hkfac::kfac_torch) against LibTorch's Adam and SGD with momentum on a small residual
network on Fashion-MNIST (apps/torch_resnet), on this machine's cores.

1. Tuning: each optimizer at each of its learning rates for --tune-seconds of training, evaluated
   on a validation split (the last 5,000 training images, trained on the other 55,000); the rate
   with the best final validation accuracy is kept. The test set plays no part in the choice.
2. Comparison: one torch_resnet run trains the three in turn at their chosen rates for --seconds
   each from the same initial weights, the 10,000 test images evaluated every --eval-every
   seconds with the clock paused.

Prints a markdown table (test accuracy at fixed times, the final and best accuracy, ms per step,
and when K-FAC first reached the better of Adam's and SGD's final accuracy) and writes
OUT/comparison.csv, OUT/tuning.csv and OUT/accuracy.png (with matplotlib: scripts/setup --bench).
--reuse reads the CSVs already in OUT instead of running.
"""
import argparse
import csv
import os
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
RATE_FLAG = {"kfac": "--kfac_lr", "adam": "--adam_lr", "sgd": "--sgd_lr"}


def read(path):
    """{optimizer: [(step, seconds, loss, accuracy)]} from a torch_resnet CSV."""
    curves = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            curves.setdefault(r["optimizer"], []).append(
                (int(r["step"]), float(r["seconds"]), float(r["heldout_loss"]),
                 float(r["heldout_accuracy"])))
    return curves


def run(app, out_csv, flags, log):
    cmd = [app, f"--csv={out_csv}"] + flags
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    with open(log, "w") as f:
        subprocess.run(cmd, check=True, stdout=f, stderr=subprocess.STDOUT)


def at(curve, seconds):
    """Accuracy of the last evaluation no later than `seconds`."""
    before = [c for c in curve if c[1] <= seconds + 1e-6]
    return before[-1][3] if before else None


def first_reaching(curve, accuracy):
    for step, seconds, _, acc in curve:
        if acc >= accuracy:
            return seconds, step
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--eval-every", type=float, default=15)
    ap.add_argument("--tune-seconds", type=float, default=90)
    ap.add_argument("--kfac-rates", default="0.003,0.01,0.03,0.1")
    ap.add_argument("--adam-rates", default="3e-4,1e-3,3e-3,1e-2")
    ap.add_argument("--sgd-rates", default="0.03,0.1,0.2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reuse", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    app = os.path.join(args.build, "apps", "torch_resnet", "torch_resnet")
    common = [f"--threads={args.threads}"]

    rates = {"kfac": args.kfac_rates.split(","), "adam": args.adam_rates.split(","),
             "sgd": args.sgd_rates.split(",")}
    tuning = []  # (optimizer, rate, final validation accuracy)
    for opt, grid in rates.items():
        for rate in grid:
            path = os.path.join(args.out, f"tune_{opt}_{rate}.csv")
            if not (args.reuse and os.path.exists(path)):
                run(app, path, common + [f"--optimizers={opt}", f"{RATE_FLAG[opt]}={rate}",
                                         "--heldout=validation", f"--seconds={args.tune_seconds}",
                                         f"--eval_every_seconds={args.tune_seconds}"],
                    path + ".log")
            curve = read(path).get(opt, [])
            final = curve[-1][3] if curve else 0.0
            tuning.append((opt, rate, final))
    chosen = {}
    for opt in rates:
        best = max((t for t in tuning if t[0] == opt), key=lambda t: t[2])
        chosen[opt] = best[1]
    with open(os.path.join(args.out, "tuning.csv"), "w") as f:
        f.write("optimizer,learning_rate,validation_accuracy,chosen\n")
        for opt, rate, acc in tuning:
            f.write(f"{opt},{rate},{acc:.4f},{int(chosen[opt] == rate)}\n")

    path = os.path.join(args.out, "comparison.csv")
    if not (args.reuse and os.path.exists(path)):
        run(app, path, common + ["--optimizers=kfac,adam,sgd", "--heldout=test",
                                 f"--seconds={args.seconds}",
                                 f"--eval_every_seconds={args.eval_every}"] +
            [f"{RATE_FLAG[o]}={chosen[o]}" for o in chosen], path + ".log")
    curves = read(path)

    print(f"Tuning ({args.tune_seconds:.0f} s each, validation accuracy):")
    for opt, rate, acc in tuning:
        print(f"  {opt:5s} lr {rate:>7s}: {acc:.4f}{'  <- chosen' if chosen[opt] == rate else ''}")
    marks = [t for t in (60, 120, 300, 600) if t <= args.seconds]
    print()
    print("| optimizer | lr | steps | ms/step | " +
          " | ".join(f"test acc {t:.0f} s" for t in marks) + " | final | best |")
    print("|---|---:|---:|---:|" + "---:|" * len(marks) + "---:|---:|")
    ms = {}
    for opt in ("kfac", "adam", "sgd"):
        c = curves.get(opt, [])
        if not c:
            continue
        ms[opt] = 1e3 * c[-1][1] / max(1, c[-1][0])
        cells = [f"{at(c, t):.4f}" if at(c, t) is not None else "-" for t in marks]
        print(f"| {opt} | {chosen[opt]} | {c[-1][0]} | {ms[opt]:.1f} | " + " | ".join(cells) +
              f" | {c[-1][3]:.4f} | {max(x[3] for x in c):.4f} |")
    baselines = [curves[o][-1][3] for o in ("adam", "sgd") if curves.get(o)]
    if curves.get("kfac") and baselines:
        target = max(baselines)
        hit = first_reaching(curves["kfac"], target)
        print()
        if hit:
            print(f"K-FAC reached {target:.4f} (the better of Adam's and SGD's final test "
                  f"accuracy) at {hit[0]:.0f} s (step {hit[1]}): {hit[0] / args.seconds:.2f} of "
                  f"the {args.seconds:.0f}-s budget")
        else:
            print(f"K-FAC did not reach {target:.4f} (the better of Adam's and SGD's final test "
                  f"accuracy) within {args.seconds:.0f} s")
        if "adam" in ms:
            print(f"Step cost K-FAC / Adam: {ms['kfac'] / ms['adam']:.2f} "
                  f"({ms['kfac']:.1f} against {ms['adam']:.1f} ms)")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib missing: no plot; scripts/setup --bench installs it)", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for opt, label in (("kfac", "K-FAC (hkfac::kfac_torch)"), ("adam", "Adam"),
                       ("sgd", "SGD + momentum")):
        c = curves.get(opt, [])
        if c:
            ax.plot([x[1] for x in c], [x[3] for x in c], label=f"{label}, lr {chosen[opt]}")
    ax.set_xlabel("training seconds (2 cores, evaluations excluded)")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0.8, None)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title("Residual network on Fashion-MNIST (apps/torch_resnet)")
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "accuracy.png"), dpi=110)


if __name__ == "__main__":
    main()
