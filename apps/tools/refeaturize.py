#!/usr/bin/env python3
"""Carries archived Hkfac samples to the current CPU schedule features, keeping their runtimes.

A sample's runtime belongs to its schedule, not to its features: when the featurization changes
in a way the archived file still determines (the plugin's refeaturize.h says which), the samples
need not be searched or benchmarked again. For each pipeline of a samples tree (the layout
generate_data.py writes), this runs the pipeline's generator once with the plugin and
HKFAC_REFEATURIZE naming every archived .featurization (and, from its .schedule.h, the updates
whose rows it blocks); the plugin checks each against the pipeline's analysis, rewrites it, and
refuses (by name) any that does not fit. The new .sample is
the new .featurization with the archived sample's trailer (runtime, pipeline id, schedule id).
Everything else of a schedule's directory is copied as it is. Python 3 standard library only.

  refeaturize.py --samples build-data/hkfac --out build-data/hkfac_v104 --build build
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

TRAILER = 12
MACHINE_PARAMS = "2,16777216,40"
UNROLL = re.compile(r"^\s*(\w+)\.update\((\d+)\)\.unroll\((\w+)\);", re.M)
PURE_VAR = re.compile(r"^\s*Var (\w+)\(", re.M)


def blocked_updates(schedule_h):
    """The plugin's third list field: the updates a schedule's source unrolls a pure Var of
    (its blocked rows; an unrolled RVar is declared RVar), "func.k" comma-separated or "-"."""
    with open(schedule_h) as f:
        src = f.read()
    pure = set(PURE_VAR.findall(src))
    found = sorted({f"{fn}.{k}" for fn, k, v in UNROLL.findall(src) if v in pure})
    return ",".join(found) or "-"


def generator_of(search_txt, build):
    """The current build's generator, generator name and parameters of an archived search."""
    with open(search_txt) as f:
        lines = f.read().splitlines()
    cmd = lines[1].split()
    exe = os.path.basename(cmd[0])
    if exe == "hkfac_random_pipeline":
        gen = os.path.join(build, "apps", "random_pipeline", exe)
    elif exe.startswith("hkfac_pipeline_"):
        gen = os.path.join(build, "apps", "pipelines", exe)
    else:
        raise RuntimeError(f"{search_txt}: unknown generator {cmd[0]}")
    name = cmd[cmd.index("-g") + 1]
    fixed = ("target=", "auto_schedule=", "machine_params=")
    params = [t for t in cmd[cmd.index("-s") + 2:] if "=" in t and not t.startswith(fixed)]
    for t in cmd:
        if t.startswith("machine_params=") and t != f"machine_params={MACHINE_PARAMS}":
            raise RuntimeError(f"{search_txt}: {t}, not the {MACHINE_PARAMS} this tool assumes")
    return gen, name, params


def one_pipeline(pdir, out_root, args):
    """Rewrites one pipeline's samples; returns (written, refused, changed, messages)."""
    name = os.path.basename(pdir)
    pairs, gen = [], None
    for sdir in sorted(os.listdir(pdir)):
        src = os.path.join(pdir, sdir)
        if not os.path.isdir(src):
            continue
        dst = os.path.join(out_root, name, sdir)
        os.makedirs(dst, exist_ok=True)
        for f in os.listdir(src):
            if not f.endswith((".featurization", ".sample")):
                shutil.copy2(os.path.join(src, f), os.path.join(dst, f))
        feat = os.path.join(src, f"{sdir}.featurization")
        if os.path.exists(feat):
            pairs.append((src, dst, sdir))
            if gen is None and os.path.exists(os.path.join(src, "search.txt")):
                gen = generator_of(os.path.join(src, "search.txt"), args.build)
    if not pairs:
        return 0, 0, 0, []
    if gen is None:
        return 0, len(pairs), 0, [f"{name}: no search.txt names its generator"]
    exe, gname, params = gen
    with tempfile.TemporaryDirectory() as tmp:
        listing = os.path.join(tmp, "list.txt")
        with open(listing, "w") as f:
            for src, dst, s in pairs:
                sched = os.path.join(src, s + ".schedule.h")
                hint = f" {blocked_updates(sched)}" if os.path.exists(sched) else ""
                f.write(f"{os.path.join(src, s + '.featurization')} "
                        f"{os.path.join(dst, s + '.featurization')}{hint}\n")
        env = dict(os.environ, HKFAC_REFEATURIZE=listing, HKFAC_TUNE_SECONDS="0",
                   HKFAC_CACHE_DIR="off", HL_BEAM_SIZE="1",
                   HL_RANDOMIZE_WEIGHTS="1")
        cmd = [exe, "-g", gname, "-f", "refeaturize", "-o", tmp, "-e", "schedule",
               "-p", args.plugin, "-s", "Hkfac",
               "target=x86-64-linux-avx-avx2-f16c-fma-sse41-no_runtime", "auto_schedule=true",
               f"machine_params={MACHINE_PARAMS}"] + params
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    msgs = [l for l in r.stdout.splitlines() if "refeaturize:" in l and "written," not in l]
    if r.returncode != 0:
        msgs.append(f"{name}: generator exited {r.returncode}: {r.stdout.strip()[-300:]}")
    written = refused = changed = 0
    for src, dst, s in pairs:
        new_feat = os.path.join(dst, s + ".featurization")
        old_sample = os.path.join(src, s + ".sample")
        if not os.path.exists(new_feat):
            refused += 1
            continue
        written += 1
        with open(os.path.join(src, s + ".featurization"), "rb") as f:
            old = f.read()
        with open(new_feat, "rb") as f:
            new = f.read()
        changed += old != new
        if os.path.exists(old_sample):
            with open(old_sample, "rb") as f:
                sample = f.read()
            if sample[:-TRAILER] != old:
                msgs.append(f"{old_sample}: its features are not its .featurization's; not written")
                os.remove(new_feat)
                written -= 1
                refused += 1
                continue
            with open(os.path.join(dst, s + ".sample"), "wb") as f:
                f.write(new + sample[-TRAILER:])
    return written, refused, changed, msgs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", required=True, help="archived samples (generate_data.py layout)")
    p.add_argument("--out", required=True, help="where the rewritten tree goes")
    p.add_argument("--build", default="build")
    p.add_argument("--plugin", default=None, help="default: BUILD's libautoschedule_hkfac.so")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = p.parse_args()
    args.plugin = os.path.abspath(args.plugin or os.path.join(
        args.build, "autoscheduler_plugin", "libautoschedule_hkfac.so"))
    if os.path.abspath(args.samples) == os.path.abspath(args.out):
        sys.exit("refeaturize: --out must differ from --samples")
    dirs = sorted(os.path.join(args.samples, d) for d in os.listdir(args.samples)
                  if os.path.isdir(os.path.join(args.samples, d)))
    totals = [0, 0, 0]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(one_pipeline, d, args.out, args): d for d in dirs}
        for i, fut in enumerate(concurrent.futures.as_completed(futures)):
            written, refused, changed, msgs = fut.result()
            for m in msgs:
                print(m, flush=True)
            totals = [a + b for a, b in zip(totals, (written, refused, changed))]
            if (i + 1) % 50 == 0 or i + 1 == len(dirs):
                print(f"refeaturize: {i + 1}/{len(dirs)} pipelines; {totals[0]} written "
                      f"({totals[2]} changed), {totals[1]} refused", flush=True)
    sys.exit(1 if totals[1] else 0)


if __name__ == "__main__":
    main()
