#!/usr/bin/env python3
"""Convergence benchmark (K-FAC 2 of BENCHMARKS.md, which lives at ../shared/BENCHMARKS.md beside
the repository): the Fashion-MNIST deep autoencoder for a fixed wall-clock budget, K-FAC vs Adam
at each learning rate in the same binary (apps/autoencoder), plus PyTorch Adam (Debian's
python3-torch) on the identical model and data at the best rate, one run after another.

K-FAC runs with the flags of --kfac-flags: by default apps/autoencoder/kfac_fixed_rate.flags, a
fixed learning rate (1e-2) and momentum (0.3), adaptive damping, and batch 256 (much of a K-FAC
step's cost, the preconditioning and the inverses, does not grow with the batch, so it pays to
feed it more examples per step). The demo's apps/autoencoder/kfac_tuned.flags take the learning
rate and momentum from the quadratic model instead: about as much progress per step, but two
Jacobian-vector products more per step (docs/RESULTS.md#fixed-rate-k-fac). So that the
batch size alone cannot explain a difference, the best Adam rate is also run at each of
--adam-extra-batches, and the target is the best final loss of all Adam runs.

Each run logs its mini-batch objective per step. Curves are compared after a running median
over --smooth steps. The target is the best Adam run's smoothed loss at the end of the budget;
the result is the first time K-FAC's smoothed loss reaches it, as a fraction of the budget (the
target: at most 1/3). A running median of mini-batch losses still wanders by a unit or
two, so a curve can touch the target early and rise above it again; the second reading is
steadier: the mean loss over a trailing window of --window seconds, the best Adam run's last
window against the first of K-FAC's windows to match it. The third reading has no mini-batch
noise at all: every --eval-every seconds of training each run stops its clock and evaluates the
objective on the same --eval-examples training images; the best Adam run's last evaluation is
the target. Writes OUT/curves.png (matplotlib) and prints markdown tables. --reuse reads the
CSVs of runs already in OUT instead of repeating them.
"""
import argparse
import csv
import math
import os
import statistics
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
APP = "apps/autoencoder/autoencoder"  # under --build


def number(text, low, low_ok, what):
    """An argparse type: a finite float above `low` (or at it, if `low_ok`)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    if not math.isfinite(v) or v < low or (v == low and not low_ok):
        raise argparse.ArgumentTypeError(f"{text}: must be finite and {what}")
    return v


def positive(text):
    return number(text, 0, False, "> 0")


def nonnegative(text):
    return number(text, 0, True, ">= 0")


def positive_int(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}")
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be >= 1")
    return v


def rate_list(text):
    """Comma-separated learning rates, kept as spelt (they name the runs' files)."""
    rates = text.split(",")
    for r in rates:
        positive(r)
    return text


def batch_list(text):
    for b in filter(None, text.split(",")):
        positive_int(b)
    return text


def read_curve(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return [(int(r["step"]), float(r["seconds"]), float(r["loss"])) for r in rows]


def smooth(curve, window):
    out = []
    for i in range(len(curve)):
        lo = max(0, i - window + 1)
        out.append((curve[i][0], curve[i][1], statistics.median(c[2] for c in curve[lo:i + 1])))
    return out


def loss_at(curve, seconds):
    """The smoothed loss at the last logged step no later than `seconds`."""
    before = [c for c in curve if c[1] <= seconds]
    return before[-1][2] if before else float("nan")


def window_mean(curve, end, width):
    """Mean raw loss of the steps logged in (end - width, end]."""
    losses = [c[2] for c in curve if end - width < c[1] <= end]
    return sum(losses) / len(losses) if losses else float("nan")


def first_window_at_or_below(curve, target, width):
    """The first logged time t >= width whose trailing window's mean loss is <= target."""
    lo, total = 0, 0.0
    for hi, (_, sec, loss) in enumerate(curve):
        total += loss
        while curve[lo][1] <= sec - width:
            total -= curve[lo][2]
            lo += 1
        # (a hair of slack: the running sum rounds differently from a fresh mean)
        if sec >= width and total / (hi - lo + 1) <= target + 1e-9 * abs(target):
            return sec
    return None


def first_time_at_or_below(curve, target):
    for step, sec, loss in curve:
        if loss <= target:
            return step, sec
    return None


def eval_flags(args, name):
    """The flags (same names in the app and the PyTorch script) of the fixed-set evaluation."""
    if args.eval_every <= 0:
        return []
    return [f"--eval_every_seconds={args.eval_every}", f"--eval_examples={args.eval_examples}",
            f"--eval_csv={os.path.join(args.out, name + '_eval.csv')}"]


def read_evals(args, name):
    path = os.path.join(args.out, name + "_eval.csv")
    return read_curve(path) if os.path.exists(path) else None


def report_evals(args, evals, adam_runs):
    """The fixed-set reading: each run's objective on the same images, free of mini-batch noise.
    Returns the best Adam run's final objective (the target), or None without evaluations."""
    if "hkfac K-FAC" not in evals or not adam_runs:
        return None
    best = min(adam_runs, key=lambda k: evals[k][-1][2])
    target = evals[best][-1][2]
    third = args.budget / 3
    print()
    print(f"Objective on the first {args.eval_examples} training images, every "
          f"{args.eval_every:.0f} s of training (clock stopped while evaluating):")
    print()
    print(f"| run | at {third:.0f} s | final | first evaluation at or below {target:.2f} |")
    print("|---|---:|---:|---:|")
    for name, ev in evals.items():
        hit = first_time_at_or_below(ev, target)
        reach = f"{hit[1]:.0f} s (step {hit[0]})" if hit else "not reached"
        print(f"| {name} | {loss_at(ev, third):.2f} | {ev[-1][2]:.2f} | {reach} |")
    hit = first_time_at_or_below(evals["hkfac K-FAC"], target)
    print()
    if hit:
        print(f"Fixed set: K-FAC first evaluates at or below {best}'s final {target:.2f} at "
              f"{hit[1]:.0f} s: {hit[1] / args.budget:.2f} of the budget (target <= 0.33; "
              f"evaluations are {args.eval_every:.0f} s apart)")
    else:
        print(f"Fixed set: K-FAC never reaches {best}'s final {target:.2f}")
    return target


def run_app(args, name, flags):
    out_csv = os.path.join(args.out, f"{name}.csv")
    if args.reuse and os.path.exists(out_csv):
        print(f"  {name}: reusing {out_csv}", flush=True)
        return read_curve(out_csv)
    app = os.path.join(args.build, APP)
    if not os.access(app, os.X_OK):
        sys.exit(f"convergence: no autoencoder at {app} (build it, or point --build at a build)")
    cmd = [app, "--data=fashion_mnist",
           f"--max_seconds={args.budget}", "--training_steps=100000000", "--log_every=200",
           f"--csv={out_csv}", f"--png={os.path.join(args.out, name + '.png')}"] + flags + \
        eval_flags(args, name)
    print(f"  {name}: {' '.join(cmd[1:])}", flush=True)
    with open(os.path.join(args.out, f"{name}.log"), "w") as log:
        if subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode != 0:
            sys.exit(f"convergence: {name} failed, see {name}.log")
    return read_curve(out_csv)


def run_torch(args, rate):
    out_csv = os.path.join(args.out, f"torch_adam_{rate}.csv")
    if args.reuse and os.path.exists(out_csv):
        print(f"  torch adam {rate}: reusing {out_csv}", flush=True)
        return read_curve(out_csv)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_autoencoder.py")
    cmd = [args.python, script, f"--learning_rate={rate}", f"--max_seconds={args.budget}",
           f"--csv={out_csv}"] + eval_flags(args, f"torch_adam_{rate}")
    print(f"  torch adam {rate}", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print("  PyTorch run failed (python3-torch installed? scripts/setup --bench installs it):\n"
              f"{proc.stderr[-2000:]}")
        return None
    return read_curve(out_csv)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", help="the build directory with the autoencoder")
    p.add_argument("--out", default="build/bench_convergence", help="directory for the results")
    p.add_argument("--budget", type=positive, default=600, help="seconds per run (> 0)")
    p.add_argument("--adam-rates", type=rate_list, default="1e-4,3e-4,1e-3,3e-3")
    p.add_argument("--kfac-flags",
                   default="--flagfile=" + os.path.join(REPO,
                                                        "apps/autoencoder/kfac_fixed_rate.flags"),
                   help="extra autoencoder flags for the K-FAC run (default: the fixed-rate "
                   "settings; the demo's adaptive ones are apps/autoencoder/kfac_tuned.flags)")
    p.add_argument("--adam-extra-batches", type=batch_list, default="256",
                   help="batch sizes (besides 128) at which the best Adam rate also runs")
    p.add_argument("--smooth", type=positive_int, default=50, help="running-median window, steps")
    p.add_argument("--python", default="/usr/bin/python3", help="interpreter with torch")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--window", type=nonnegative, default=0,
                   help="trailing-mean window, seconds (default: a tenth of the budget)")
    p.add_argument("--reuse", action="store_true", help="read runs whose CSV is already in OUT")
    p.add_argument("--eval-every", type=nonnegative, default=10,
                   help="seconds of training between fixed-set evaluations (0: none)")
    p.add_argument("--eval-examples", type=positive_int, default=10000,
                   help="the fixed set: this many first training images")
    args = p.parse_args()
    if not os.path.isdir(args.build):
        p.error(f"--build {args.build}: no such directory")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        p.error(f"--out {args.out}: not a directory")
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        p.error(f"--out {args.out}: {e.strerror}")
    if not os.access(args.out, os.W_OK | os.X_OK):
        p.error(f"--out {args.out}: not writable")
    print(f"convergence: Fashion-MNIST autoencoder, {args.budget:.0f} s per run", flush=True)

    curves = {"hkfac K-FAC": run_app(args, "kfac", ["--optimizer=kfac"] + args.kfac_flags.split())}
    files = {"hkfac K-FAC": "kfac"}  # each run's file name in OUT
    adam = {}
    for rate in args.adam_rates.split(","):
        adam[rate] = run_app(args, f"adam_{rate}", ["--optimizer=adam", f"--learning_rate={rate}"])
        curves[f"hkfac Adam {rate}"] = adam[rate]
        files[f"hkfac Adam {rate}"] = f"adam_{rate}"
    smoothed = {k: smooth(v, args.smooth) for k, v in curves.items()}
    best_rate = min(adam, key=lambda r: smoothed[f"hkfac Adam {r}"][-1][2])
    adam_runs = [f"hkfac Adam {r}" for r in adam]
    for batch in filter(None, args.adam_extra_batches.split(",")):
        name = f"hkfac Adam {best_rate} batch {batch}"
        curves[name] = run_app(args, f"adam_{best_rate}_b{batch}",
                               ["--optimizer=adam", f"--learning_rate={best_rate}",
                                f"--batch_size={batch}"])
        smoothed[name] = smooth(curves[name], args.smooth)
        files[name] = f"adam_{best_rate}_b{batch}"
        adam_runs.append(name)
    best_adam = min(adam_runs, key=lambda k: smoothed[k][-1][2])
    if not args.no_torch:
        torch_curve = run_torch(args, best_rate)
        if torch_curve:
            curves[f"PyTorch Adam {best_rate}"] = torch_curve
            smoothed[f"PyTorch Adam {best_rate}"] = smooth(torch_curve, args.smooth)
            files[f"PyTorch Adam {best_rate}"] = f"torch_adam_{best_rate}"

    target = smoothed[best_adam][-1][2]
    width = args.window or args.budget / 10
    adam_means = {k: window_mean(curves[k], curves[k][-1][1], width) for k in adam_runs}
    best_mean_run = min(adam_means, key=adam_means.get)
    mean_target = adam_means[best_mean_run]
    print()
    third = args.budget / 3
    print(f"| run | steps | steps/s | loss at {third:.0f} s | final loss (smoothed) "
          f"| mean over the last {width:.0f} s | time to best Adam's final loss "
          f"| first {width:.0f}-s window at or below {mean_target:.2f} |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, sc in smoothed.items():
        hit = first_time_at_or_below(sc, target)
        steps, secs = sc[-1][0] + 1, sc[-1][1]
        reach = f"{hit[1]:.0f} s (step {hit[0]})" if hit else "not reached"
        win = first_window_at_or_below(curves[name], mean_target, width)
        win_reach = f"ends at {win:.0f} s" if win is not None else "not reached"
        print(f"| {name} | {steps} | {steps / secs:.1f} | {loss_at(sc, third):.2f} "
              f"| {sc[-1][2]:.2f} | {window_mean(curves[name], secs, width):.2f} | {reach} "
              f"| {win_reach} |")
    hit = first_time_at_or_below(smoothed["hkfac K-FAC"], target)
    print()
    if hit:
        print(f"K-FAC reaches {best_adam}'s {args.budget:.0f}-second loss {target:.2f} after "
              f"{hit[1]:.0f} s: {hit[1] / args.budget:.2f} of the budget (target <= 0.33)")
    else:
        print(f"K-FAC does not reach {best_adam}'s {args.budget:.0f}-second loss "
              f"{target:.2f} within the budget (its final: {smoothed['hkfac K-FAC'][-1][2]:.2f})")
    win = first_window_at_or_below(curves["hkfac K-FAC"], mean_target, width)
    if win is not None:
        print(f"Trailing {width:.0f}-s means: K-FAC's first reaches {best_mean_run}'s last "
              f"({mean_target:.2f}) at {win:.0f} s: {win / args.budget:.2f} of the budget")
    else:
        print(f"Trailing {width:.0f}-s means: K-FAC never reaches {best_mean_run}'s last "
              f"({mean_target:.2f})")
    evals = {k: read_evals(args, f) for k, f in files.items()}
    evals = {k: v for k, v in evals.items() if v}
    eval_target = report_evals(args, evals, [k for k in adam_runs if k in evals])
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing (scripts/setup --bench installs it): no plot")
        return
    fig, axes = plt.subplots(1, 3 if evals else 2, figsize=(19 if evals else 13, 4.5))
    for name, sc in smoothed.items():
        axes[0].plot([c[1] for c in sc], [c[2] for c in sc], label=name)
        axes[1].plot([c[0] for c in sc], [c[2] for c in sc], label=name)
    # Seconds: zoomed on the end game, where the runs differ by a few units of loss.
    lowest = min(c[2] for sc in smoothed.values() for c in sc)
    axes[0].set(xlabel="seconds", ylabel=f"training loss (running median of {args.smooth})",
                ylim=(lowest - 2, target + 30))
    axes[1].set(xlabel="step", ylabel="training loss", yscale="log", xscale="log")
    for a in axes[:2]:
        a.axhline(target, color="gray", lw=0.8, ls="--")
    if evals:
        for name, ev in evals.items():
            axes[2].plot([c[1] for c in ev], [c[2] for c in ev], label=name, marker=".", ms=3)
        lowest = min(c[2] for ev in evals.values() for c in ev)
        axes[2].set(xlabel="seconds of training",
                    ylabel=f"objective on the first {args.eval_examples} images",
                    ylim=(lowest - 2, (eval_target or lowest) + 30))
        if eval_target:
            axes[2].axhline(eval_target, color="gray", lw=0.8, ls="--")
    for a in axes:
        a.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Fashion-MNIST autoencoder, {args.budget:.0f} s per run")
    fig.tight_layout()
    png = os.path.join(args.out, "curves.png")
    fig.savefig(png, dpi=90)
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
