#!/usr/bin/env python3
"""Times archived schedules again, under the conditions asked for now, keeping their features.

An archive's runtimes belong to the machine and allocator they were timed under (docs/data.md,
"The allocator"): to train on one machine's timings, the other schedules must be timed there too.
For each pipeline of a samples tree (the layout generate_data.py writes), this compiles the
Replay plugin (apps/bench/schedules/replay_autoscheduler.cpp) once around every archived
.schedule.h of the pipeline, runs the pipeline's generator (named in search.txt, from the current
build) once per schedule with that schedule replayed, links RunGen and times it exactly as
generate_data.py times a new schedule (one at a time, on a quiet host, optionally with freed
memory kept). The new .sample is the archived .featurization with the new runtime and the
archived pipeline and schedule ids; .featurization, .schedule.h and search.txt are copied and
retimed_from.txt names the source. A header that no longer compiles is marked FAILED with the
compiler's message and the pipeline's other schedules go on. Resumable like generate_data.py
(a schedule whose .sample exists is skipped, a FAILED one unless --retry-failed). Exit status: 0;
1 when some schedule failed; 3 when some were left untimed on a busy host (run again). Python 3
standard library only.

  retime_samples.py --samples build-data/hkfac --out build-data/retimed --build build \\
      --retain-freed-memory --apps-only
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import struct
import subprocess
import sys
import time

import generate_data as gd
import refeaturize

HERE = os.path.dirname(os.path.abspath(__file__))
# The Replay plugin's builder lives with its source, beside the bench bed that also uses it.
sys.path.insert(0, os.path.join(HERE, "..", "bench", "schedules"))
import replay_plugin  # noqa: E402


class Schedule:
    """One archived schedule and where its new timing goes."""

    def __init__(self, src, out):
        self.name = os.path.basename(src)  # <pipeline>_s<k>, the generator's function name
        self.src, self.dir = src, out
        self.header = os.path.join(src, self.name + ".schedule.h")
        self.featurization = os.path.join(src, self.name + ".featurization")
        with open(os.path.join(src, self.name + ".sample"), "rb") as f:
            f.seek(-8, os.SEEK_END)
            self.pipeline_id, self.schedule_id = struct.unpack("<ii", f.read(8))
        with open(self.header) as f:
            text = f.read()
        self.apply = replay_plugin.apply_function(text)
        self.sample = os.path.join(out, self.name + ".sample")
        # The header the plugin includes: the archived one, or a copy with its Funcs named apart
        # (written when the plugin is built).
        fixed = unique_func_names(text)
        self.renamed = fixed if fixed != text else None
        if self.renamed:
            self.header = os.path.join(out, self.name + ".replayed.schedule.h")


FUNC_DECL = re.compile(r"^(\s*)Func (\w+) = pipeline\.get_func\((\d+)\);$")


def unique_func_names(text):
    """Headers printed before the plugin named every Func apart declare two Funcs of one name
    (bgu's two repeat_edge). A later declaration of a name is renamed <name>_f<index>, and every
    use after it means it, as C++ would read the name had the redeclaration been legal (the
    plugin printed a Func's schedule, and its producers computed at it, after its declaration)."""
    lines = text.split("\n")
    current, renamed = {}, set()  # name as printed -> the declaration it now means
    for i, line in enumerate(lines):
        m = FUNC_DECL.match(line)
        if m:
            name, index = m.group(2), m.group(3)
            if name in current:
                current[name] = f"{name}_f{index}"
                renamed.add(name)
                lines[i] = f"{m.group(1)}Func {current[name]} = pipeline.get_func({index});"
            else:
                current[name] = name
            continue
        for name in renamed:
            lines[i] = re.sub(rf"\b{name}\b", current[name], lines[i])
    return "\n".join(lines)


def archived(pdir, out_root):
    """The pipeline's schedules that have everything a retiming needs."""
    found = []
    for s in sorted(os.listdir(pdir)):
        src = os.path.join(pdir, s)
        files = [os.path.join(src, s + ext) for ext in (".schedule.h", ".featurization", ".sample")]
        if all(os.path.isfile(f) for f in files + [os.path.join(src, "search.txt")]):
            found.append(Schedule(src, os.path.join(out_root, os.path.basename(pdir), s)))
    return found


def target_of(search_txt):
    """The target the archived schedule was compiled for, without no_runtime."""
    with open(search_txt) as f:
        cmd = f.read().splitlines()[1].split()
    t = next(a for a in cmd if a.startswith("target=")).split("=", 1)[1]
    return t.replace("-no_runtime", "")


def build_plugin(args, schedules, work):
    """The Replay plugin holding every schedule's header; headers the compiler refuses are
    marked FAILED and left out (returns the plugin path, or None when none compiles)."""
    os.makedirs(work, exist_ok=True)
    for s in schedules:
        if s.renamed:
            os.makedirs(s.dir, exist_ok=True)
            with open(s.header, "w") as f:
                f.write(s.renamed)
    while True:
        built = replay_plugin.build(args.cxx, [gd.HALIDE_INCLUDE],
                                    [(s.header, s.apply) for s in schedules], work,
                                    args.compile_timeout)
        if built.returncode == 0:
            return built.plugin
        bad = [s for s in schedules if f"{s.header}:" in built.output]
        if not bad:
            raise RuntimeError(f"the Replay plugin of {work} does not compile:\n"
                               f"{gd.tail(built.output)}")
        for s in bad:
            os.makedirs(s.dir, exist_ok=True)
            gd.mark_failed(s.dir, "the archived schedule header does not compile here",
                           "\n".join(line for line in built.output.splitlines()
                                     if s.header in line))
        schedules[:] = [s for s in schedules if s not in bad]
        if not schedules:
            return None


def compile_one(args, gen, target, plugin, rungen_objs, s):
    """Generator run with s replayed, then the RunGen link; True when d/bench exists."""
    exe, gname, params = gen
    os.makedirs(s.dir, exist_ok=True)
    if os.access(os.path.join(s.dir, "bench"), os.X_OK):
        return True
    for f in (".schedule.h", ".featurization"):
        shutil.copy2(os.path.join(s.src, s.name + f), s.dir)
    shutil.copy2(os.path.join(s.src, "search.txt"), s.dir)
    with open(os.path.join(s.dir, "retimed_from.txt"), "w") as f:
        f.write(os.path.abspath(s.src) + "\n" + (
            "replayed with its Funcs named apart: " + os.path.basename(s.header) + "\n"
            if s.renamed else ""))
    cmd = [exe, "-g", gname, "-f", s.name, "-o", s.dir, "-e", "static_library,h,registration",
           "-p", plugin, "-s", "Replay", f"target={target}-no_runtime", "auto_schedule=true",
           f"machine_params={refeaturize.MACHINE_PARAMS}"] + params
    env = dict(os.environ, HKFAC_REPLAY_FUNCTION=s.apply)
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                              timeout=args.compile_timeout)
    except subprocess.TimeoutExpired:
        gd.mark_failed(s.dir, f"compile timed out after {args.compile_timeout} s")
        return False
    if proc.returncode != 0:
        gd.mark_failed(s.dir, f"generator exited with {proc.returncode}", proc.stderr)
        return False
    return gd.link_benchmark(args, rungen_objs, s.dir, s.name)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", required=True, help="archived samples (generate_data layout)")
    p.add_argument("--out", required=True, help="where the retimed samples go (resumable)")
    p.add_argument("--build", default="build", help="hkfac build directory (the generators)")
    p.add_argument("--pipelines", help="comma-separated pipeline names (default: all)")
    p.add_argument("--apps-only", action="store_true", help="skip random pipelines")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compiles")
    gd.add_benchmark_args(p)
    p.add_argument("--retry-failed", action="store_true")
    p.add_argument("--keep-bench", action="store_true")
    p.add_argument("--cxx", default=shutil.which("c++") or "c++")
    args = p.parse_args()
    args.host_lock = None  # generate_data.benchmark's lock: one driver here
    if not args.max_foreign_load >= 0:
        p.error(f"--max-foreign-load {args.max_foreign_load}: expected cores >= 0 (inf: no check)")
    wanted = set(args.pipelines.split(",")) if args.pipelines else None
    pdirs = [os.path.join(args.samples, d) for d in sorted(os.listdir(args.samples))
             if os.path.isdir(os.path.join(args.samples, d)) and not d.startswith("_")
             and (wanted is None or d in wanted)
             and not (args.apps_only and d.startswith("random_pipeline"))]
    if wanted and len(pdirs) != len(wanted):
        missing = wanted - {os.path.basename(d) for d in pdirs}
        p.error(f"no such pipeline under {args.samples}: {', '.join(sorted(missing))}")
    os.makedirs(args.out, exist_ok=True)
    made = skipped = failed = deferred = 0
    start = time.monotonic()
    for pi, pdir in enumerate(pdirs, 1):
        name = os.path.basename(pdir)
        todo = []
        for s in archived(pdir, args.out):
            if os.path.exists(s.sample) or (os.path.exists(os.path.join(s.dir, "FAILED"))
                                             and not args.retry_failed):
                skipped += 1
                continue
            if os.path.exists(os.path.join(s.dir, "FAILED")):
                os.remove(os.path.join(s.dir, "FAILED"))
            if s.apply is None:
                os.makedirs(s.dir, exist_ok=True)
                gd.mark_failed(s.dir, "the archived .schedule.h has no apply function")
                failed += 1
                continue
            todo.append(s)
        if not todo:
            continue
        search_txt = os.path.join(todo[0].src, "search.txt")
        gen = refeaturize.generator_of(search_txt, args.build)
        target = target_of(search_txt)
        rungen_objs = (gd.rungen_object(args, args.out),
                       gd.halide_runtime(args, args.out, gen[0], target))
        n = len(todo)
        plugin = build_plugin(args, todo, os.path.join(args.out, name, "_replay"))
        failed += n - len(todo)
        if plugin is None:
            continue
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            built = list(pool.map(
                lambda s: compile_one(args, gen, target, plugin, rungen_objs, s), todo))
        for s, ok in zip(todo, built):
            if not ok:
                failed += 1
                continue
            try:
                ms = gd.benchmark(args, s.dir)
            except gd.HostBusy as busy:
                deferred += 1
                print(f"[{pi}/{len(pdirs)}] {s.name}: not timed, the host was busy beside it "
                      f"({busy} cores of other work); run again to time it", flush=True)
                continue
            if ms is None:
                failed += 1
                continue
            gd.write_sample(os.path.join(s.dir, s.name + ".featurization"), ms, s.pipeline_id,
                            s.schedule_id, s.sample)
            if not args.keep_bench:
                os.remove(os.path.join(s.dir, "bench"))
            made += 1
            rate = made / max(time.monotonic() - start, 1e-9) * 60
            print(f"[{pi}/{len(pdirs)}] {s.name}: {ms:.3f} ms | {made} retimed, {skipped} "
                  f"skipped, {failed} failed, {rate:.2f} a minute", flush=True)
    print(f"retime_samples: {made} retimed, {skipped} skipped (done or failed before), "
          f"{failed} failed" + (f", {deferred} not timed on a busy host (run again)"
                                if deferred else ""))
    return 3 if deferred else 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, subprocess.SubprocessError, RuntimeError, ValueError) as e:
        print(f"retime_samples: {e}", file=sys.stderr)
        sys.exit(2)
