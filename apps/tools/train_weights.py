#!/usr/bin/env python3
"""Trains the shipped cost-model weights: baseline.weights on every sample, and one
<app>.weights per evaluation app trained with that app held out (--validation=app:NAME), so the
autoscheduler can be judged on an app with weights that never saw it.

Every run uses the same optimizer, epoch count and seed; the epoch count is fixed in advance
(from the benchmark on the 'pipelines' split), never chosen by the held-out app's loss. Prints a
markdown table of what each file is (data, epochs, seconds, held-out ordering accuracy and loss)
and writes it to records.md in --log-dir.

  train_weights.py --samples build-data/ds1 --build build --out weights --epochs 30
"""
import argparse
import csv
import os
import platform
import subprocess
import sys
import time


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def sample_paths(root):
    return sorted(os.path.abspath(os.path.join(d, f)) for d, _, fs in os.walk(root, followlinks=True)
                  for f in fs if f.endswith(".sample"))


def pipeline_of(path, root):
    # generate_data's layout: ROOT/<pipeline>/<pipeline>_s<k>/<fn>.sample
    return os.path.relpath(path, root).split(os.sep)[0]


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def train(args, name, validation, sample_list):
    out_csv = os.path.join(args.out_log, f"{name}.csv")
    weights = os.path.join(args.out, f"{name}.weights")
    cmd = [args.retrain, f"--epochs={args.epochs}", f"--num_cores={args.num_cores}",
           "--randomize_weights", f"--seed={args.seed}", f"--optimizer={args.optimizer}",
           f"--validation={validation}", f"--samples={sample_list}", f"--csv={out_csv}",
           f"--weights_out={weights}"] + args.extra
    t0 = time.time()
    with open(os.path.join(args.out_log, f"{name}.log"), "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        sys.exit(f"train_weights: {name} failed (exit {proc.returncode}), see "
                 f"{os.path.join(args.out_log, name + '.log')}")
    rows = read_csv(out_csv)
    return rows[0], rows[-1], time.time() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", required=True, help="generate_data output directory")
    p.add_argument("--build", default="build", help="hkfac build directory")
    p.add_argument("--out", default="weights", help="where the .weights files go")
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--optimizer", default="kfac")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--num-cores", dest="num_cores", type=int, default=2,
                   help="cores of the machine that benchmarked the samples")
    p.add_argument("--log-dir", dest="log_dir", default="",
                   help="per-run logs, CSVs and records.md (default: BUILD/train_weights)")
    p.add_argument("--apps", default="",
                   help="comma-separated apps to hold out (default: every sample directory "
                        "that is not a random pipeline)")
    p.add_argument("extra", nargs="*", help="more retrain_cost_model flags (after --)")
    args = p.parse_args()
    args.retrain = os.path.join(args.build, "apps/tools/retrain_cost_model")
    if not os.access(args.retrain, os.X_OK):
        sys.exit(f"train_weights: no retrain_cost_model at {args.retrain} (build first)")
    os.makedirs(args.out, exist_ok=True)
    args.out_log = args.log_dir or os.path.join(args.build, "train_weights")
    os.makedirs(args.out_log, exist_ok=True)

    samples = sample_paths(args.samples)
    if not samples:
        sys.exit(f"train_weights: no .sample files under {args.samples}")
    sample_list = os.path.join(args.out_log, "samples.txt")
    with open(sample_list, "w") as f:
        f.write("\n".join(samples) + "\n")
    pipelines = {}
    for s in samples:
        pipelines.setdefault(pipeline_of(s, args.samples), []).append(s)
    apps = ([a for a in args.apps.split(",") if a] if args.apps else
            sorted(n for n in pipelines if not n.startswith("random_pipeline")))
    for a in apps:
        if a not in pipelines:
            sys.exit(f"train_weights: no samples for app '{a}' under {args.samples}")
    n_random = sum(1 for n in pipelines if n.startswith("random_pipeline"))
    print(f"train_weights: {len(samples)} samples over {len(pipelines)} pipelines "
          f"({len(pipelines) - n_random} apps, {n_random} random); {args.optimizer}, "
          f"{args.epochs} epochs, seed {args.seed}", flush=True)

    lines = [f"Trained {time.strftime('%Y-%m-%d')} on {cpu_name()} ({args.num_cores} cores) by "
             f"`apps/tools/train_weights.py --epochs {args.epochs} --optimizer {args.optimizer} "
             f"--seed {args.seed}{' -- ' + ' '.join(args.extra) if args.extra else ''}`: "
             f"{len(samples)} samples over {len(pipelines)} pipelines. Target: CPU, S = 39.",
             "",
             "| file | trained on | held out | epochs | seconds | held-out ordering accuracy "
             "(pairs) | held-out loss (at start) | training accuracy |",
             "|---|---|---|---:|---:|---:|---:|---:|"]

    def row(name, held, first, last, secs):
        pairs = int(float(last["validation_pairs"]))
        acc = f"{float(last['validation_accuracy']):.3f} ({pairs})" if pairs else "-"
        loss = (f"{float(last['validation_loss']):.4f} ({float(first['validation_loss']):.4f})"
                if held != "-" else "-")
        n_held = len(pipelines.get(held, []))
        trained = f"{len(samples) - n_held} samples"
        lines.append(f"| `{name}.weights` | {trained} | {held} | {last['epoch']} | {secs:.0f} | "
                     f"{acc} | {loss} | {float(last['train_accuracy']):.3f} |")
        print(lines[-1], flush=True)

    first, last, secs = train(args, "baseline", "none", sample_list)
    row("baseline", "-", first, last, secs)
    for app in apps:
        first, last, secs = train(args, app, f"app:{app}", sample_list)
        row(app, app, first, last, secs)
    with open(os.path.join(args.out_log, "records.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"\nrecords: {os.path.join(args.out_log, 'records.md')}")


if __name__ == "__main__":
    main()
