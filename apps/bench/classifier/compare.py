#!/usr/bin/env python3
"""K-FAC against Adam on the convolutional Fashion-MNIST classifier (apps/classifier), one run
after another, each for --budget seconds of training with the test set (10,000
images) evaluated every --eval-every seconds, clock paused. Adam runs at each of --adam-rates;
K-FAC with the app's defaults (kfac-jax's adaptive learning rate, momentum and damping) at each
of --kfac-batches. Prints a markdown table (test accuracy and loss at fixed times, the best
accuracy, steps per second, and when each run first reached the best Adam run's final accuracy)
and writes OUT/curves.png when matplotlib is there. --reuse reads the CSVs already in OUT.
"""
import argparse
import csv
import os
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def read(path):
    with open(path) as f:
        return [(int(r["step"]), float(r["seconds"]), float(r["test_loss"]),
                 float(r["test_accuracy"])) for r in csv.DictReader(f)]


def at(curve, seconds):
    """The last evaluation no later than `seconds`."""
    before = [c for c in curve if c[1] <= seconds + 1e-6]
    return before[-1] if before else None


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget", type=float, default=120)
    ap.add_argument("--eval-every", type=float, default=10)
    ap.add_argument("--adam-rates", default="3e-4,1e-3,3e-3")
    ap.add_argument("--kfac-batches", default="128,256")
    ap.add_argument("--reuse", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    app = os.path.join(args.build, "apps", "classifier", "classifier")
    runs = [(f"kfac_b{b}", ["--optimizer=kfac", f"--batch_size={b}"])
            for b in args.kfac_batches.split(",")]
    runs += [(f"adam_{r}", ["--optimizer=adam", f"--learning_rate={r}"])
             for r in args.adam_rates.split(",")]
    curves = {}
    for name, flags in runs:
        path = os.path.join(args.out, name + ".csv")
        if not (args.reuse and os.path.exists(path)):
            cmd = [app, *flags, f"--max_seconds={args.budget}",
                   f"--eval_every_seconds={args.eval_every}", "--log_every=1000000",
                   f"--csv={path}"]
            print("running", " ".join(cmd), file=sys.stderr, flush=True)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        curves[name] = read(path)

    adam = [n for n in curves if n.startswith("adam")]
    best_adam = max(adam, key=lambda n: curves[n][-1][3])
    target = curves[best_adam][-1][3]
    marks = [t for t in (30, 60, args.budget) if t <= args.budget]
    print(f"| run | steps | steps/s | " +
          " | ".join(f"accuracy (loss) at {t:g} s" for t in marks) +
          f" | best accuracy | first at ≥ {target:.4f} |")
    print("|---|---:|---:|" + "---:|" * len(marks) + "---:|---:|")
    for name, c in curves.items():
        cells = []
        for t in marks:
            p = at(c, t)
            cells.append(f"{p[3]:.4f} ({p[2]:.3f})" if p else "-")
        first = next((p for p in c if p[3] >= target), None)
        reach = f"{first[1]:.0f} s (step {first[0]})" if first else "not reached"
        print(f"| {name} | {c[-1][0]} | {c[-1][0] / c[-1][1]:.1f} | " + " | ".join(cells) +
              f" | {max(p[3] for p in c):.4f} | {reach} |")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib missing: no plot; scripts/setup --bench installs it)", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, c in curves.items():
        axes[0].plot([p[1] for p in c], [p[3] for p in c], label=name)
        axes[1].plot([p[1] for p in c], [p[2] for p in c], label=name)
    axes[0].set_ylim(0.75, 0.93)
    axes[1].set_ylim(0.2, 0.7)
    for ax, what in zip(axes, ("test accuracy", "test loss")):
        ax.set_xlabel("training seconds")
        ax.set_ylabel(what)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("Fashion-MNIST CNN (apps/classifier): K-FAC vs Adam")
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "curves.png"), dpi=110)


if __name__ == "__main__":
    main()
