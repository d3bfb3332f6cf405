#!/usr/bin/env python3
"""Trains the shipped cost-model weights: baseline.weights on every sample, and one
<app>.weights per evaluation app trained with that app held out (--validation=app:NAME), so the
autoscheduler can be judged on an app with weights that never saw it.

Every run uses the same optimizer, epoch count and seeds; the epoch count is fixed in advance
(from the benchmark on the 'pipelines' split), never chosen by the held-out app's loss. With
--seeds K each file is trained from K random starts and keeps the one with the lowest loss on its
own training samples: a start can leave K-FAC on a plateau (training accuracy 0.66 where other
starts reach 0.75), and the training loss shows it without looking at the held-out app. With
--initial-weights DIR every file starts instead from the file of its own name in DIR (the
previous round's: an app's hold-out file never saw that app, so neither does the new one), as a
learning loop continues its model; the seeds then vary only the order of the batches. With
--bag F the files train on a random fraction F of the pipelines that are not apps (every app's
samples but the held-out app's stay), drawn from --seed: members of an ensemble
(HL_WEIGHTS_DIR=a:b:c) that saw different data, so that their extrapolations differ and a median
outvotes them. Prints a
markdown table of what each file is (data, epochs, seconds, seed, held-out ordering accuracy and
loss) and writes it to records.md in --log-dir.

  train_weights.py --samples build-data/ds1 --build build --out weights --epochs 30 --seeds 4
"""
import argparse
import concurrent.futures
import csv
import math
import os
import platform
import random
import shutil
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


def train_seed(args, name, validation, sample_list, seed):
    """One retrain_cost_model run; returns (first CSV row, last CSV row, seconds, seed)."""
    tag = f"{name}.seed{seed}"
    out_csv = os.path.join(args.out_log, f"{tag}.csv")
    weights = os.path.join(args.out_log, f"{tag}.weights")
    start = (f"--initial_weights={os.path.join(args.initial_weights, name + '.weights')}"
             if args.initial_weights else "--randomize_weights")
    cmd = [args.retrain, f"--epochs={args.epochs}", f"--num_cores={args.num_cores}",
           start, f"--seed={seed}", f"--optimizer={args.optimizer}",
           f"--validation={validation}", f"--samples={sample_list}", f"--csv={out_csv}",
           f"--weights_out={weights}"] + args.extra
    t0 = time.time()
    with open(os.path.join(args.out_log, f"{tag}.log"), "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
    secs = time.time() - t0
    if proc.returncode != 0:
        # A diverged start is one bad draw, not a failed file: the other starts may stand.
        return None, None, secs, seed
    rows = read_csv(out_csv)
    return rows[0], rows[-1], secs, seed


def submit(args, pool, name, validation, sample_list):
    """Queues every seed of file `name`; --jobs runs the queue's runs, of all files, side by side."""
    return [pool.submit(train_seed, args, name, validation, sample_list, s) for s in args.seed_list]


def finish(args, name, futures, out_dir=None):
    """Waits for `name`'s seeds, keeps the lowest final training loss as name.weights in out_dir
    (default --out), with its CSV and log as name.csv, name.log in the log directory; returns
    (first, last, seconds, seed, losses)."""
    runs = {r[3]: r for r in (f.result() for f in futures)}
    losses = {s: float(r[1]["train_loss"]) if r[1] is not None else None for s, r in runs.items()}
    finite = [s for s, l in losses.items() if l is not None and math.isfinite(l)]
    if not finite:
        logs = ", ".join(os.path.join(args.out_log, f"{name}.seed{s}.log") for s in args.seed_list)
        sys.exit(f"train_weights: {name} failed from every seed, see {logs}")
    seed = min(finite, key=losses.get)
    first, last = runs[seed][0], runs[seed][1]
    for ext in ("csv", "log"):
        shutil.copyfile(os.path.join(args.out_log, f"{name}.seed{seed}.{ext}"),
                        os.path.join(args.out_log, f"{name}.{ext}"))
    shutil.copyfile(os.path.join(args.out_log, f"{name}.seed{seed}.weights"),
                    os.path.join(out_dir or args.out, f"{name}.weights"))
    return first, last, sum(r[2] for r in runs.values()), seed, losses


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", required=True, help="generate_data output directory")
    p.add_argument("--build", default="build", help="hkfac build directory")
    p.add_argument("--out", default="weights", help="where the .weights files go")
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--optimizer", default="kfac")
    p.add_argument("--seed", type=int, default=1, help="first seed")
    p.add_argument("--seeds", type=int, default=1,
                   help="random starts per file (seeds SEED..SEED+K-1); the lowest final "
                        "training loss is kept")
    p.add_argument("--jobs", type=int, default=1,
                   help="training runs at a time, of every file and seed")
    p.add_argument("--pipelines-split", dest="pipelines_split", action="store_true",
                   help="also train pipelines_split.weights (into --log-dir) holding out a fixed "
                        "fifth of the pipelines: ordering accuracy on pipelines never seen")
    p.add_argument("--num-cores", dest="num_cores", type=int, default=2,
                   help="cores of the machine that benchmarked the samples")
    p.add_argument("--log-dir", dest="log_dir", default="",
                   help="per-run logs, CSVs and records.md (default: BUILD/train_weights)")
    p.add_argument("--apps", default="",
                   help="comma-separated apps to hold out (default: every sample directory "
                        "that is not a random pipeline)")
    p.add_argument("--initial-weights", dest="initial_weights", default="",
                   help="start every file from DIR/<file>.weights (baseline, each app's, "
                        "pipelines_split) instead of random weights")
    p.add_argument("--bag", type=float, default=1.0,
                   help="train on this fraction of the pipelines that are not apps, drawn "
                        "from --seed (0 < F <= 1; the apps' samples all stay): ensemble "
                        "members on different data")
    p.add_argument("extra", nargs="*", help="more retrain_cost_model flags (after --)")
    args = p.parse_args()
    if not 0 < args.bag <= 1:
        sys.exit(f"train_weights: --bag must be in (0, 1], got {args.bag}")
    if args.seeds < 1 or args.jobs < 1:
        sys.exit(f"train_weights: --seeds and --jobs must be >= 1, got {args.seeds} and "
                 f"{args.jobs}")
    args.seed_list = list(range(args.seed, args.seed + args.seeds))
    args.retrain = os.path.join(args.build, "apps/tools/retrain_cost_model")
    if not os.access(args.retrain, os.X_OK):
        sys.exit(f"train_weights: no retrain_cost_model at {args.retrain} (build first)")
    os.makedirs(args.out, exist_ok=True)
    args.out_log = args.log_dir or os.path.join(args.build, "train_weights")
    os.makedirs(args.out_log, exist_ok=True)

    samples = sample_paths(args.samples)
    if not samples:
        sys.exit(f"train_weights: no .sample files under {args.samples}")
    pipelines = {}
    for s in samples:
        pipelines.setdefault(pipeline_of(s, args.samples), []).append(s)
    apps = ([a for a in args.apps.split(",") if a] if args.apps else
            sorted(n for n in pipelines if not n.startswith("random_pipeline")))
    for a in apps:
        if a not in pipelines:
            sys.exit(f"train_weights: no samples for app '{a}' under {args.samples}")
    # A bag of the pipelines that are not apps; sorted first, so the seed alone decides it.
    others = sorted(n for n in pipelines if n not in apps)
    if args.bag < 1 and others:
        for n in set(others) - set(random.Random(args.seed).sample(
                others, max(1, round(args.bag * len(others))))):
            del pipelines[n]
        samples = [s for s in samples if pipeline_of(s, args.samples) in pipelines]
    sample_list = os.path.join(args.out_log, "samples.txt")
    with open(sample_list, "w") as f:
        f.write("\n".join(samples) + "\n")
    if args.initial_weights:
        names = ["baseline"] + apps + (["pipelines_split"] if args.pipelines_split else [])
        missing = [n for n in names
                   if not os.path.isfile(os.path.join(args.initial_weights, f"{n}.weights"))]
        if missing:
            sys.exit(f"train_weights: --initial-weights {args.initial_weights} has no "
                     f"{', '.join(m + '.weights' for m in missing)}")
    n_random = sum(1 for n in pipelines if n.startswith("random_pipeline"))
    print(f"train_weights: {len(samples)} samples over {len(pipelines)} pipelines "
          f"({len(pipelines) - n_random} apps, {n_random} random); {args.optimizer}, "
          f"{args.epochs} epochs, seeds {args.seed_list[0]}-{args.seed_list[-1]}", flush=True)

    lines = [f"Trained {time.strftime('%Y-%m-%d')} on {cpu_name()} ({args.num_cores} cores) by "
             f"`apps/tools/train_weights.py --epochs {args.epochs} --optimizer {args.optimizer} "
             f"--seed {args.seed} --seeds {args.seeds}"
             f"{' --initial-weights ' + args.initial_weights if args.initial_weights else ''}"
             f"{f' --bag {args.bag:g}' if args.bag < 1 else ''}"
             f"{' -- ' + ' '.join(args.extra) if args.extra else ''}`: "
             f"{len(samples)} samples over {len(pipelines)} pipelines. Target: CPU, S = 39.",
             "",
             "| file | trained on | held out | epochs | seconds (all starts) | seed (training loss "
             "of each) | held-out ordering accuracy (pairs) | held-out top regret | held-out loss "
             "(at start) | training accuracy |",
             "|---|---|---|---:|---:|---|---:|---:|---:|---:|"]

    def row(name, held, first, last, secs, seed, losses):
        pairs = int(float(last["validation_pairs"]))
        acc = f"{float(last['validation_accuracy']):.3f} ({pairs})" if pairs else "-"
        regret = (f"{float(last['validation_top_regret']):.3f}x"
                  if pairs and "validation_top_regret" in last else "-")
        loss = (f"{float(last['validation_loss']):.4f} ({float(first['validation_loss']):.4f})"
                if held != "-" else "-")
        n_held = len(pipelines.get(held, []))
        trained = (f"{len(samples) - n_held} samples" if name != "pipelines_split" else
                   "the other four fifths")
        each = ", ".join(f"{s}: {l:.4f}" if l is not None and math.isfinite(l) else f"{s}: failed"
                         for s, l in losses.items())
        lines.append(f"| `{name}.weights` | {trained} | {held} | {last['epoch']} | {secs:.0f} | "
                     f"{seed} ({each}) | {acc} | {regret} | {loss} | {float(last['train_accuracy']):.3f} |")
        print(lines[-1], flush=True)

    # (file, held out, --validation, where the file goes)
    files = [("baseline", "-", "none", None)] + [(app, app, f"app:{app}", None) for app in apps]
    if args.pipelines_split:
        files.append(("pipelines_split", "a fifth of the pipelines", "pipelines", args.out_log))
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        queued = [(name, held, out_dir, submit(args, pool, name, validation, sample_list))
                  for name, held, validation, out_dir in files]
        try:
            for name, held, out_dir, futures in queued:
                row(name, held, *finish(args, name, futures, out_dir))
        except SystemExit:
            pool.shutdown(wait=True, cancel_futures=True)  # the runs not yet started
            raise
    with open(os.path.join(args.out_log, "records.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"\nrecords: {os.path.join(args.out_log, 'records.md')}")


if __name__ == "__main__":
    main()
