#!/usr/bin/env python3
"""Cost-model training benchmark: hkfac K-FAC vs hkfac Adam vs Halide 14's retrain_cost_model.

All runs train on the same samples with the same validation split (taken from the hkfac split, so
Halide's trainer sees only the training schedules), one after another. hkfac
runs report validation loss and ordering accuracy per epoch through --csv. Halide's tool has no
validation output on a split of ours, so its per-epoch training loss and accuracy are parsed
from its log, and its final weights are scored on our validation schedules by a run with rate 0
(Adam with a zero step leaves the weights alone and prints the loss and ordering rate).

Prints a table (markdown with --markdown) and writes OUT/curves.png when matplotlib exists.
"""
import argparse
import csv
import os
import re
import statistics
import subprocess
import sys
import time

HALIDE_RETRAIN = "/usr/lib/x86_64-linux-gnu/halide14/retrain_cost_model"


def run(cmd, stdin_path=None, log=None):
    with open(stdin_path) if stdin_path else open(os.devnull) as stdin:
        proc = subprocess.run(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    if log:
        with open(log, "w") as f:
            f.write(proc.stdout)
    if proc.returncode != 0:
        sys.exit(f"bench_cost_model: {' '.join(cmd)} failed ({proc.returncode}):\n"
                 f"{proc.stdout[-3000:]}")
    return proc.stdout


def read_csv(path):
    with open(path) as f:
        return [dict(r) for r in csv.DictReader(f)]


def hkfac_run(args, name, extra, samples, per_seed_runs):
    """One hkfac configuration, once per seed; returns the per-epoch median over seeds (the
    validation loss is heavy-tailed: one mispredicted held-out schedule can dominate a run) and
    keeps the per-seed rows in per_seed_runs[name]."""
    per_seed = [hkfac_run_seed(args, f"{name}_seed{seed}", extra, samples, seed)
                for seed in args.seeds]
    per_seed_runs[name] = per_seed
    return median_rows(per_seed)


def median_rows(per_seed):
    """Per epoch: the median over seeds of the losses and accuracy, the mean of the seconds."""
    epochs = min(len(r) for r in per_seed)
    rows = []
    for e in range(epochs):
        at = [r[e] for r in per_seed]
        rows.append({"epoch": at[0]["epoch"],
                     "seconds": statistics.mean(x["seconds"] for x in at),
                     **{k: statistics.median(x[k] for x in at)
                        for k in ("train_loss", "val_loss", "val_acc")}})
    return rows


def hkfac_run_seed(args, name, extra, samples, seed):
    out_csv = os.path.join(args.out, f"{name}.csv")
    cmd = [args.retrain, f"--epochs={args.epochs}", f"--num_cores={args.num_cores}",
           "--randomize_weights", f"--seed={seed}", f"--csv={out_csv}",
           f"--validation={args.validation}", f"--samples={samples}",
           f"--weights_out={os.path.join(args.out, name + '.weights')}",
           f"--max_seconds={args.max_seconds}"] + extra
    t0 = time.time()
    run(cmd, log=os.path.join(args.out, f"{name}.log"))
    rows = read_csv(out_csv)
    print(f"  {name}: {len(rows) - 1} epochs in {time.time() - t0:.0f} s", flush=True)
    return [{"epoch": int(r["epoch"]), "seconds": float(r["seconds"]),
             "train_loss": float(r["train_loss"]), "val_loss": float(r["validation_loss"]),
             "val_acc": float(r["validation_accuracy"])} for r in rows]


LOSS_LINE = re.compile(r"^Loss:\s*(\S+)\s+Rate:\s*(\S+)\s+(\S+)")


def halide_run(args, name, rate, train_list, val_list):
    weights = os.path.join(args.out, f"{name}.weights")
    cmd = [HALIDE_RETRAIN, f"--epochs={args.epochs}", f"--rates={rate}", "--randomize_weights=1",
           f"--weights_out={weights}", f"--num_cores={args.num_cores}",
           f"--best_benchmark={os.path.join(args.out, name + '.best.txt')}",
           f"--best_schedule={os.path.join(args.out, name + '.best.h')}"]
    rows = []
    t0 = time.time()
    with open(train_list) as stdin:
        proc = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        log = []
        for line in proc.stdout:
            log.append(line)
            m = LOSS_LINE.match(line)
            if m:
                rows.append({"epoch": len(rows) + 1, "seconds": time.time() - t0,
                             "train_loss": float(m.group(1)), "train_acc": float(m.group(2))})
        proc.wait()
    with open(os.path.join(args.out, f"{name}.log"), "w") as f:
        f.writelines(log)
    if proc.returncode != 0:
        sys.exit(f"bench_cost_model: Halide's retrain_cost_model failed, see {name}.log")
    # Score the final weights on our validation schedules: rate 0 changes nothing.
    text = run([HALIDE_RETRAIN, "--epochs=1", "--rates=0", f"--initial_weights={weights}",
                f"--weights_out={os.path.join(args.out, name + '.eval.weights')}",
                f"--num_cores={args.num_cores}",
                f"--best_benchmark={os.path.join(args.out, name + '.eval.best.txt')}",
                f"--best_schedule={os.path.join(args.out, name + '.eval.best.h')}"],
               stdin_path=val_list, log=os.path.join(args.out, f"{name}.eval.log"))
    m = [LOSS_LINE.match(l) for l in text.splitlines()]
    m = [x for x in m if x]
    final = {"val_loss": float(m[-1].group(1)), "val_acc": float(m[-1].group(2))} if m else {}
    print(f"  {name}: {len(rows)} epochs in {time.time() - t0:.0f} s", flush=True)
    return rows, final


def first_reaching(rows, target):
    for r in rows:
        if r["epoch"] > 0 and r["val_loss"] <= target:
            return r
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", required=True, help="directory searched for *.sample")
    p.add_argument("--build", default="build", help="hkfac build directory")
    p.add_argument("--out", default="build/bench_cost_model")
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--max-seconds", dest="max_seconds", type=float, default=0)
    p.add_argument("--adam-rates", default="0.0003,0.001,0.003,0.01")
    p.add_argument("--halide-rates", default="0.0001,0.001,0.01",
                   help="Halide's tool: 1e-4 (its default) and enough others to find its best")
    p.add_argument("--validation", default="pipelines")
    p.add_argument("--num-cores", dest="num_cores", type=int, default=2)
    p.add_argument("--seeds", default=",".join(str(s) for s in range(1, 13)),
                   help="hkfac runs: one per seed (initial weights and batch order); the table "
                        "and the criterion use the per-epoch median")
    p.add_argument("--group-size", dest="group_size", type=int, default=3,
                   help="also read the criterion on consecutive groups of this many seeds (0: not)")
    p.add_argument("--kfac-flags", dest="kfac_flags",
                   default="--kfac_rate=0.1 --kfac_final_rate=0.001 --kfac_momentum=0.9 "
                           "--kfac_norm_constraint=0.01",
                   help="retrain_cost_model flags of the K-FAC run the criterion is judged on "
                        "(the tool's conservative defaults run too, as their own row)")
    p.add_argument("--no-halide", action="store_true")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()
    args.seeds = [int(x) for x in args.seeds.split(",")]
    args.retrain = os.path.join(args.build, "apps/tools/retrain_cost_model")
    os.makedirs(args.out, exist_ok=True)

    samples = sorted(os.path.abspath(os.path.join(d, f))
                     for d, _, fs in os.walk(args.samples, followlinks=True)
                     for f in fs if f.endswith(".sample"))
    if not samples:
        sys.exit(f"bench_cost_model: no .sample files under {args.samples}")
    all_list = os.path.join(args.out, "samples.txt")
    with open(all_list, "w") as f:
        f.write("\n".join(samples) + "\n")
    print(f"bench_cost_model: {len(samples)} samples, {args.epochs} epochs, validation "
          f"{args.validation}, seeds {args.seeds}; 'hkfac K-FAC' is {args.kfac_flags}",
          flush=True)

    results, per_seed = {}, {}
    results["hkfac K-FAC (tool defaults)"] = hkfac_run(args, "kfac_defaults", ["--optimizer=kfac"],
                                                      all_list, per_seed)
    results["hkfac K-FAC"] = hkfac_run(args, "kfac", ["--optimizer=kfac"] + args.kfac_flags.split(),
                                       all_list, per_seed)
    for rate in args.adam_rates.split(","):
        results[f"hkfac Adam {rate}"] = hkfac_run(args, f"adam_{rate}",
                                                  ["--optimizer=adam", f"--rates={rate}"],
                                                  all_list, per_seed)
    halide = {}
    if not args.no_halide and os.path.exists(HALIDE_RETRAIN):
        # The split: what our tool marks as training / validation.
        split_file = os.path.join(args.out, "split.csv")
        run([args.retrain, "--epochs=0", "--randomize_weights", f"--samples={all_list}",
             f"--validation={args.validation}", f"--predictions_file={split_file}",
             f"--weights_out={os.path.join(args.out, 'split.weights')}",
             f"--num_cores={args.num_cores}"])
        train_paths, val_paths = [], []
        for r in read_csv(split_file):
            (val_paths if r["split"] == "validation" else train_paths).append(r["path"])
        train_list = os.path.join(args.out, "train.txt")
        val_list = os.path.join(args.out, "validation.txt")
        with open(train_list, "w") as f:
            f.write("\n".join(train_paths) + "\n")
        with open(val_list, "w") as f:
            f.write("\n".join(val_paths) + "\n")
        for rate in args.halide_rates.split(","):
            halide[rate] = halide_run(args, f"halide_{rate}", rate, train_list, val_list)

    adam = {k: v for k, v in results.items() if k.startswith("hkfac Adam")}
    best_adam = min(adam, key=lambda k: adam[k][-1]["val_loss"])
    target = adam[best_adam][-1]["val_loss"]
    kfac = results["hkfac K-FAC"]
    hit = first_reaching(kfac, target)
    bar = "|" if args.markdown else " "
    print()
    # The criterion's target is reached by Adam itself too, usually well before its last epoch:
    # the column shows when each run first gets there, so a plateau is not mistaken for speed.
    print(f"{bar} run {bar} epochs {bar} seconds {bar} final validation loss {bar} "
          f"validation ordering accuracy {bar} best validation loss {bar} first epoch (s) at "
          f"<= {target:.4f} {bar}")
    if args.markdown:
        print("|---|---:|---:|---:|---:|---:|---:|")
    for name, rows in results.items():
        last = rows[-1]
        best = min(r["val_loss"] for r in rows)
        first = first_reaching(rows, target)
        reached = f"{first['epoch']} ({first['seconds']:.1f})" if first else "-"
        print(f"{bar} {name} {bar} {last['epoch']} {bar} {last['seconds']:.1f} {bar} "
              f"{last['val_loss']:.4f} {bar} {last['val_acc']:.3f} {bar} {best:.4f} {bar} "
              f"{reached} {bar}")
    for rate, (rows, final) in halide.items():
        last = rows[-1] if rows else {"epoch": 0, "seconds": 0, "train_loss": float("nan"),
                                      "train_acc": float("nan")}
        print(f"{bar} Halide 14 retrain_cost_model (Adam {rate}; its own network and loss "
              f"scale; training loss {last['train_loss']:.4f}, training rate "
              f"{last['train_acc']:.3f}) {bar} {last['epoch']} {bar} {last['seconds']:.1f} {bar} "
              f"{final.get('val_loss', float('nan')):.4f} {bar} "
              f"{final.get('val_acc', float('nan')):.3f} {bar} - {bar} - {bar}")
    if halide:
        print("\nHalide's validation figures come from a rate-0 pass of its tool over our "
              "validation schedules; it prints nan when those give it no pipeline batch to score.")
    print()
    adam_rows = adam[best_adam]
    adam_last = adam_rows[-1]
    if hit:
        print(f"K-FAC reaches {best_adam}'s final validation loss {target:.4f} (after "
              f"{adam_last['epoch']} epochs, {adam_last['seconds']:.1f} s) at epoch {hit['epoch']} "
              f"({hit['seconds']:.1f} s): epoch ratio {hit['epoch'] / adam_last['epoch']:.2f}, "
              f"time ratio {hit['seconds'] / adam_last['seconds']:.2f} (targets 0.25, 0.5)")
    else:
        print(f"K-FAC does not reach {best_adam}'s final validation loss {target:.4f} within "
              f"{kfac[-1]['epoch']} epochs (its best: {min(r['val_loss'] for r in kfac):.4f})")
    # The same criterion on consecutive groups of seeds, each group's medians on their own: how
    # much of the result the particular seeds make.
    g = args.group_size
    if g > 0 and len(args.seeds) >= 2 * g:
        print(f"\nBy groups of {g} seeds (each group's own medians and best Adam rate):")
        for first in range(0, len(args.seeds) - g + 1, g):
            seeds = args.seeds[first:first + g]
            group = {name: median_rows(runs[first:first + g]) for name, runs in per_seed.items()}
            adams = [f"adam_{rate}" for rate in args.adam_rates.split(",")]
            best = min(adams, key=lambda k: group[k][-1]["val_loss"])
            last = group[best][-1]
            reached = first_reaching(group["kfac"], last["val_loss"])
            label = f"  seeds {seeds[0]}-{seeds[-1]}: best {best} final {last['val_loss']:.4f}"
            if reached:
                print(f"{label}; K-FAC at epoch {reached['epoch']} ({reached['seconds']:.2f} s "
                      f"against {last['seconds']:.2f}): epoch ratio "
                      f"{reached['epoch'] / last['epoch']:.2f}, time ratio "
                      f"{reached['seconds'] / last['seconds']:.2f}")
            else:
                print(f"{label}; K-FAC does not reach it")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing (scripts/setup --bench installs it): no plot")
        return
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for name, rows in results.items():
        e = [r["epoch"] for r in rows]
        axes[0].plot(e, [r["val_loss"] for r in rows], label=name)
        axes[1].plot([r["seconds"] for r in rows], [r["val_loss"] for r in rows], label=name)
        axes[2].plot(e, [r["val_acc"] for r in rows], label=name)
    axes[0].set(xlabel="epoch", ylabel="validation loss (L_rel per schedule)", yscale="log")
    axes[1].set(xlabel="training seconds", ylabel="validation loss", yscale="log")
    axes[2].set(xlabel="epoch", ylabel="validation ordering accuracy (pairs > 1.3x apart)")
    for a in axes:
        a.grid(alpha=0.3)
    axes[2].legend(fontsize=8)
    fig.suptitle(f"Cost-model training, {len(samples)} samples, validation={args.validation}")
    fig.tight_layout()
    png = os.path.join(args.out, "curves.png")
    fig.savefig(png, dpi=90)
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
