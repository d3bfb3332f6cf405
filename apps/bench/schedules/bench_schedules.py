#!/usr/bin/env python3
"""Schedule benchmark bed: every evaluation app autoscheduled by each scheduler, benchmarked with
RunGen in one interleaved run, checked against the plain reference, reported as markdown.

For each app and each variant (the plain reference plus every scheduler) it
  1. builds the variant (static library + registration), timing the autoscheduler call alone
     through the Timed wrapper plugin, and links a RunGen binary,
  2. runs every variant once on the same random inputs and compares outputs with the reference,
  3. benchmarks the scheduled variants in rounds, alternating them within each round; a variant's
     runtime is the median over rounds of RunGen's best time, and its ratio to the baseline is
     the median of the per-round ratios (BENCHMARKS.md: ratios measured side by side).
Python standard library only. Paths to the generators, plugins and tools come from the JSON file
CMake writes (build-dir/apps/bench/schedules/bench_schedules.json).
"""

import argparse
import datetime
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
import ctypes

import replay_plugin  # beside this file, so on sys.path when it runs as a script

# Integer outputs computed through float stages may differ by one where float rounding crosses a
# .5 boundary (local_laplacian: float pyramids, uint16 output; rgb_yuv_roundtrip: float YUV, uint8
# output); all others must match exactly.
INTEGER_TOLERANCE = {"local_laplacian": 1, "rgb_yuv_roundtrip": 1}
CPU_SCHEDULERS = ["Adams2019", "Mullapudi2016", "Li2018"]
GPU_SCHEDULERS = ["Li2018"]  # the only Halide 14 autoscheduler that emits GPU schedules


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="bench_schedules.json written by CMake "
                   "(default: BUILD_DIR/apps/bench/schedules/bench_schedules.json)")
    p.add_argument("--build-dir", default="build", help="CMake build directory (default: build)")
    p.add_argument("--apps", help="comma-separated subset of the apps (default: all of --set)")
    p.add_argument("--set", choices=["apps", "generalization", "retired", "all"], default="apps",
                   help="the pipelines run without --apps: the evaluation apps (default), the "
                        "generalization set (apps/pipelines/generalization), the pipelines "
                        "retired from it, or apps and generalization set both")
    p.add_argument("--scheduler", action="append", default=[], metavar="NAME=PLUGIN.so",
                   help="an extra autoscheduler: its registered name and the plugin that "
                        "registers it (repeatable), e.g. Hkfac=build/libautoschedule_hkfac.so")
    p.add_argument("--only-extra", action="store_true",
                   help="run only the --scheduler entries (plus the baseline)")
    p.add_argument("--holdout-weights", metavar="DIR[:DIR...]",
                   help="Hkfac searches each app with DIR/<app>.weights (its hold-one-out file; "
                        "several DIRs: the ensemble of their files)")
    p.add_argument("--weights-variant", action="append", default=[],
                   metavar="LABEL=DIR[:DIR...][,PLUGIN.so]",
                   help="one more Hkfac column, 'Hkfac LABEL', searching each app with "
                        "DIR/<app>.weights (repeatable; needs --scheduler Hkfac=...; several DIRs "
                        "make an ensemble, HL_WEIGHTS_DIR=DIR1/<app>.weights:...): two weight "
                        "sets side by side in one interleaved run; PLUGIN.so, another build of "
                        "the Hkfac plugin, for weights of another feature version")
    p.add_argument("--env-variant", action="append", default=[],
                   metavar="LABEL=VAR=VALUE[,VAR=VALUE...]",
                   help="one more Hkfac column, 'Hkfac LABEL', searching with the same weights "
                        "as Hkfac and these environment variables set (repeatable; needs "
                        "--scheduler Hkfac=...): two search settings, e.g. HKFAC_ROLLOUT=1, side "
                        "by side in one interleaved run")
    p.add_argument("--replay", action="append", default=[], metavar="LABEL=APP:HEADER",
                   help="a column 'replay LABEL' that applies HEADER, a schedule header as "
                        "the generator writes it (-e schedule), to APP (repeatable; one label "
                        "may name several apps, the others show —): an edited copy of a "
                        "schedule timed beside the schedulers' own")
    p.add_argument("--hkfac-beam", type=int,
                   help="HL_BEAM_SIZE for Hkfac alone (the others keep the environment's)")
    p.add_argument("--machine-params", default="2,16777216,40",
                   help="machine_params for every scheduler (default: 2,16777216,40)")
    p.add_argument("--cuda", action="store_true",
                   help="target host-cuda with Li2018 (and the extra schedulers); runs only "
                        "where a CUDA driver is present, otherwise builds only")
    p.add_argument("--target", help="Halide target (default: the apps' CPU target from CMake, "
                   "plus -cuda with --cuda)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved benchmark rounds")
    p.add_argument("--min-time", type=float, default=0.2,
                   help="RunGen --benchmark_min_time per variant and round, seconds")
    p.add_argument("--retain-freed-memory", dest="retain_freed_memory", action="store_true",
                   help="run RunGen with glibc's mmap and trim thresholds raised as "
                        "hkfac::retain_freed_memory raises them (MALLOC_MMAP_THRESHOLD_, "
                        "MALLOC_TRIM_THRESHOLD_): a schedule's large per-task buffers then stay "
                        "in the heap between tasks instead of being unmapped and faulted in again")
    p.add_argument("--timeout", type=float, default=3600,
                   help="limit for one generator or RunGen call, seconds")
    p.add_argument("--rel-tol", type=float, default=1e-4,
                   help="tolerance for float outputs, relative above 1 and absolute below "
                        "(integers must match exactly)")
    p.add_argument("--no-run", action="store_true", help="build and time autoscheduling only")
    p.add_argument("--verify-only", action="store_true",
                   help="correctness only: build the reference and the --scheduler entries (no "
                        "baseline), compare outputs, no benchmarks; exit 1 unless every variant "
                        "built and agreed (on a target with opencl, RunGen runs on the machine's "
                        "OpenCL, e.g. pocl)")
    p.add_argument("--ptxas", metavar="PATH",
                   help="on a CUDA target, hand every kernel of every built variant to this ptxas "
                        "(a variant whose PTX it refuses fails at 'ptxas')")
    p.add_argument("--expect", metavar="REGEX",
                   help="with --verify-only: fail unless some extra scheduler's schedule matches "
                        "REGEX (that the run exercised what it is meant to)")
    p.add_argument("--random", metavar="SEED:STAGES,...",
                   help="also random pipelines (apps random_sSEED, reference: every Func at "
                        "root), at --random-size")
    p.add_argument("--random-size", default="192x128", help="random pipelines' WxH")
    p.add_argument("--work-dir", help="where variants are built (default: BUILD_DIR/bench_schedules)")
    p.add_argument("--output", help="markdown report (default: WORK_DIR/report.md)")
    p.add_argument("--json", help="also write the raw results as JSON here")
    return p.parse_args()


def cuda_usable():
    """True when the CUDA driver loads and reports at least one device."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        count = ctypes.c_int(0)
        return cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(count)) == 0 \
            and count.value > 0
    except OSError:
        return False


def log(msg):
    print(f"[{datetime.datetime.now():%H:%M:%S}] {msg}", flush=True)


def run(cmd, timeout, cwd=None, env=None):
    """Runs cmd; returns (returncode, wall seconds, stdout+stderr). A timeout reads as rc 124."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout, text=True,
                              errors="replace")
        return proc.returncode, time.perf_counter() - start, proc.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, time.perf_counter() - start, out + f"\n(timed out after {timeout:.0f} s)"


def last_error_line(output):
    """The most telling line of a failed tool's output, for the failure table."""
    lines = [l.strip() for l in output.splitlines() if l.strip()]
    for l in reversed(lines):
        if re.search(r"error|exception|abort|assert|fault|timed out|differ", l, re.I):
            return l[:300]
    return lines[-1][:300] if lines else "(no output)"


class Variant:
    def __init__(self, app, scheduler, plugin, registered=None, weights_dir=None, env=None):
        self.app = app
        self.scheduler = scheduler  # the column: "reference" for the plain reference build
        self.registered = registered or scheduler  # the name the plugin registers (-s)
        self.weights_dir = weights_dir  # Hkfac: the directory of its hold-one-out weights
        self.env = env or {}  # variables set for its autoscheduling (--env-variant)
        self.plugin = plugin
        self.dir = re.sub(r"[^A-Za-z0-9_.-]", "_", scheduler)  # under WORK/<app>/
        # The generated function's name: a C identifier whatever the column's label.
        self.name = re.sub(r"[^a-z0-9_]", "_", f"{app}_{self.dir.lower()}")
        self.schedule_s = None  # the autoscheduler call alone, seconds
        self.generate_s = None  # full generator run (schedule + code generation), seconds
        self.rungen = None
        self.failure = None  # (stage, message)
        self.verified = None
        self.times_ms = []  # RunGen best time per round
        self.replay_header = None  # a --replay column: the schedule header applied to this app
        self.absent = False  # a --replay column without a header for this app: not built

    def fail(self, stage, message):
        self.failure = (stage, message)
        log(f"  {self.name}: FAILED at {stage}: {message}")


def generator_command(cfg, v, args, target, out_dir):
    # -t: the generator's own time limit (Halide's default of 900 s is too short for Adams2019 on
    # the larger apps on a loaded two-core machine).
    name, params = cfg.get("random_apps", {}).get(v.app, (v.app, []))
    cmd = [cfg["generators"][v.app], "-g", name, "-f", v.name, "-o", out_dir, "-t",
           str(int(args.timeout)), "-e", "static_library,h,registration,schedule",
           f"target={target}"] + params
    if v.scheduler == "reference" and v.app in cfg.get("random_apps", {}):
        cmd.append("root_schedule=true")
    if v.scheduler != "reference":
        # The Timed plugin runs the scheduler named in HKFAC_TIMED_SCHEDULER and prints how long
        # autoscheduling alone took.
        cmd[1:1] = ["-p", f"{v.plugin},{cfg['timed_autoscheduler']}", "-s", "Timed"]
        cmd += ["auto_schedule=true", f"machine_params={args.machine_params}"]
    return cmd


def build_replay_plugin(cfg, v, args, out_dir):
    """Compiles the Replay autoscheduler (replay_autoscheduler.cpp) around v.replay_header."""
    with open(v.replay_header) as f:
        apply = replay_plugin.apply_function(f.read())
    if not apply:
        v.fail("replay", f"{v.replay_header} defines no inline void apply function "
                         "(expected a header written by the generator's -e schedule)")
        return
    try:
        built = replay_plugin.build(cfg["cxx"], cfg["include_dirs"], [(v.replay_header, apply)],
                                    out_dir, args.timeout)
    except subprocess.TimeoutExpired:
        # The message run() gives a timed-out tool.
        v.fail("replay", f"(timed out after {args.timeout:.0f} s)")
        return
    if built.returncode != 0:
        v.fail("replay", last_error_line(built.output))
        return
    v.plugin = built.plugin


def build_variant(cfg, v, args, target, work):
    """Builds the variant (timing its autoscheduling) and links its RunGen binary."""
    if v.absent:
        return
    out_dir = os.path.join(work, v.app, v.dir)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    if v.replay_header:
        build_replay_plugin(cfg, v, args, out_dir)
        if v.failure:
            return
    env = dict(os.environ, HKFAC_TIMED_SCHEDULER=v.registered)
    files = [os.path.join(d, f"{v.app}.weights") for d in (v.weights_dir or "").split(":") if d]
    if files and all(os.path.exists(f) for f in files):
        # Each app scheduled with the weights trained without it (weights/README.md); several
        # directories (DIR:DIR...) make an ensemble of their files. A pipeline no file was
        # trained without (the generalization set, random pipelines) was never trained on:
        # it keeps the plugin's default weights.
        env["HL_WEIGHTS_DIR"] = ":".join(files)
    if args.hkfac_beam and v.registered == "Hkfac":
        env["HL_BEAM_SIZE"] = str(args.hkfac_beam)
    if v.registered == "Hkfac":
        # Every candidate measured selection timed, with its origin and time, in generator.log:
        # what a miss is diagnosed from (a few lines per pipeline).
        env.setdefault("HL_DEBUG_AUTOSCHEDULE", "1")
    env.update(v.env)
    rc, secs, out = run(generator_command(cfg, v, args, target, out_dir), args.timeout, env=env)
    # What the scheduler said (Hkfac's measured candidates, its notes), kept beside the build.
    with open(os.path.join(out_dir, "generator.log"), "w") as f:
        f.write(out)
    if rc != 0:
        stage = "compile" if "HKFAC_AUTOSCHEDULE_SECONDS" in out or v.plugin is None \
            else "autoschedule"
        v.fail(stage, last_error_line(out))
        return
    v.generate_s = secs
    m = re.search(r"HKFAC_AUTOSCHEDULE_SECONDS \S+ ([0-9.]+)", out)
    v.schedule_s = float(m.group(1)) if m else None
    binary = os.path.join(out_dir, f"{v.name}.rungen")
    cmd = [cfg["cxx"], "-O2", "-std=c++17"]
    cmd += [f"-I{d}" for d in cfg["include_dirs"]]
    cmd += [os.path.join(out_dir, f"{v.name}.registration.cpp"),
            os.path.join(out_dir, f"{v.name}.a"), cfg["rungen_main"],
            "-o", binary, "-lpthread", "-ldl"]
    rc, _, out = run(cmd, args.timeout)
    if rc != 0:
        v.fail("link RunGen", last_error_line(out))
        return
    if args.ptxas and "cuda" in target and v.scheduler != "reference":
        error = check_ptx(os.path.join(out_dir, f"{v.name}.a"), args.ptxas, out_dir)
        if error:
            v.fail("ptxas", error)
            return
    v.rungen = binary


def check_ptx(library, ptxas, work):
    """Hands each PTX module embedded in a static library (Halide stores the device code as a
    NUL-terminated string) to ptxas for the architecture it targets; None, or the first error."""
    data = open(library, "rb").read()
    kernels = 0
    for m in re.finditer(rb"//\n// Generated by LLVM NVPTX Back-End", data):
        ptx = data[m.start():data.index(b"\0", m.start())]
        arch = re.search(rb"\.target (sm_[0-9]+)", ptx)
        path = os.path.join(work, f"kernels{kernels}.ptx")
        with open(path, "wb") as f:
            f.write(ptx)
        rc, _, out = run([ptxas, "--gpu-name", arch.group(1).decode() if arch else "sm_75", path,
                          "-o", os.devnull], 600)
        if rc != 0:
            return f"kernels{kernels}.ptx: {last_error_line(out)}"
        kernels += 1
    return None if kernels else "no PTX in the library"


def schedule_text(work, v):
    path = os.path.join(work, v.app, v.dir, f"{v.name}.schedule.h")
    return open(path).read() if os.path.exists(path) else ""


def rungen_env():
    """RunGen's environment: Halide's OpenCL runtime opens libOpenCL.so, which Debian's ICD loader
    installs only as libOpenCL.so.1, so that is preloaded where it exists."""
    env = dict(os.environ)
    try:
        out = subprocess.run(["ldconfig", "-p"], stdout=subprocess.PIPE, text=True).stdout
    except OSError:
        return env
    m = re.search(r"libOpenCL\.so\.1 .*=> (\S+)", out)
    if m:
        env["LD_PRELOAD"] = (env.get("LD_PRELOAD", "") + " " + m.group(1)).strip()
    return env


RUNGEN_ENV = None


def describe(v):
    """Input buffer and output names of the pipeline, from RunGen --describe."""
    rc, _, out = run([v.rungen, "--describe"], 60)
    if rc != 0:
        raise RuntimeError(last_error_line(out))
    inputs = re.findall(r'Input "([^"]+)" is of type Buffer', out)
    outputs = re.findall(r'Output "([^"]+)"', out)
    return inputs, outputs


def rungen_inputs(inputs):
    # One seed per input, so that e.g. a stereo pair's images differ.
    return [f"{name}=random:{i + 1}:estimate" for i, name in enumerate(inputs)] + [
        "--default_input_scalars=estimate", "--output_extents=estimate"]


def verify(cfg, variants, args, work):
    """Runs each built variant once and compares its outputs with the reference's."""
    ref = variants[0]
    built = [v for v in variants if v.rungen]
    if ref.rungen is None:
        for v in built[1:]:
            v.verified = "no reference"
        return
    inputs, outputs = describe(ref)
    # --track_memory copies GPU outputs back to the host before they are saved.
    gpu = re.search(r"(cuda|opencl|metal|d3d12|vulkan)", args.target or "") is not None
    for v in built:
        files = {o: os.path.join(work, v.app, v.dir, f"{o}.tmp") for o in outputs}
        cmd = [v.rungen, "--quiet"] + (["--track_memory"] if gpu else []) + \
            rungen_inputs(inputs) + [f"{o}={f}" for o, f in files.items()]
        rc, secs, out = run(cmd, args.timeout, env=RUNGEN_ENV)
        if rc != 0:
            v.fail("run", last_error_line(out))
            continue
        if v is ref:
            log(f"  reference ran once in {secs:.1f} s (including input generation)")
            continue
        if ref.failure:
            v.verified = "no reference"
            continue
        for o in outputs:
            ref_file = os.path.join(work, v.app, ref.dir, f"{o}.tmp")
            rc, _, out = run([cfg["compare_outputs"], ref_file, files[o], str(args.rel_tol),
                              str(INTEGER_TOLERANCE.get(v.app, 0))], 600)
            if rc != 0:
                v.fail("verify", f"output {o}: {out.strip()}")
                break
        else:
            v.verified = "agree"


def benchmark(variants, args):
    """Interleaved rounds: each round runs every variant once, in a rotated order."""
    ref = variants[0]
    runnable = [v for v in variants[1:] if v.rungen and v.failure is None]
    if not runnable or ref.rungen is None:
        return
    inputs, _ = describe(ref)
    for r in range(args.rounds):
        order = runnable[r % len(runnable):] + runnable[:r % len(runnable)]
        for v in order:
            if v.failure:
                continue
            cmd = [v.rungen, "--quiet", "--parsable_output", "--benchmarks=all",
                   f"--benchmark_min_time={args.min_time}"] + rungen_inputs(inputs)
            rc, _, out = run(cmd, args.timeout, env=RUNGEN_ENV)
            m = re.search(r"BEST_TIME_MSEC_PER_ITER\s+([0-9.eE+-]+)", out)
            if rc != 0 or not m:
                v.fail("benchmark", last_error_line(out))
                continue
            v.times_ms.append(float(m.group(1)))
        log(f"  round {r + 1}/{args.rounds}: " + ", ".join(
            f"{v.scheduler} {v.times_ms[-1]:.3f} ms" for v in order if v.times_ms and not v.failure))


def median_ratio(v, base):
    """Median of the per-round ratios v / base (rounds in which both ran)."""
    if not v.times_ms or not base.times_ms or v.failure or base.failure:
        return None
    pairs = list(zip(v.times_ms, base.times_ms))
    return statistics.median(a / b for a, b in pairs) if pairs else None


def geomean(values):
    values = [x for x in values if x]
    return math.exp(sum(math.log(x) for x in values) / len(values)) if values else None


def fmt(x, digits=3):
    return "—" if x is None else f"{x:.{digits}g}" if x < 1000 else f"{x:.0f}"


def machine_line():
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.+)", f.read())
            model = m.group(1).strip() if m else model
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores visible, {platform.system()} {platform.release()}"


def report(results, schedulers, baseline, args, target, notes):
    lines = ["# Autoscheduler benchmark bed", ""]
    lines.append(f"- command: `{' '.join(sys.argv)}`")
    lines.append(f"- date: {datetime.datetime.now():%Y-%m-%d %H:%M}")
    lines.append(f"- machine: {machine_line()}")
    lines.append(f"- target: `{target}`, machine_params `{args.machine_params}`; "
                 f"{args.rounds} interleaved rounds, RunGen `--benchmark_min_time={args.min_time}`"
                 f" (best time per round, median over rounds)")
    env = {k: os.environ[k] for k in ("HL_BEAM_SIZE", "HL_NUM_PASSES", "HL_SEED",
                                      "HL_WEIGHTS_DIR", "HL_RANDOM_DROPOUT") if k in os.environ}
    if env:
        lines.append(f"- environment: {', '.join(f'{k}={v}' for k, v in env.items())}")
    lines += [f"- {n}" for n in notes]
    lines.append("")

    lines += [f"## Runtime (ms; in parentheses the ratio to {baseline}, median of per-round "
              "ratios; lower is better)", ""]
    lines.append("| app | " + " | ".join(schedulers) + " |")
    lines.append("|---|" + "---:|" * len(schedulers))
    ratios = {s: [] for s in schedulers}
    for app, variants in results.items():
        by = {v.scheduler: v for v in variants}
        base = by.get(baseline)
        cells = []
        for s in schedulers:
            v = by[s]
            if v.failure:
                cells.append(f"fails ({v.failure[0]})")
            elif not v.times_ms:
                cells.append("built" if v.rungen else "—")
            else:
                ratio = median_ratio(v, base) if base else None
                if ratio is not None:
                    ratios[s].append(ratio)
                cells.append(f"{fmt(statistics.median(v.times_ms))}"
                             + (f" ({ratio:.2f})" if ratio is not None else ""))
        lines.append(f"| {app} | " + " | ".join(cells) + " |")
    lines.append(f"| **geomean ratio to {baseline}** | " + " | ".join(
        f"**{fmt(geomean(ratios[s]))}** ({len(ratios[s])} apps)" for s in schedulers) + " |")
    lines.append("")
    lines += best_of_three_table(results, schedulers)

    lines += ["## Autoscheduling time (s)", "",
              "Wall time of the autoscheduler call alone (measured in the generator process by "
              "the Timed wrapper plugin). In parentheses: the whole generator run, including "
              "lowering and code generation; the reference column has only that.", ""]
    cols = ["reference"] + schedulers
    lines.append("| app | " + " | ".join(cols) + " |")
    lines.append("|---|" + "---:|" * len(cols))
    totals = {s: 0.0 for s in cols}
    for app, variants in results.items():
        by = {v.scheduler: v for v in variants}
        cells = []
        for s in cols:
            v = by[s]
            if v.generate_s is None:
                cells.append(f"fails ({v.failure[0]})" if v.failure else "—")
                continue
            totals[s] += v.schedule_s or 0.0
            cells.append(("—" if v.schedule_s is None else f"{v.schedule_s:.2f}") +
                         f" ({v.generate_s:.1f})")
        lines.append(f"| {app} | " + " | ".join(cells) + " |")
    lines.append("| **total** | " + " | ".join(
        "—" if s == "reference" else f"**{totals[s]:.0f}**" for s in cols) + " |")
    lines.append("")
    lines += generator_time_table(results, schedulers)

    failures = [v for variants in results.values() for v in variants if v.failure]
    lines += ["## Failures", ""]
    if not failures:
        lines.append("None (see the notes at the top for what was built, run and verified).")
    else:
        lines.append("| app | scheduler | stage | message |")
        lines.append("|---|---|---|---|")
        for v in failures:
            msg = v.failure[1].replace("|", "\\|")
            lines.append(f"| {v.app} | {v.scheduler} | {v.failure[0]} | {msg} |")
    lines.append("")
    return "\n".join(lines)


def best_of_three_ratio(v, variants):
    """Median over rounds of v's time over the fastest of Halide's three in that round (rounds
    in which v and at least one of them ran)."""
    others = [o for o in variants if o.scheduler in CPU_SCHEDULERS and o.times_ms and not o.failure]
    if v.failure or not v.times_ms or not others:
        return None
    rounds = min(len(v.times_ms), *(len(o.times_ms) for o in others))
    if rounds == 0:
        return None
    return statistics.median(v.times_ms[r] / min(o.times_ms[r] for o in others)
                             for r in range(rounds))


def best_of_three_table(results, schedulers):
    """Each scheduler's runtime over the per-pipeline best of Halide's three (Adams2019,
    Mullapudi2016, Li2018), per round; geomean, and how many pipelines exceed 1.2x and 2x."""
    if not any(s in CPU_SCHEDULERS for s in schedulers):
        return []
    lines = ["## Ratio to the per-pipeline best of Halide's three (median of per-round ratios; "
             "lower is better)", ""]
    lines.append("| app | " + " | ".join(schedulers) + " |")
    lines.append("|---|" + "---:|" * len(schedulers))
    ratios = {s: [] for s in schedulers}
    for app, variants in results.items():
        by = {v.scheduler: v for v in variants}
        cells = []
        for s in schedulers:
            r = best_of_three_ratio(by[s], variants)
            if r is not None:
                ratios[s].append(r)
            cells.append("—" if r is None else f"{r:.2f}")
        lines.append(f"| {app} | " + " | ".join(cells) + " |")
    lines.append("| **geomean** | " + " | ".join(
        f"**{fmt(geomean(ratios[s]))}** ({len(ratios[s])})" for s in schedulers) + " |")
    lines.append("| pipelines above 1.2x / 2x | " + " | ".join(
        f"{sum(r > 1.2 for r in ratios[s])} / {sum(r > 2 for r in ratios[s])}"
        for s in schedulers) + " |")
    lines.append("")
    return lines


def generator_time_table(results, schedulers):
    """Each extra scheduler's whole generator run over Adams2019's, per pipeline."""
    extra = [s for s in schedulers if s not in CPU_SCHEDULERS]
    if "Adams2019" not in schedulers or not extra:
        return []
    lines = ["## Generator time over Adams2019's (whole generator run, one build each)", ""]
    lines.append("| app | " + " | ".join(extra) + " |")
    lines.append("|---|" + "---:|" * len(extra))
    ratios = {s: [] for s in extra}
    for app, variants in results.items():
        by = {v.scheduler: v for v in variants}
        base = by["Adams2019"].generate_s
        cells = []
        for s in extra:
            g = by[s].generate_s
            r = g / base if g and base else None
            if r is not None:
                ratios[s].append(r)
            cells.append("—" if r is None else f"{r:.2f}")
        lines.append(f"| {app} | " + " | ".join(cells) + " |")
    lines.append("| **geomean** | " + " | ".join(
        f"**{fmt(geomean(ratios[s]))}**" for s in extra) + " |")
    lines.append("| pipelines above 1 | " + " | ".join(
        f"{sum(r > 1 for r in ratios[s])} of {len(ratios[s])}" for s in extra) + " |")
    lines.append("")
    return lines


def pipelines_of_set(cfg, name):
    """The pipelines of --set NAME, from the config's sets (one from before the sets: the apps)."""
    sets = cfg.get("sets", {"apps": list(cfg["generators"])})
    names = ["apps", "generalization"] if name == "all" else [name]
    if any(n not in sets for n in names):
        sys.exit(f"--set {name}: the config has the sets {', '.join(sets)}; reconfigure with "
                 "CMake for the others")
    return [app for n in names for app in sets[n]]


def main():
    args = parse_args()
    config = args.config or os.path.join(args.build_dir, "apps", "bench", "schedules",
                                         "bench_schedules.json")
    with open(config) as f:
        cfg = json.load(f)
    # The CPU target CMake chose for the apps (host minus features Halide 14 mis-detects).
    cpu_target = cfg.get("cpu_target", "host")
    target = args.target or (f"{cpu_target}-cuda" if args.cuda else cpu_target)
    plugins = dict(cfg["plugins"])
    base_schedulers = GPU_SCHEDULERS if args.cuda else CPU_SCHEDULERS
    baseline = base_schedulers[0]
    extra = []
    for spec in args.scheduler:
        name, _, path = spec.partition("=")
        if not name or not path or not os.path.exists(path):
            sys.exit(f"--scheduler {spec}: expected NAME=PLUGIN.so with an existing plugin")
        plugins[name] = os.path.abspath(path)
        extra.append(name)
    schedulers = ([baseline] if args.only_extra else base_schedulers) + \
        [s for s in extra if s not in base_schedulers]
    weight_variants = {}  # column -> (hold-one-out weights directory, Hkfac plugin)
    for spec in args.weights_variant:
        label, _, rest = spec.partition("=")
        wdir, _, plugin = rest.partition(",")
        if not label or not wdir or not all(os.path.isdir(d) for d in wdir.split(":")):
            sys.exit(f"--weights-variant {spec}: expected LABEL=DIR[:DIR...] with existing "
                     "directories")
        if plugin and not os.path.exists(plugin):
            sys.exit(f"--weights-variant {spec}: no plugin {plugin}")
        if "Hkfac" not in plugins:
            sys.exit(f"--weights-variant {spec}: needs --scheduler Hkfac=PLUGIN.so")
        weight_variants[f"Hkfac {label}"] = (":".join(os.path.abspath(d) for d in wdir.split(":")),
                                             os.path.abspath(plugin) if plugin else plugins["Hkfac"])
        schedulers.append(f"Hkfac {label}")
    env_variants = {}  # column -> {variable: value}
    for spec in args.env_variant:
        label, _, rest = spec.partition("=")
        settings = [kv.partition("=") for kv in rest.split(",")] if rest else []
        if not label or not settings or any(not var or not eq for var, eq, _ in settings):
            sys.exit(f"--env-variant {spec}: expected LABEL=VAR=VALUE[,VAR=VALUE...]")
        if "Hkfac" not in plugins:
            sys.exit(f"--env-variant {spec}: needs --scheduler Hkfac=PLUGIN.so")
        env_variants[f"Hkfac {label}"] = {var: value for var, _, value in settings}
        schedulers.append(f"Hkfac {label}")
    replays = {}  # column -> {app: schedule header}
    for spec in args.replay:
        label, _, rest = spec.partition("=")
        app, _, header = rest.partition(":")
        if not label or not app or not os.path.isfile(header):
            sys.exit(f"--replay {spec}: expected LABEL=APP:HEADER with an existing header")
        column = f"replay {label}"
        if column not in replays:
            replays[column] = {}
            schedulers.append(column)
        replays[column][app] = os.path.abspath(header)
    if args.verify_only:
        if not extra and not replays:
            sys.exit("--verify-only needs at least one --scheduler or --replay")
        schedulers = extra + list(env_variants) + list(replays)
    apps = args.apps.split(",") if args.apps else pipelines_of_set(cfg, args.set)
    if args.apps == "none":
        apps = []
    if args.random:
        w, _, h = args.random_size.partition("x")
        cfg["random_apps"] = {}
        for case in args.random.split(","):
            seed, _, stages = case.partition(":")
            name = f"random_s{seed}"
            cfg["generators"][name] = cfg["random_pipeline"]
            cfg["random_apps"][name] = ("random_pipeline", [f"seed={seed}", f"stages={stages}",
                                                            f"width={w}", f"height={h}"])
            apps.append(name)
    global RUNGEN_ENV
    RUNGEN_ENV = rungen_env() if "opencl" in (args.target or "") else None
    if args.retain_freed_memory:
        # glibc's thresholds as hkfac::retain_freed_memory sets them, through its environment.
        RUNGEN_ENV = dict(RUNGEN_ENV or os.environ)
        RUNGEN_ENV.update(MALLOC_MMAP_THRESHOLD_=str(256 << 20), MALLOC_TRIM_THRESHOLD_=str(512 << 20))
    if args.verify_only and RUNGEN_ENV is not None and not args.no_run and not (
            "LD_PRELOAD" in RUNGEN_ENV and os.path.isdir("/etc/OpenCL/vendors") and
            os.listdir("/etc/OpenCL/vendors")):
        log("verify-only: no OpenCL platform here (libOpenCL.so.1 and an ICD such as "
            "pocl-opencl-icd); nothing run")
        sys.exit(77)
    unknown = [a for a in apps if a not in cfg["generators"]] + [
        f"{a} (--replay)" for headers in replays.values() for a in headers if a not in apps]
    if unknown:
        sys.exit(f"unknown apps: {', '.join(unknown)}")
    work = os.path.abspath(args.work_dir or os.path.join(args.build_dir, "bench_schedules"))
    os.makedirs(work, exist_ok=True)
    output = args.output or os.path.join(work, "report.md")

    notes = [f"{column}: Hkfac's weights with " + ", ".join(f"{k}={v}" for k, v in env.items())
             for column, env in env_variants.items()]
    can_run = not args.no_run
    if (args.cuda or "cuda" in target) and can_run and not cuda_usable():
        can_run = False
        notes.append("no usable CUDA device on this machine: the CUDA variants were built "
                     "and autoscheduled, not run")
    if args.no_run:
        notes.append("--no-run: variants built and autoscheduled, not run")

    results = {}
    for app in apps:
        log(f"{app}: building {len(schedulers) + 1} variants")
        variants = [Variant(app, "reference", None)]
        for s in schedulers:
            if s in weight_variants:
                variants.append(Variant(app, s, weight_variants[s][1], "Hkfac",
                                        weight_variants[s][0]))
            elif s in env_variants:
                variants.append(Variant(app, s, plugins["Hkfac"], "Hkfac", args.holdout_weights,
                                        env_variants[s]))
            elif s in replays:
                v = Variant(app, s, None, "Replay")
                v.replay_header = replays[s].get(app)
                v.absent = v.replay_header is None
                variants.append(v)
            else:
                variants.append(Variant(app, s, plugins[s], weights_dir=args.holdout_weights
                                        if s == "Hkfac" else None))
        for v in variants:
            build_variant(cfg, v, args, target, work)
            if v.generate_s is not None:
                sched = "" if v.schedule_s is None else f"autoschedule {v.schedule_s:.1f} s, "
                log(f"  {v.scheduler}: {sched}generator {v.generate_s:.1f} s")
        if can_run:
            try:
                verify(cfg, variants, args, work)
                if not args.verify_only:
                    benchmark(variants, args)
            except RuntimeError as e:
                variants[0].fail("describe", str(e))
        results[app] = variants
        # Rewrite the report after every app, so a long run can be read while it goes on.
        with open(output, "w") as f:
            f.write(report(results, schedulers, baseline, args, target, notes))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({app: [{k: getattr(v, k) for k in ("scheduler", "schedule_s", "generate_s",
                                                         "failure", "verified", "times_ms")}
                             for v in variants] for app, variants in results.items()}, f, indent=1)
    log(f"report written to {output}")
    print(open(output).read())
    if args.verify_only:
        # Without a device to run on (CUDA here), a variant passes by building (and ptxas).
        bad = [f"{v.name}: {v.failure or v.verified}" for vs in results.values() for v in vs
               if v.failure or (can_run and v.scheduler != "reference" and not v.absent and
                                v.verified != "agree")]
        agreed = sum(1 for vs in results.values() for v in vs[1:]
                     if not v.absent and
                     (v.verified == "agree" if can_run else v.rungen and not v.failure))
        what = "agree with the reference" if can_run else "built" + (
            " and passed ptxas" if args.ptxas else "")
        log(f"verify-only: {agreed} variants {what}, {len(bad)} did not")
        for b in bad:
            log(f"  {b}")
        if args.expect:
            matched = [v.name for vs in results.values() for v in vs[1:]
                       if re.search(args.expect, schedule_text(work, v))]
            log(f"verify-only: {len(matched)} schedules match {args.expect!r}")
            if not matched:
                sys.exit(1)
        sys.exit(1 if bad or not agreed else 0)


if __name__ == "__main__":
    main()
