#!/usr/bin/env python3
"""Timing schedules on a machine that has the device, for cost-model samples made elsewhere.

GPU samples need GPU timings, and the machines that search and compile (Halide installed, many
cores) are not the ones with the GPU. The batch moves the timing alone:

  1. here:  generate_data.py --compile-only ... --target host-cuda-...   (search, compile, link)
  2. here:  gpu_batch.py pack OUT BATCH.tar.xz        the pending benchmarks and this script
  3. there: python3 gpu_batch.py run BATCH.tar.xz TIMINGS.txt --seconds 300
            (each benchmark once, one at a time, RunGen's best time; within the time given,
             a benchmark that fails or overruns is recorded as failed, never retried)
  4. here:  gpu_batch.py ingest OUT TIMINGS.txt      .sample files from the timings

The same batch can carry the schedule bed's CUDA variants (pack --bed WORK, WORK being the
work directory of bench_schedules.py --target host-cuda-... --no-run): each app's variants are
timed one after another in every round, and `report` gives each scheduler's runtime relative to
Li2018 (median of per-round ratios) and their geometric mean.

scripts/gpu-check runs step 3 on a .gpu-batch.tar.xz beside the checkout. The timing machine
needs Python 3 and what the benchmarks link (glibc, libstdc++, the device driver); the
benchmarks carry their Halide runtime. Python standard library only.
"""

import argparse
import io
import os
import re
import struct
import subprocess
import sys
import tarfile
import time

BENCH_RE = re.compile(r"best case of ([0-9.eE+-]+) sec/iter")


def pending(out):
    """(relative directory, pipeline id, schedule id) of every compiled, untimed schedule."""
    found = []
    for root, _, files in os.walk(out):
        if "PENDING" in files and "bench" in files:
            with open(os.path.join(root, "PENDING")) as f:
                pipeline_id, schedule_id = (int(x) for x in f.read().split())
            found.append((os.path.relpath(root, out), pipeline_id, schedule_id))
    return sorted(found)


def bed_variants(work):
    """(entry name, RunGen binary) of every variant the bed built: bed/APP/SCHEDULER."""
    found = []
    for app in sorted(os.listdir(work)):
        for sched in sorted(os.listdir(os.path.join(work, app))) if os.path.isdir(
                os.path.join(work, app)) else []:
            d = os.path.join(work, app, sched)
            for f in os.listdir(d) if os.path.isdir(d) else []:
                if f.endswith(".rungen") and sched != "reference":
                    found.append((f"bed/{app}/{sched}", os.path.join(d, f)))
    return found


def pack(args):
    entries = pending(args.out) if args.out != "-" else []
    bed = bed_variants(args.bed) if args.bed else []
    if not entries and not bed:
        sys.exit(f"gpu_batch: nothing pending in {args.out} (run generate_data.py --compile-only)")
    manifest = "".join(f"{d} {p} {k}\n" for d, p, k in entries)
    manifest += "".join(f"{d} bed bed\n" for d, _ in bed)
    with tarfile.open(args.batch, "w:xz") as tar:
        for d, _, _ in entries:
            tar.add(os.path.join(args.out, d, "bench"), arcname=f"batch/{d}/bench")
        for d, binary in bed:
            tar.add(binary, arcname=f"batch/{d}/bench")
        data = manifest.encode()
        info = tarfile.TarInfo("batch/MANIFEST")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        tar.add(os.path.abspath(__file__), arcname="batch/gpu_batch.py")
    print(f"gpu_batch: packed {len(entries)} benchmarks and {len(bed)} bed variants into {args.batch} "
          f"({os.path.getsize(args.batch) / 1e6:.1f} MB)")


def run(args):
    deadline = time.monotonic() + args.seconds
    work = args.work or os.path.splitext(os.path.splitext(args.batch)[0])[0] + ".d"
    with tarfile.open(args.batch) as tar:
        tar.extractall(work)
    with open(os.path.join(work, "batch", "MANIFEST")) as f:
        entries = [line.split() for line in f if line.strip()]
    # Bed variants are timed in rounds, an app's schedulers one after another in each.
    order = [e for e in entries if e[1] != "bed"] + [
        e for _ in range(args.rounds) for e in entries if e[1] == "bed"]
    timed = failed = 0
    with open(args.timings, "w") as out:
        for i, (d, _, _) in enumerate(order):
            left = deadline - time.monotonic()
            if left < 1:
                out.write(f"{d} SKIPPED out of time\n")
                continue
            cmd = [os.path.join(work, "batch", d, "bench"), "--estimate_all", "--benchmarks=all",
                   "--quiet", f"--benchmark_min_time={args.min_time}"]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True,
                                      timeout=min(left, args.timeout))
                m = BENCH_RE.search(proc.stdout + proc.stderr)
                if proc.returncode == 0 and m:
                    out.write(f"{d} {float(m.group(1)) * 1000.0!r}\n")
                    timed += 1
                else:
                    why = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
                    out.write(f"{d} FAILED exit {proc.returncode}: {why[0][:200]}\n")
                    failed += 1
            except subprocess.TimeoutExpired:
                out.write(f"{d} FAILED timed out\n")
                failed += 1
            out.flush()
            print(f"[{i + 1}/{len(order)}] {d}", flush=True)
    print(f"gpu_batch: {timed} timed, {failed} failed, {len(order) - timed - failed} not run "
          f"(out of time); timings in {args.timings}")
    return 0 if timed else 1


def ingest(args):
    """Samples: the featurization, the runtime in ms, the pipeline and schedule ids (the layout
    generate_data.py writes)."""
    ids = {d: (p, k) for d, p, k in pending(args.out)}
    made = failed = 0
    with open(args.timings) as f:
        for line in f:
            d, _, rest = line.strip().partition(" ")
            if d not in ids:
                continue  # already ingested, or not from this directory
            directory = os.path.join(args.out, d)
            name = os.path.basename(d)
            if rest.startswith(("FAILED", "SKIPPED")):
                if rest.startswith("FAILED"):
                    with open(os.path.join(directory, "FAILED"), "w") as g:
                        g.write(f"on the device: {rest}\n")
                    os.remove(os.path.join(directory, "PENDING"))
                    failed += 1
                continue
            ms = float(rest)
            with open(os.path.join(directory, name + ".featurization"), "rb") as g:
                data = g.read()
            if not data or len(data) % 4:
                raise ValueError(f"{d}: the featurization is not float32 values")
            pipeline_id, schedule_id = ids[d]
            tmp = os.path.join(directory, name + ".sample.tmp")
            with open(tmp, "wb") as g:
                g.write(data + struct.pack("<fii", ms, pipeline_id, schedule_id))
            os.replace(tmp, os.path.join(directory, name + ".sample"))
            os.remove(os.path.join(directory, "PENDING"))
            os.remove(os.path.join(directory, "bench"))
            made += 1
    left = len(pending(args.out))
    print(f"gpu_batch: {made} samples made, {failed} failed on the device, {left} still pending")
    return 0


def report(args):
    """Each bed scheduler's runtime relative to Li2018 per app: the median of per-round ratios."""
    import math
    import statistics
    times = {}
    with open(args.timings) as f:
        for line in f:
            d, _, rest = line.strip().partition(" ")
            parts = d.split("/")
            if len(parts) != 3 or parts[0] != "bed":
                continue
            ms = float(rest) if re.fullmatch(r"[0-9.eE+-]+", rest) else None
            times.setdefault(parts[1], {}).setdefault(parts[2], []).append(ms)
    ratios = {}
    print("| app | " + " | ".join(sorted({s for t in times.values() for s in t})) + " |")
    for app, by in sorted(times.items()):
        base = by.get(args.baseline, [])
        cells = []
        for sched in sorted({s for t in times.values() for s in t}):
            pairs = [(a, b) for a, b in zip(by.get(sched, []), base) if a and b]
            if not pairs:
                cells.append("failed" if sched in by else "")
                continue
            r = statistics.median(a / b for a, b in pairs)
            ratios.setdefault(sched, []).append(r)
            cells.append(f"{statistics.median(a for a, _ in pairs):.3f} ms ({r:.2f})")
        print(f"| {app} | " + " | ".join(cells) + " |")
    for sched, rs in sorted(ratios.items()):
        print(f"{sched}: geomean {math.exp(sum(map(math.log, rs)) / len(rs)):.3f}x "
              f"{args.baseline} over {len(rs)} apps")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("pack", help="pack the pending benchmarks of a generate_data directory")
    a.add_argument("out", help="a generate_data directory, or - for none")
    a.add_argument("batch")
    a.add_argument("--bed", metavar="WORK", help="also the bed's variants built in WORK")
    a = sub.add_parser("run", help="time a packed batch (on the machine with the device)")
    a.add_argument("batch")
    a.add_argument("timings")
    a.add_argument("--seconds", type=float, default=300, help="the whole run's time limit")
    a.add_argument("--timeout", type=float, default=30, help="one benchmark's time limit")
    a.add_argument("--min-time", type=float, default=0.05, help="RunGen --benchmark_min_time")
    a.add_argument("--work", help="where to unpack (default: beside the batch)")
    a.add_argument("--rounds", type=int, default=3, help="rounds over the bed's variants")
    a = sub.add_parser("ingest", help="turn timings into .sample files")
    a.add_argument("out")
    a.add_argument("timings")
    a = sub.add_parser("report", help="the bed's variants against a baseline, from timings")
    a.add_argument("timings")
    a.add_argument("--baseline", default="Li2018")
    args = p.parse_args()
    return {"pack": pack, "run": run, "ingest": ingest, "report": report}[args.command](args) or 0


if __name__ == "__main__":
    sys.exit(main())
