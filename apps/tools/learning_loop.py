#!/usr/bin/env python3
"""The learning loop: rounds of search, benchmark and retraining that improve Hkfac's weights.

Each round
  1. searches new schedules with the previous round's weights plus random dropout (the first
     round, with no weights yet, searches with a random cost model per schedule): --random-per-round
     new random pipelines and, if --app-schedules, more schedules of every app (with
     --app-weights holdout, each app by the previous round's file that never saw it, as the bench
     bed searches it); with --rollout every search ends with the rollout search, so that the
     round times what the weights rate best, where their errors cost the most;
  2. benchmarks every new schedule and adds its sample (apps/tools/generate_data.py);
  3. retrains with K-FAC on all samples so far (apps/tools/train_weights.py): baseline.weights
     and one hold-one-out file per app, each the best of --train-seeds starts by training loss,
     and one more file, trained the same way, that holds out a fixed fifth of the pipelines
     (mostly random ones) to measure ordering accuracy and top regret on pipelines never seen
     (--pipelines-split);
     With --warm-start RATE, every round after the first starts each file from the previous
     round's file of the same name (an app's hold-out file from its own, which never saw it) at
     K-FAC rate RATE instead of from random weights: as the data grows, random starts can all
     stall where the previous model continues;
  4. optionally (--bench) runs the schedule bench bed with the round's hold-one-out weights;
and appends what it measured to WORK/loop.json and WORK/loop.md.

Every step resumes where it stopped: samples already made are skipped, a round's training is
redone only if its records are missing, a finished round is never rerun. Stop it at any point
(Ctrl-C) and run the same command again.

  learning_loop.py --work build/loop --rounds 3 --random-per-round 60 --epochs 40 \\
      -- --kfac_rate=0.1 --kfac_final_rate=0.001 --kfac_momentum=0.9 --kfac_norm_constraint=0.01
"""
import argparse
import csv
import glob
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OTHER_SCHEDULERS = ("Adams2019", "Mullapudi2016", "Li2018")


def log(msg):
    print(time.strftime("[%H:%M:%S] ") + msg, flush=True)


def run(cmd, logfile, ok=(0,)):
    """Runs one step, its output to `logfile`; a failure ends the loop with the log's name."""
    with open(logfile, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode not in ok:
        sys.exit(f"learning_loop: '{os.path.basename(cmd[1])}' exited {proc.returncode}; "
                 f"see {logfile}")
    return proc.returncode


def generate(cmd, logfile, tries=4):
    """Runs generate_data.py; exit 1 (some schedules failed, marked) is part of the data, exit 3
    (some benchmarks met a busy host and were left untimed) is run again, which times them."""
    for _ in range(tries):
        if run(cmd, logfile, (0, 1, 3)) != 3:
            return
    log(f"some schedules are still untimed after {tries} runs (the host stays busy); this "
        f"round goes on without them, see {logfile}")


def samples_under(d):
    return sorted(glob.glob(os.path.join(d, "*", "*", "*.sample")))


def pooled_validation(csvs):
    """From each run's last CSV row: pairs ordered right over all pairs, and the geometric mean
    of the runs' top regret (the held-out pick's runtime over the fastest, retrain_cost_model)."""
    right = pairs = 0.0
    log_regrets = []
    for path in csvs:
        with open(path) as f:
            rows = list(csv.DictReader(f))
        if not rows:
            continue
        n = float(rows[-1]["validation_pairs"])
        right += float(rows[-1]["validation_accuracy"]) * n
        pairs += n
        regret = rows[-1].get("validation_top_regret", "")
        if regret:
            log_regrets.append(math.log(float(regret)))
    regret = math.exp(sum(log_regrets) / len(log_regrets)) if log_regrets else None
    return (right / pairs if pairs else None), int(pairs), regret


def bench_summary(path):
    """Hkfac's geomean runtime ratio to the per-app best of Halide's three, and the worst app."""
    with open(path) as f:
        bed = json.load(f)
    ratios = {}
    for app, variants in bed.items():
        med = {}
        for v in variants:
            if v["verified"] == "agree" and v["times_ms"]:
                t = sorted(v["times_ms"])
                med[v["scheduler"]] = t[len(t) // 2]
        best = [med[s] for s in OTHER_SCHEDULERS if s in med]
        if "Hkfac" in med and best:
            ratios[app] = med["Hkfac"] / min(best)
    if not ratios:
        return None
    geo = math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios))
    worst = max(ratios, key=ratios.get)
    return {"geomean_to_best": geo, "apps": len(ratios), "worst_app": worst,
            "worst_ratio": ratios[worst], "per_app": ratios}


def fmt(v):
    return "-" if v is None else f"{v:.3f}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", required=True, help="loop directory (samples, rounds, log)")
    p.add_argument("--rounds", type=int, required=True, help="rounds to have done in total")
    p.add_argument("--build", default="build")
    p.add_argument("--random-per-round", type=int, default=50, help="new random pipelines")
    p.add_argument("--first-seed", type=int, default=0, help="first random pipeline seed")
    p.add_argument("--schedules", type=int, default=8, help="schedules per random pipeline")
    p.add_argument("--stages", default="4:10", help="LO:HI stage counts of random pipelines")
    p.add_argument("--app-schedules", type=int, default=4,
                   help="new schedules of every app per round (0: random pipelines only)")
    p.add_argument("--apps", default="", help="comma-separated apps (default: all built)")
    p.add_argument("--app-weights", dest="app_weights", choices=("baseline", "holdout"),
                   default="baseline",
                   help="which of the previous round's files searches an app: baseline.weights, "
                        "or the app's hold-out file (what the bench bed searches with)")
    p.add_argument("--rollout", action="store_true",
                   help="every search ends with the rollout search (generate_data.py --rollout)")
    p.add_argument("--initial-weights", help="weights for the first round's search "
                   "(default: a random cost model per schedule)")
    p.add_argument("--placements", default="all;inline,tile,task,slide,nest,reorder,rsplit",
                   help="generate_data.py --placements for the greedy searches ('' for none)")
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--train-seeds", dest="train_seeds", type=int, default=4,
                   help="random starts per weights file; the lowest training loss is kept")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--max-foreign-load", dest="max_foreign_load", type=float, default=0.25,
                   help="generate_data.py --max-foreign-load: most cores of other work beside a "
                        "benchmark (inf: no check)")
    p.add_argument("--retain-freed-memory", dest="retain_freed_memory", action="store_true",
                   help="generate_data.py (and the bench bed) time with freed memory kept in the "
                        "heap (docs/data.md, 'The allocator')")
    p.add_argument("--bench", action="store_true",
                   help="run the bench bed each round (every app under every scheduler: slow)")
    p.add_argument("--bench-beam", type=int, default=32, help="Hkfac's beam in the bench bed")
    p.add_argument("--warm-start", dest="warm_start", type=float, default=0,
                   help="K-FAC rate for rounds after the first, which then start from the "
                        "previous round's files (0: every round from random weights)")
    p.add_argument("extra", nargs="*", help="retrain_cost_model flags for training (after --)")
    args = p.parse_args()

    build = os.path.abspath(args.build)
    plugin = os.path.join(build, "autoscheduler_plugin", "libautoschedule_hkfac.so")
    generator = os.path.join(build, "apps", "random_pipeline", "hkfac_random_pipeline")
    for path in (plugin, generator, os.path.join(build, "apps/tools/retrain_cost_model")):
        if not os.path.exists(path):
            sys.exit(f"learning_loop: {path} is missing (build the project first)")
    apps = [a for a in args.apps.split(",") if a] or sorted(
        os.path.basename(x)[len("hkfac_pipeline_"):]
        for x in glob.glob(os.path.join(build, "apps", "pipelines", "hkfac_pipeline_*"))
        if os.access(x, os.X_OK))
    work = os.path.abspath(args.work)
    samples = os.path.join(work, "samples")
    os.makedirs(samples, exist_ok=True)
    state_path = os.path.join(work, "loop.json")
    state = {"rounds": []}
    if os.path.exists(state_path):
        with open(state_path) as f:
            state = json.load(f)

    for r in range(len(state["rounds"]), args.rounds):
        rdir = os.path.join(work, f"round{r}")
        os.makedirs(rdir, exist_ok=True)
        logfile = os.path.join(rdir, "steps.log")
        t0 = time.time()
        before = len(samples_under(samples))
        prev = (os.path.join(work, f"round{r - 1}", "baseline.weights") if r > 0
                else args.initial_weights)
        seeds = f"{args.first_seed + r * args.random_per_round}:{args.random_per_round}"
        log(f"round {r}: searching with {prev or 'random cost models'}; random seeds {seeds}")

        # Checked before any search, so that a missing file costs no generation.
        holdout = {a: os.path.join(work, f"round{r - 1}", f"{a}.weights") for a in apps}
        by_holdout = bool(args.app_schedules and prev and args.app_weights == "holdout")
        for a in apps if by_holdout else []:
            if not os.path.exists(holdout[a]):
                sys.exit(f"learning_loop: --app-weights holdout: {holdout[a]} is missing "
                         f"(round {r - 1} had no samples of {a} to hold out)")

        gen = [sys.executable, os.path.join(HERE, "generate_data.py"), "--out", samples,
               "--scheduler", "Hkfac", "--plugin", plugin, "--random-generator", generator,
               "--jobs", str(args.jobs), "--max-foreign-load", str(args.max_foreign_load)]
        gen += ["--retain-freed-memory"] if args.retain_freed_memory else []
        gen += ["--rollout"] if args.rollout else []
        if args.placements:
            gen += ["--placements", args.placements]
        # With weights: one full-beam schedule per pipeline and round, the rest greedy with
        # dropout. Without: greedy searches, each under its own random model.
        searched = ["--full-beam", "1"] if prev else ["--randomize-weights", "--full-beam", "0"]
        generate(gen + searched + (["--weights", prev] if prev else []) +
                 ["--random", seeds, "--stages", args.stages, "--schedules", str(args.schedules)],
                 logfile)
        if args.app_schedules:
            def app_spec(a):
                return ["--app", os.path.join(build, "apps", "pipelines",
                                              f"hkfac_pipeline_{a}") + f":{a}"]
            more = ["--schedules", str(args.app_schedules),
                    "--first-schedule", str(r * args.app_schedules)]
            if by_holdout:
                # One generation per app: each searched by the file trained without it.
                for a in apps:
                    generate(gen + searched + ["--weights", holdout[a]] + app_spec(a) + more,
                             logfile)
            else:
                generate(gen + searched + (["--weights", prev] if prev else []) +
                         [x for a in apps for x in app_spec(a)] + more, logfile)
        made = len(samples_under(samples)) - before
        gen_s = time.time() - t0
        log(f"round {r}: {made} new samples in {gen_s:.0f} s "
            f"({made / max(gen_s, 1e-9) * 60:.1f} per minute)")

        train_log = os.path.join(rdir, "training")
        split_csv = os.path.join(train_log, "pipelines_split.csv")
        # Both are written by one train_weights run; a round stopped before either is retrained.
        if not (os.path.exists(os.path.join(train_log, "records.md"))
                and os.path.exists(split_csv)):
            start, rate = [], []
            if args.warm_start > 0 and r > 0:
                # The previous round's files side by side (its pipelines_split is in training/).
                start_dir = os.path.join(rdir, "start")
                os.makedirs(start_dir, exist_ok=True)
                prev_dir = os.path.join(work, f"round{r - 1}")
                for name in ["baseline"] + apps + ["pipelines_split"]:
                    src = os.path.join(prev_dir, "training" if name == "pipelines_split" else "",
                                       f"{name}.weights")
                    dst = os.path.join(start_dir, f"{name}.weights")
                    if os.path.exists(src) and not os.path.exists(dst):
                        os.symlink(src, dst)
                start = ["--initial-weights", start_dir]
                rate = [f"--kfac_rate={args.warm_start}"]  # the last of a flag wins
            run([sys.executable, os.path.join(HERE, "train_weights.py"), "--samples", samples,
                 "--build", build, "--out", rdir, "--epochs", str(args.epochs),
                 "--seeds", str(args.train_seeds), "--jobs", str(args.jobs), "--pipelines-split",
                 "--log-dir", train_log] + start + ["--"] + args.extra + rate, logfile)
        app_acc, app_pairs, app_regret = pooled_validation(
            [os.path.join(train_log, f"{a}.csv") for a in apps
             if os.path.exists(os.path.join(train_log, f"{a}.csv"))])
        split_acc, split_pairs, split_regret = pooled_validation([split_csv])

        record = {"round": r, "search_weights": prev or "random", "random_seeds": seeds,
                  "rollout": args.rollout,
                  "app_weights": args.app_weights if args.app_schedules and prev else None,
                  "new_samples": made, "samples": len(samples_under(samples)),
                  "generate_s": round(gen_s), "heldout_app_accuracy": app_acc,
                  "heldout_app_pairs": app_pairs, "heldout_app_top_regret": app_regret,
                  "heldout_pipelines_accuracy": split_acc,
                  "heldout_pipelines_pairs": split_pairs,
                  "heldout_pipelines_top_regret": split_regret, "weights": rdir}
        if args.bench:
            bed_json = os.path.join(rdir, "bed.json")
            if not os.path.exists(bed_json):
                run([sys.executable, os.path.join(HERE, "..", "bench", "schedules",
                                                  "bench_schedules.py"),
                     "--build-dir", build, "--scheduler", f"Hkfac={plugin}",
                     "--holdout-weights", rdir, "--hkfac-beam", str(args.bench_beam),
                     "--rounds", "3", "--min-time", "0.05", "--json", bed_json,
                     "--work-dir", os.path.join(rdir, "bed"),
                     "--output", os.path.join(rdir, "bed.md")] +
                    (["--retain-freed-memory"] if args.retain_freed_memory else []), logfile)
            record["bench"] = bench_summary(bed_json)
        state["rounds"].append(record)
        with open(state_path + ".tmp", "w") as f:
            json.dump(state, f, indent=1)
        os.replace(state_path + ".tmp", state_path)

        line = (f"| {r} | {record['search_weights'] if r == 0 else f'round {r - 1}'} | "
                f"{made} | {record['samples']} | {fmt(app_acc)} ({app_pairs}) | "
                f"{fmt(app_regret)} | {fmt(split_acc)} ({split_pairs}) | {fmt(split_regret)} | "
                + (fmt(record['bench']['geomean_to_best']) if record.get('bench') else "-")
                + " |")
        md = os.path.join(work, "loop.md")
        if not os.path.exists(md):
            with open(md, "w") as f:
                f.write("| round | searched with | new samples | samples | held-out app accuracy "
                        "(pairs) | held-out app top regret | held-out pipelines accuracy (pairs) "
                        "| held-out pipelines top regret | bench geomean to the per-app best |\n"
                        "|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
        with open(md, "a") as f:
            f.write(line + "\n")
        log(f"round {r} done: {line}")
    log(f"{len(state['rounds'])} rounds done; {state_path}")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("learning_loop: stopped; run the same command again to resume")
