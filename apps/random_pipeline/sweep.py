#!/usr/bin/env python3
"""Compiles many random pipeline seeds with each autoscheduler and records which fail (resumable).

Each (seed, scheduler) compile runs in its own process, so a scheduler that crashes or hangs is
recorded as a finding instead of stopping the sweep. Results go to OUT/results.tsv, one line per
compile; a rerun skips what is already there. Failure logs are kept in OUT/failures/.

  sweep.py --generator build/apps/random_pipeline/hkfac_random_pipeline --count 3000 \
      --out /tmp/sweep
"""
import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import time

PLUGIN_DIR = "/usr/lib/x86_64-linux-gnu/halide14"
SCHEDULERS = {
    "Adams2019": "libautoschedule_adams2019.so",
    "Mullapudi2016": "libautoschedule_mullapudi2016.so",
    "Li2018": "libautoschedule_li2018.so",
}


def host_target():
    # Halide 14 puts avx512_sapphirerapids (AVX512-FP16) into "host" on AMD Zen 4, which lacks it.
    tool = os.path.join(PLUGIN_DIR, "get_host_target")
    try:
        return subprocess.run([tool, "avx512_sapphirerapids"], check=True, capture_output=True,
                              text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "host"


def stages_for(seed, lo, hi):
    return lo + seed % (hi - lo + 1)


def compile_one(args, target, seed, scheduler):
    stages = stages_for(seed, args.min_stages, args.max_stages)
    with tempfile.TemporaryDirectory(prefix="rp_sweep_") as tmp:
        cmd = [args.generator, "-g", "random_pipeline", "-f", "rp", "-o", tmp, "-e", args.emit,
               f"target={target}", f"seed={seed}", f"stages={stages}"]
        env = dict(os.environ)
        if scheduler == "Root":
            cmd.append("root_schedule=true")
        else:
            plugin = (args.hkfac_plugin if scheduler == "Hkfac"
                      else os.path.join(PLUGIN_DIR, SCHEDULERS[scheduler]))
            cmd += ["auto_schedule=true", f"machine_params={args.machine_params}",
                    "-p", plugin, "-s", scheduler]
            env["HL_BEAM_SIZE"] = str(args.beam_size)
            # The sweep checks what the model-only search emits (Hkfac), not measured picks.
            env.setdefault("HKFAC_TUNE_SECONDS", "0")
            env.setdefault("HKFAC_CACHE_DIR", "off")
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                  timeout=args.timeout)
            status = "ok" if proc.returncode == 0 else f"rc={proc.returncode}"
            log = proc.stdout + proc.stderr
            # Hkfac never fails the generator on an internal error: it warns and falls back, and
            # a sweep counts that as the scheduler failing.
            if status == "ok" and "Hkfac autoscheduler failed" in log:
                status = "fallback"
        except subprocess.TimeoutExpired as e:
            status = "timeout"
            log = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(
                errors="replace")
        seconds = time.monotonic() - start
    if status != "ok":
        os.makedirs(os.path.join(args.out, "failures"), exist_ok=True)
        with open(os.path.join(args.out, "failures", f"seed{seed}_{scheduler}.log"), "w") as f:
            f.write(" ".join(cmd) + "\n\n" + log[-20000:])
    return seed, stages, scheduler, status, seconds


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--generator", required=True, help="the hkfac_random_pipeline executable")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--count", type=int, default=100, help="number of seeds")
    p.add_argument("--min-stages", type=int, default=3)
    p.add_argument("--max-stages", type=int, default=10)
    p.add_argument("--schedulers", default="Adams2019,Mullapudi2016,Li2018",
                   help="comma-separated; 'Root' adds the all-root reference build")
    p.add_argument("--emit", default="object",
                   help="generator outputs (-e); 'object' compiles through LLVM")
    p.add_argument("--beam-size", type=int, default=1,
                   help="HL_BEAM_SIZE for Adams2019 and Hkfac")
    p.add_argument("--hkfac-plugin", default="build/autoscheduler_plugin/libautoschedule_hkfac.so",
                   help="the Hkfac plugin, for --schedulers ...,Hkfac")
    p.add_argument("--machine-params", default="2,16777216,40")
    p.add_argument("--target", default=None, help="Halide target (default: host without FP16)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per compile")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--out", required=True)
    args = p.parse_args()

    os.makedirs(args.out, exist_ok=True)
    results = os.path.join(args.out, "results.tsv")
    done = set()
    if os.path.exists(results):
        with open(results) as f:
            for line in f:
                fields = line.rstrip("\n").split("\t")
                if len(fields) >= 4 and fields[0] != "seed":
                    done.add((int(fields[0]), fields[2]))
    else:
        with open(results, "w") as f:
            f.write("seed\tstages\tscheduler\tstatus\tseconds\n")

    target = args.target or host_target()
    schedulers = args.schedulers.split(",")
    todo = [(s, sch) for s in range(args.first_seed, args.first_seed + args.count)
            for sch in schedulers if (s, sch) not in done]
    print(f"sweep: {len(todo)} compiles to do ({len(done)} already recorded), target {target}",
          flush=True)
    failures = 0
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool, \
            open(results, "a") as out:
        futures = [pool.submit(compile_one, args, target, s, sch) for s, sch in todo]
        for i, fut in enumerate(concurrent.futures.as_completed(futures), 1):
            seed, stages, scheduler, status, seconds = fut.result()
            out.write(f"{seed}\t{stages}\t{scheduler}\t{status}\t{seconds:.2f}\n")
            out.flush()
            if status != "ok":
                failures += 1
                print(f"  FAIL seed {seed} ({stages} stages) {scheduler}: {status}", flush=True)
            if i % 25 == 0 or i == len(todo):
                rate = i / max(time.monotonic() - start, 1e-9) * 60
                print(f"  {i}/{len(todo)} compiles, {failures} failures, {rate:.1f}/min",
                      flush=True)

    # Summary over everything recorded, including earlier runs.
    totals, fails = {}, {}
    with open(results) as f:
        next(f)
        for line in f:
            seed, stages, scheduler, status, _ = line.rstrip("\n").split("\t")
            totals[scheduler] = totals.get(scheduler, 0) + 1
            if status != "ok":
                fails.setdefault(scheduler, []).append(f"{seed}:{status}")
    for scheduler in sorted(totals):
        bad = fails.get(scheduler, [])
        print(f"{scheduler}: {totals[scheduler]} compiled, {len(bad)} failed"
              + (f" ({', '.join(bad[:20])}{' ...' if len(bad) > 20 else ''})" if bad else ""))
    return 1 if any(fails.values()) else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, subprocess.SubprocessError, RuntimeError, ValueError) as e:
        # Everything done so far is kept; rerunning the same command resumes.
        print(f"sweep: {e}", file=sys.stderr)
        sys.exit(2)
