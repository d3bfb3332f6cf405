#!/usr/bin/env python3
"""Makes cost-model training samples: schedules with random dropout, benchmarked with RunGen.

For each pipeline (a random pipeline seed, or an app generator) it asks an autoscheduler plugin
for many schedules: one full-beam search plus greedy searches (HL_BEAM_SIZE=1) with random dropout
and a different HL_SEED each. Every schedule is compiled by the generator into a static library
with its .featurization, .schedule.h and RunGen registration, linked with RunGenMain into a
benchmark, timed with RunGen (one at a time, nothing else of ours running, and only while the
rest of the host is quiet: see HostLoad), and written as a .sample: the .featurization followed
by float32 runtime in ms, int32 pipeline id, int32 schedule id (the layout of Halide 14's
featurization_to_sample, which is used to cross-check the writer).

Layout: OUT/<pipeline>/<pipeline>_s<k>/ holds one schedule's files. It is resumable: a schedule
whose .sample exists is skipped, one already compiled is only benchmarked, and one marked FAILED
is skipped unless --retry-failed. A schedule whose featurization equals an earlier sample's of the
same pipeline is marked DUPLICATE and not timed. Exit status: 0; 1 when some schedule failed
(marked); 3 when some were built but left untimed because the host was busy (run again). Python 3
standard library only.

Several drivers can share the work (generate_data_mpi.py runs them under mpirun): --shard I/N
takes every N-th pipeline from the I-th, so shards never make the same sample, and --host-lock
names a file that the drivers on one host lock, shared while compiling and exclusive while
benchmarking, so that no benchmark runs beside a compile or another benchmark.

  generate_data.py --out /tmp/data --random 0:100 --schedules 20
  generate_data.py --out /tmp/data --app build/apps/pipelines/hkfac_pipeline_harris:harris
"""
import argparse
import concurrent.futures
import contextlib
import fcntl
import hashlib
import os
import re
import resource
import shutil
import socket
import struct
import subprocess
import sys
import time
import zlib

HALIDE_TOOLS = "/usr/lib/x86_64-linux-gnu/halide14"
RUNGEN_MAIN = "/usr/src/halide14/RunGenMain.cpp"
HALIDE_INCLUDE = "/usr/include/halide14"
PLUGINS = {
    "Hkfac": "build/autoscheduler_plugin/libautoschedule_hkfac.so",
    "Adams2019": os.path.join(HALIDE_TOOLS, "libautoschedule_adams2019.so"),
    "Li2018": os.path.join(HALIDE_TOOLS, "libautoschedule_li2018.so"),
    "Mullapudi2016": os.path.join(HALIDE_TOOLS, "libautoschedule_mullapudi2016.so"),
}


class Pipeline:
    """One generator invocation to schedule many times."""

    def __init__(self, name, generator, generator_name, params):
        self.name = name
        self.generator = generator
        self.generator_name = generator_name
        self.params = params
        # Stable across runs and machines, so samples made at different times group correctly.
        self.id = zlib.crc32(name.encode()) & 0x7FFFFFFF


def host_target():
    # Halide 14 puts avx512_sapphirerapids (AVX512-FP16) into "host" on AMD Zen 4, which lacks it.
    try:
        return subprocess.run([os.path.join(HALIDE_TOOLS, "get_host_target"),
                               "avx512_sapphirerapids"], check=True, capture_output=True,
                              text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "host"


def tail(text, n=4000):
    return text[-n:] if text else ""


def mark_failed(d, reason, log=""):
    with open(os.path.join(d, "FAILED"), "w") as f:
        f.write(reason + "\n\n" + tail(log))


def search_env(args, pipeline, k):
    """Search settings of schedule k: the run's first --full-beam schedules use the full beam,
    the rest are greedy with dropout."""
    env = dict(os.environ)
    # The schedule the search picks is the sample: no measured selection, no tuning cache.
    env["HKFAC_TUNE_SECONDS"] = "0"
    env["HKFAC_CACHE_DIR"] = "off"
    env["HL_SEED"] = str((pipeline.id * 7919 + k) & 0x7FFFFFFF)
    dropouts = [int(v) for v in args.dropout.split(",")]
    if k - args.first_schedule < args.full_beam:
        env["HL_BEAM_SIZE"] = str(args.beam_size)
        env["HL_RANDOM_DROPOUT"] = "100"
    else:
        env["HL_BEAM_SIZE"] = "1"
        env["HL_RANDOM_DROPOUT"] = str(dropouts[k % len(dropouts)])
    if args.weights:
        env["HL_WEIGHTS_DIR"] = args.weights
    if k - args.first_schedule >= args.full_beam and args.placements:
        # Hkfac: random cost models mostly prefer compute_root, so some greedy runs are held to
        # the other placements, or the data would hardly show the model a sliding window or nest.
        kinds = args.placements.split(";")
        env["HKFAC_PLACEMENTS"] = kinds[(k // len(dropouts)) % len(kinds)]
    if args.randomize_weights and k - args.first_schedule >= args.full_beam:
        # A different random cost model per schedule: the first data for a new featurization,
        # before any trained weights exist (Hkfac only).
        env["HL_RANDOMIZE_WEIGHTS"] = str(int(env["HL_SEED"]) + 1)
    if args.rollout:
        # Hkfac: the search's pick improved under the model by whole-schedule completions, so the
        # round times the schedules the model rates best, where its errors cost the most.
        env["HKFAC_ROLLOUT"] = "1"
    return env


_DIGESTS = {}


def file_sha256(path):
    """SHA-256 of a file, recomputed when the file changes (a plugin rebuilt mid-round)."""
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_mtime_ns, st.st_size)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


def provenance(args, env):
    """search.txt's third line: the plugin and weights files that made the schedule, by content,
    so a round whose plugin changed part way says which build made which schedule."""
    fields = []
    if args.plugin and os.path.isfile(args.plugin):
        fields.append(f"plugin_sha256={file_sha256(args.plugin)}")
    weights = env.get("HL_WEIGHTS_DIR")
    if weights and os.path.isfile(weights):
        fields.append(f"weights_sha256={file_sha256(weights)}")
    return " ".join(fields)


def compile_schedule(args, target, rungen_objs, pipeline, k, d):
    """Runs the generator and links the RunGen benchmark; returns compile seconds or None.

    The pipeline is compiled without Halide's runtime (target feature no_runtime) and linked with
    one runtime built per output directory: the runtime is the same for every schedule, and
    compiling it again was a third of each compile.
    """
    fname = f"{pipeline.name}_s{k}"
    bench = os.path.join(d, "bench")
    # The benchmark appears under its name only once linked whole (below), so a run stopped
    # mid-link recompiles here rather than timing a partial file.
    if os.access(bench, os.X_OK) and os.path.exists(os.path.join(d, fname + ".featurization")):
        return 0.0
    os.makedirs(d, exist_ok=True)
    env = search_env(args, pipeline, k)
    cmd = [pipeline.generator, "-g", pipeline.generator_name, "-f", fname, "-o", d,
           "-e", "static_library,h,registration,schedule,featurization",
           "-p", args.plugin, "-s", args.scheduler, f"target={target}", "auto_schedule=true",
           f"machine_params={args.machine_params}"] + pipeline.params
    cmd[cmd.index(f"target={target}")] = f"target={target}-no_runtime"
    with open(os.path.join(d, "search.txt"), "w") as f:
        f.write(" ".join(f"{v}={env[v]}" for v in ("HL_SEED", "HL_BEAM_SIZE", "HL_RANDOM_DROPOUT",
                                                     "HKFAC_PLACEMENTS", "HKFAC_ROLLOUT")
                           if v in env) + "\n")
        f.write(" ".join(cmd) + "\n")
        f.write(provenance(args, env) + "\n")
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                              timeout=args.compile_timeout)
    except subprocess.TimeoutExpired:
        mark_failed(d, f"compile timed out after {args.compile_timeout} s")
        return None
    with open(os.path.join(d, "compile_log.txt"), "w") as f:
        f.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        mark_failed(d, f"generator exited with {proc.returncode}", proc.stderr)
        return None
    if not link_benchmark(args, rungen_objs, d, fname):
        return None
    return time.monotonic() - start


def link_benchmark(args, rungen_objs, d, fname):
    """Links d/bench from the generator's d/fname.a and registration; False (marked FAILED) when
    that fails."""
    bench = os.path.join(d, "bench")
    link = [args.cxx, "-std=c++17", "-I", HALIDE_INCLUDE,
            os.path.join(d, fname + ".registration.cpp"), rungen_objs[0],
            os.path.join(d, fname + ".a"), rungen_objs[1], "-o", bench + ".tmp", "-ldl",
            "-lpthread"]
    try:
        proc = subprocess.run(link, capture_output=True, text=True, timeout=args.compile_timeout)
    except subprocess.TimeoutExpired:
        mark_failed(d, "linking the benchmark timed out")
        return False
    if proc.returncode != 0:
        mark_failed(d, "linking the benchmark failed", proc.stderr)
        return False
    os.replace(bench + ".tmp", bench)
    # The library is inside the benchmark now; it is the bulk of a schedule's disk use.
    os.remove(os.path.join(d, fname + ".a"))
    return True


BENCH_RE = re.compile(r"best case of ([0-9.eE+-]+) sec/iter")


@contextlib.contextmanager
def host_lock(args, exclusive):
    """Holds --host-lock shared (compiles) or exclusive (benchmarks); nothing without one."""
    if not args.host_lock:
        yield
        return
    fd = os.open(args.host_lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # releases the lock


def lock_shard_of_out(out, shard, shards):
    """Holds OUT/.generate_data.shard<I>of<N>.lock for the whole run and returns its descriptor.
    Two drivers of one shard on one directory would build and time the same schedules and move
    each other's files (a schedule marked FAILED beside its sample); the second is refused."""
    path = os.path.join(out, f".generate_data.shard{shard}of{shards}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        sys.exit(f"generate_data: another run is writing shard {shard}/{shards} of {out} "
                 f"(it holds {path}); wait for it to end or stop it")
    return fd


def locked_compile(args, target, rungen_objs, pipeline, k, d):
    with host_lock(args, exclusive=False):
        return compile_schedule(args, target, rungen_objs, pipeline, k, d)


class HostBusy(Exception):
    """A benchmark ran beside too much foreign work; its build is kept for a later run."""


class HostLoad:
    """How many cores the rest of the host kept busy while a benchmark ran: the busy time of the
    cores this driver may run on (/proc/stat) less this driver's own and its children's (the
    benchmark's).
    A build or test run beside the benchmarks slows them unevenly (docs/RESULTS.md#cost-model-data),
    which corrupts exactly the orderings the cost model learns, so such timings are
    retried and, failing that, left for a later run. None where /proc/stat cannot be read."""

    TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def __init__(self):
        self.start = self.snapshot()

    @classmethod
    def snapshot(cls):
        try:
            with open("/proc/stat") as f:
                lines = [l.split() for l in f if l.startswith("cpu")]
        except OSError:
            return None
        # Only the cores this driver (and so the benchmark) may run on: in a container /proc/stat
        # can list the whole host's. The aggregate line where per-core lines are missing.
        mine = {f"cpu{c}" for c in os.sched_getaffinity(0)} if hasattr(
            os, "sched_getaffinity") else set()
        rows = [l for l in lines if l[0] in mine] or [l for l in lines if l[0] == "cpu"]
        if not rows or any(len(l) < 9 for l in rows):
            return None
        busy = 0
        for l in rows:
            # user nice system idle iowait irq softirq steal: all but idle and iowait are busy
            # (steal too: a neighbour held the core); guest time is already in user and nice.
            v = [int(x) for x in l[1:9]]
            busy += sum(v) - v[3] - v[4]
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
            resource.RUSAGE_CHILDREN)
        own = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
        return busy / cls.TICK, own, time.monotonic()

    def cores(self):
        end = self.snapshot()
        if self.start is None or end is None:
            return None
        wall = max(end[2] - self.start[2], 1e-9)
        return max(0.0, (end[0] - self.start[0]) - (end[1] - self.start[1])) / wall


# glibc's thresholds as hkfac::retain_freed_memory sets them (runtime/src/allocator.cpp).
RETAINED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(256 << 20), "MALLOC_TRIM_THRESHOLD_": str(512 << 20)}


def benchmark(args, d):
    """Times the benchmark with RunGen; returns milliseconds, or None (marked FAILED). Raises
    HostBusy when every try ran beside more than --max-foreign-load cores of other work."""
    env = dict(os.environ)
    env["HL_NUM_THREADS"] = str(args.threads)
    if args.retain_freed_memory:
        env.update(RETAINED_MALLOC)
    cmd = [os.path.join(d, "bench"), "--estimate_all", "--benchmarks=all", "--quiet",
           f"--benchmark_min_time={args.bench_min_time}"]
    loads = []
    for attempt in range(args.busy_retries + 1):
        if attempt:
            time.sleep(args.busy_wait)
        try:
            with host_lock(args, exclusive=True):
                load = HostLoad()
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                      timeout=args.bench_timeout)
                foreign = load.cores()
        except subprocess.TimeoutExpired:
            mark_failed(d, f"benchmark timed out after {args.bench_timeout} s")
            return None
        except OSError as e:
            mark_failed(d, f"the benchmark could not run: {e}")
            return None
        if foreign is not None and foreign > args.max_foreign_load:
            loads.append(foreign)
            continue
        with open(os.path.join(d, "bench.txt"), "w") as f:
            f.write(proc.stdout + proc.stderr)
            f.write("host load beside the benchmark: " +
                    (f"{foreign:.2f} cores" if foreign is not None else "unknown (no /proc/stat)") +
                    (f" (after {len(loads)} busy tries)" if loads else "") + "\n")
            f.write("allocator: " + ("freed memory kept (" + ", ".join(
                f"{k}={v}" for k, v in RETAINED_MALLOC.items()) + ")" if args.retain_freed_memory
                else "glibc's defaults") + "\n")
        m = BENCH_RE.search(proc.stdout + proc.stderr)
        if proc.returncode != 0 or not m:
            mark_failed(d, f"benchmark exited with {proc.returncode}", proc.stdout + proc.stderr)
            return None
        return float(m.group(1)) * 1000.0
    raise HostBusy(", ".join(f"{x:.2f}" for x in loads))


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()


def write_sample(featurization, ms, pipeline_id, schedule_id, out):
    with open(featurization, "rb") as f:
        data = f.read()
    if len(data) == 0 or len(data) % 4:
        raise ValueError(f"{featurization}: {len(data)} bytes is not a float32 featurization")
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data + struct.pack("<fii", ms, pipeline_id, schedule_id))
    os.replace(tmp, out)  # a sample file is either complete or absent


def cross_check(featurization, ms, pipeline_id, schedule_id, sample):
    """Compares our .sample with Halide 14's featurization_to_sample (which takes seconds)."""
    tool = os.path.join(HALIDE_TOOLS, "featurization_to_sample")
    if not os.path.exists(tool):
        return "featurization_to_sample not found; writer not cross-checked"
    ref = sample + ".reference"
    subprocess.run([tool, featurization, repr(ms / 1000.0), str(pipeline_id), str(schedule_id),
                    ref], check=True, capture_output=True)
    with open(ref, "rb") as a, open(sample, "rb") as b:
        want, got = a.read(), b.read()
    os.remove(ref)
    # The features and ids must match bit for bit; the runtime may differ in its last bit from
    # the tool's own seconds-to-milliseconds conversion.
    t_want, t_got = struct.unpack("<f", want[-12:-8])[0], struct.unpack("<f", got[-12:-8])[0]
    if (len(want) != len(got) or want[:-12] != got[:-12] or want[-8:] != got[-8:]
            or abs(t_want - t_got) > 1e-6 * abs(t_want)):
        raise RuntimeError(f"{sample} differs from featurization_to_sample's output")
    return "sample layout matches featurization_to_sample"


def halide_runtime(args, out, generator, target):
    """Halide's runtime for the target, built once per output directory and target."""
    name = "halide_runtime_" + format(zlib.crc32(target.encode()), "08x")
    lib = os.path.join(out, "_rungen", name + ".a")
    if not os.path.exists(lib):
        tmp = os.path.join(out, "_rungen", f"tmp-{socket.gethostname()}-{os.getpid()}")
        os.makedirs(tmp, exist_ok=True)
        subprocess.run([generator, "-r", name, "-o", tmp, "-e", "static_library",
                        f"target={target}"], check=True, capture_output=True)
        os.replace(os.path.join(tmp, name + ".a"), lib)
        shutil.rmtree(tmp, ignore_errors=True)
    return lib


def rungen_object(args, out):
    """RunGenMain.cpp compiled once per output directory (it is the slow part of each link)."""
    obj = os.path.join(out, "_rungen", "RunGenMain.o")
    if not os.path.exists(obj):
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        # A temporary name of this process's own: two drivers sharing --out (on one host or on a
        # shared file system) may both compile it.
        tmp = f"{obj}.{socket.gethostname()}-{os.getpid()}.tmp"
        subprocess.run([args.cxx, "-std=c++17", "-O2", "-c", "-I", HALIDE_INCLUDE,
                        "-DHALIDE_NO_PNG", "-DHALIDE_NO_JPEG", RUNGEN_MAIN, "-o", tmp],
                       check=True)
        os.replace(tmp, obj)
    return obj


def pipelines_from(args):
    result = []
    if args.random:
        first, count = (int(v) for v in args.random.split(":"))
        lo, hi = (int(v) for v in args.stages.split(":"))
        for seed in range(first, first + count):
            stages = lo + zlib.crc32(str(seed).encode()) % (hi - lo + 1)
            # "g<N>": the generator's generation (docs/data.md); each builds other pipelines from
            # the same seed, so the name, and so the pipeline id, must say which.
            g = args.generation
            result.append(Pipeline(f"random_pipeline_g{g}_seed{seed}_stages{stages}",
                                   args.random_generator, "random_pipeline",
                                   [f"seed={seed}", f"stages={stages}", f"generation={g}"] +
                                   args.random_params))
    for spec in args.app:
        exe, gen, *params = spec.split(":")
        result.append(Pipeline(gen, exe, gen, params))
    return result


def add_benchmark_args(p):
    """The flags that compile_schedule, link_benchmark and benchmark read; retime_samples.py
    declares them here too, so that a retiming is asked for exactly as a first timing is."""
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="HL_NUM_THREADS while benchmarking")
    p.add_argument("--compile-timeout", type=float, default=600)
    p.add_argument("--bench-timeout", type=float, default=60)
    p.add_argument("--bench-min-time", type=float, default=0.1)
    p.add_argument("--retain-freed-memory", dest="retain_freed_memory", action="store_true",
                   help="time with glibc's mmap and trim thresholds raised as "
                        "hkfac::retain_freed_memory raises them, so that a schedule's per-task "
                        "buffers are not unmapped and faulted in again between tasks (bench.txt "
                        "records which allocator a timing had)")
    p.add_argument("--max-foreign-load", dest="max_foreign_load", type=float, default=0.25,
                   help="most cores of other work on the host beside a benchmark for its timing "
                        "to count (busier tries are retried, then left for a later run; inf: "
                        "no check)")
    p.add_argument("--busy-retries", dest="busy_retries", type=int, default=3,
                   help="tries after the first when the host is busy")
    p.add_argument("--busy-wait", dest="busy_wait", type=float, default=20,
                   help="seconds to wait before each retry on a busy host")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="output directory (resumable)")
    p.add_argument("--random", help="FIRST:COUNT random pipeline seeds")
    p.add_argument("--stages", default="4:10", help="LO:HI stage counts of random pipelines")
    p.add_argument("--random-generator", default="build/apps/random_pipeline/hkfac_random_pipeline")
    p.add_argument("--generation", type=int, default=3, choices=(2, 3),
                   help="random pipeline generation: 3 adds matrix products and column filters")
    p.add_argument("--random-params", nargs="*", default=[],
                   help="extra generator params for random pipelines, e.g. width=512 height=512")
    p.add_argument("--app", action="append", default=[],
                   help="GENERATOR_EXE:GENERATOR_NAME[:param=value...]; repeatable")
    p.add_argument("--scheduler", default="Adams2019")
    p.add_argument("--plugin", help="plugin .so (default: Halide 14's for --scheduler)")
    p.add_argument("--weights", help="HL_WEIGHTS_DIR for the search")
    p.add_argument("--randomize-weights", action="store_true",
                   help="greedy runs search with random weights, a new seed each (Hkfac)")
    p.add_argument("--schedules", type=int, default=10, help="schedules per pipeline")
    p.add_argument("--first-schedule", type=int, default=0,
                   help="id of the first schedule (later runs over the same pipelines start "
                        "past the earlier ones' ids, and so search with other seeds)")
    p.add_argument("--full-beam", type=int, default=1, help="how many of them use the full beam")
    p.add_argument("--beam-size", type=int, default=32, help="HL_BEAM_SIZE of full-beam runs")
    p.add_argument("--dropout", default="1,5,25",
                   help="HL_RANDOM_DROPOUT values cycled over the greedy runs")
    p.add_argument("--placements",
                   help="Hkfac: HKFAC_PLACEMENTS values separated by ';' ('all': every kind), "
                        "cycled over the greedy runs, e.g. 'all;inline,tile,task,slide,nest'")
    p.add_argument("--rollout", action="store_true",
                   help="Hkfac: every search ends with the rollout search (HKFAC_ROLLOUT=1)")
    p.add_argument("--target", help="Halide target (default: host without AVX512-FP16)")
    p.add_argument("--machine-params", default="2,16777216,40")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compiles")
    add_benchmark_args(p)
    p.add_argument("--retry-failed", action="store_true")
    p.add_argument("--compile-only", action="store_true",
                   help="search and compile, time nothing: each new schedule's directory keeps "
                        "its benchmark and a PENDING file, for a machine that has the device "
                        "(apps/tools/gpu_batch.py packs, runs and ingests them)")
    p.add_argument("--keep-bench", action="store_true",
                   help="keep each benchmark binary after its sample is written")
    p.add_argument("--cxx", default=shutil.which("c++") or "c++")
    p.add_argument("--shard", default="0/1",
                   help="I/N: only pipelines I, I+N, I+2N, ... of the list (drivers sharing work)")
    p.add_argument("--host-lock",
                   help="a file every driver on this host locks: shared while compiling, "
                        "exclusive while benchmarking")
    args = p.parse_args()
    m = re.fullmatch(r"(\d+)/(\d+)", args.shard)
    if not m or int(m.group(2)) < 1 or int(m.group(1)) >= int(m.group(2)):
        p.error(f"--shard {args.shard}: expected I/N with 0 <= I < N")
    shard, shards = int(m.group(1)), int(m.group(2))
    if not args.max_foreign_load >= 0:  # NaN fails too; inf turns the check off
        p.error(f"--max-foreign-load {args.max_foreign_load}: expected cores >= 0 (inf: no check)")
    if args.busy_retries < 0 or not 0 <= args.busy_wait < float("inf"):
        p.error(f"--busy-retries {args.busy_retries}, --busy-wait {args.busy_wait}: expected "
                "a count >= 0 and finite seconds >= 0")
    args.plugin = args.plugin or PLUGINS.get(args.scheduler)
    if not args.plugin:
        p.error(f"no default plugin for scheduler {args.scheduler}; pass --plugin")
    if args.scheduler not in ("Adams2019", "Hkfac"):
        print(f"warning: {args.scheduler} ignores HL_BEAM_SIZE / HL_RANDOM_DROPOUT / HL_SEED and "
              "may not write featurizations", file=sys.stderr)
    pipelines = pipelines_from(args)
    if not pipelines:
        p.error("nothing to do: give --random and/or --app")
    pipelines = pipelines[shard::shards]
    if not pipelines:
        print(f"generate_data: shard {args.shard} has no pipeline", flush=True)
        return 0

    os.makedirs(args.out, exist_ok=True)
    shard_lock = lock_shard_of_out(args.out, shard, shards)  # noqa: F841 (held until exit)
    target = args.target or host_target()
    with host_lock(args, exclusive=False):
        rungen_objs = (rungen_object(args, args.out),
                       halide_runtime(args, args.out, pipelines[0].generator, target))
    total = len(pipelines) * args.schedules
    made = skipped = failed = duplicates = pending = deferred = 0
    checked = None
    bench_seconds = compile_seconds = 0.0
    start = time.monotonic()
    print(f"generate_data: {len(pipelines)} pipelines x {args.schedules} schedules, "
          f"{args.scheduler}, target {target}, {args.jobs} compile jobs"
          + (f", shard {args.shard}" if shards > 1 else ""), flush=True)
    summary = []
    for pi, pipeline in enumerate(pipelines, 1):
        todo = []
        seen = {}  # featurization digest -> schedule id, over this pipeline's samples
        for k in range(args.first_schedule, args.first_schedule + args.schedules):
            d = os.path.join(args.out, pipeline.name, f"{pipeline.name}_s{k}")
            sample = os.path.join(d, f"{pipeline.name}_s{k}.sample")
            if os.path.exists(sample):
                seen.setdefault(digest(os.path.join(d, f"{pipeline.name}_s{k}.featurization")), k)
                skipped += 1
                continue
            if os.path.exists(os.path.join(d, "DUPLICATE")) or os.path.exists(
                    os.path.join(d, "PENDING")):
                if os.path.exists(os.path.join(d, "PENDING")):
                    seen.setdefault(digest(os.path.join(d, f"{pipeline.name}_s{k}.featurization")), k)
                skipped += 1
                continue
            if os.path.exists(os.path.join(d, "FAILED")):
                if not args.retry_failed:
                    skipped += 1
                    continue
                os.remove(os.path.join(d, "FAILED"))
            todo.append((k, d, sample))
        # Compile in parallel, then benchmark one at a time with no compile competing for cores.
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            compiled = list(pool.map(
                lambda t: locked_compile(args, target, rungen_objs, pipeline, t[0], t[1]), todo))
        runtimes = []
        for (k, d, sample), secs in zip(todo, compiled):
            if secs is None:
                failed += 1
                continue
            compile_seconds += secs
            feat = os.path.join(d, f"{pipeline.name}_s{k}.featurization")
            key = digest(feat)
            if key in seen:
                # The same schedule as an earlier sample: timing it again adds no information.
                with open(os.path.join(d, "DUPLICATE"), "w") as f:
                    f.write(f"same featurization as schedule {seen[key]}\n")
                if os.path.exists(os.path.join(d, "bench")):
                    os.remove(os.path.join(d, "bench"))
                duplicates += 1
                continue
            if args.compile_only:
                if os.path.getsize(feat) == 0:
                    mark_failed(d, "empty featurization (the scheduler fell back)")
                    failed += 1
                    continue
                with open(os.path.join(d, "PENDING"), "w") as f:
                    f.write(f"{pipeline.id} {k}\n")
                seen[key] = k
                pending += 1
                continue
            t0 = time.monotonic()
            try:
                ms = benchmark(args, d)
            except HostBusy as busy:
                # The build stays; the next run of the same command times it.
                bench_seconds += time.monotonic() - t0
                deferred += 1
                print(f"[{pi}/{len(pipelines)}] {pipeline.name} s{k}: not timed, the host was "
                      f"busy beside it ({busy} cores of other work); run again to time it",
                      flush=True)
                continue
            bench_seconds += time.monotonic() - t0
            if ms is None:
                failed += 1
                continue
            if os.path.getsize(feat) == 0:
                # The scheduler fell back (Hkfac writes no featurization then): not a sample.
                mark_failed(d, "empty featurization (the scheduler fell back)")
                failed += 1
                continue
            write_sample(feat, ms, pipeline.id, k, sample)
            seen[key] = k
            if checked is None:
                checked = cross_check(feat, ms, pipeline.id, k, sample)
            if not args.keep_bench:
                os.remove(os.path.join(d, "bench"))  # ~1 MB each; the sample is what is kept
            made += 1
            runtimes.append(ms)
            rate = made / max(time.monotonic() - start, 1e-9) * 60
            print(f"[{pi}/{len(pipelines)}] {pipeline.name} s{k}: {ms:.3f} ms "
                  f"(compile {secs:.1f} s) | {made} made, {duplicates} duplicates, "
                  f"{skipped} skipped, {failed} failed of {total}, {rate:.2f} samples/min",
                  flush=True)
        if runtimes:
            summary.append(f"{pipeline.name} (id {pipeline.id}): {len(runtimes)} new samples, "
                           f"{min(runtimes):.3f}..{max(runtimes):.3f} ms")

    elapsed = time.monotonic() - start
    lines = [f"pipelines: {len(pipelines)}, schedules each: {args.schedules}",
             f"samples made: {made}, duplicate schedules not timed: {duplicates}, "
             f"skipped (done, duplicate or failed before): {skipped}, failed: {failed}"
             + (f", compiled and pending a device: {pending}" if args.compile_only else "")
             + (f", not timed on a busy host (run again): {deferred}" if deferred else ""),
             f"time: {elapsed:.0f} s ({made / max(elapsed, 1e-9) * 60:.2f} samples/min; "
             f"compile {compile_seconds:.0f} s summed over jobs, benchmark {bench_seconds:.0f} s)",
             f"writer check: {checked or 'no new sample'}"] + summary
    with open(os.path.join(args.out, "summary.txt"), "a") as f:
        f.write(time.strftime("%Y-%m-%d %H:%M:%S") + "\n" + "\n".join(lines) + "\n\n")
    print("\n".join(lines))
    # 3: some schedules are built but untimed (a busy host); the same command again times them.
    return 3 if deferred else 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, subprocess.SubprocessError, RuntimeError, ValueError) as e:
        # Everything done so far is kept; rerunning the same command resumes.
        print(f"generate_data: {e}", file=sys.stderr)
        sys.exit(2)
