#!/usr/bin/env python3
"""generate_data.py across the processes of an Open MPI job, on one host or many.

    mpirun -np 8 --hostfile hosts python3 apps/tools/generate_data_mpi.py --out OUT \
        [generate_data.py options: --random, --app, --scheduler, --plugin, ...]

mpirun starts the processes (ranks) on the hosts of the hostfile; each rank runs generate_data.py
on its share of the pipelines (--shard RANK/SIZE: every SIZE-th pipeline from its rank), so no
two ranks make the same sample and their outputs merge without collision (a sample's directory is
named by its pipeline and schedule). Ranks on one host take turns through a host-wide lock file
(--host-lock, in /tmp): compiles share it, a benchmark holds it alone, so nothing of ours runs
beside a benchmark (and a benchmark beside other work on the host is retried, then left for the
same command to time again: generate_data.py --max-foreign-load). A rank's compile jobs default
to its host's cores divided by the ranks there.

Each rank logs to OUT/mpi_logs/rank<R>.log. A rank or host that dies loses only the samples it had
not finished (every sample is written whole or not at all); running the same command again
resumes every share. Where OUT is not on a file system all hosts share, each host writes its own
OUT, and `--merge DIR... --into OUT` gathers them afterwards.

The rank comes from the environment Open MPI gives each process (OMPI_COMM_WORLD_RANK and its
PMIx/PMI equivalents), so the driver needs no MPI library: the ranks do not talk to each other.
Python 3 standard library only.
"""
import argparse
import os
import shutil
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def mpi_env(names):
    for n in names:
        v = os.environ.get(n)
        if v is not None and v.isdigit():
            return int(v)
    return None


def merge(sources, into):
    """Copies every sample directory of `sources` into `into`; returns (copied, already there)."""
    copied = present = 0
    for src in sources:
        for pipeline in sorted(os.listdir(src)):
            pdir = os.path.join(src, pipeline)
            if pipeline.startswith(("_", "mpi_logs")) or not os.path.isdir(pdir):
                continue
            for sched in sorted(os.listdir(pdir)):
                s = os.path.join(pdir, sched)
                if not os.path.exists(os.path.join(s, sched + ".sample")):
                    continue  # unfinished, failed or duplicate: nothing to merge
                d = os.path.join(into, pipeline, sched)
                if os.path.exists(os.path.join(d, sched + ".sample")):
                    present += 1
                    continue
                os.makedirs(os.path.dirname(d), exist_ok=True)
                tmp = d + ".merging"
                shutil.rmtree(tmp, ignore_errors=True)
                shutil.copytree(s, tmp, ignore=shutil.ignore_patterns("bench"))
                shutil.rmtree(d, ignore_errors=True)
                os.replace(tmp, d)
                copied += 1
    return copied, present


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    p.add_argument("--out")
    p.add_argument("--jobs", type=int)
    p.add_argument("--merge", nargs="+", metavar="DIR")
    p.add_argument("--into")
    p.add_argument("-h", "--help", action="store_true")
    args, rest = p.parse_known_args()
    if args.help:
        print(__doc__)
        return 0
    if args.merge:
        if not args.into:
            p.error("--merge needs --into")
        copied, present = merge(args.merge, args.into)
        print(f"generate_data_mpi: merged {copied} samples into {args.into} "
              f"({present} were there already)")
        return 0
    if not args.out:
        p.error("--out is required")
    for flag in ("--shard", "--host-lock"):
        if any(a == flag or a.startswith(flag + "=") for a in rest):
            p.error(f"{flag} is set per rank by this driver")
    rank = mpi_env(("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"))
    size = mpi_env(("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"))
    if rank is None or size is None:
        print("generate_data_mpi: no MPI rank in the environment; start it with mpirun "
              "(or run generate_data.py directly)", file=sys.stderr)
        return 2
    local = mpi_env(("OMPI_COMM_WORLD_LOCAL_SIZE",)) or 1
    jobs = args.jobs or max(1, (os.cpu_count() or 1) // local)
    logs = os.path.join(args.out, "mpi_logs")
    os.makedirs(logs, exist_ok=True)
    lock = f"/tmp/hkfac_generate_data.{os.getuid()}.lock"
    cmd = [sys.executable, os.path.join(HERE, "generate_data.py"), "--out", args.out,
           "--jobs", str(jobs), "--shard", f"{rank}/{size}", "--host-lock", lock] + rest
    log = os.path.join(logs, f"rank{rank}.log")
    with open(log, "a") as f:
        f.write(f"rank {rank} of {size} on {socket.gethostname()}: {' '.join(cmd)}\n")
        f.flush()
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    # generate_data.py exits 1 when some schedule failed (marked FAILED, part of the data) and 3
    # when some were left untimed on a busy host (the same command again times them): neither is
    # a reason for mpirun to stop the other ranks, which it does when one exits non-zero.
    status = 0 if rc in (0, 1, 3) else rc
    with open(log) as f:
        last = [line for line in f.read().splitlines() if line.startswith("samples made:")]
    print(f"rank {rank}/{size} on {socket.gethostname()}: "
          f"{last[-1] if last else 'no summary'} (exit {rc}, log {log})", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
