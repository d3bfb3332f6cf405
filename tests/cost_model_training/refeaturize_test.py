#!/usr/bin/env python3
"""apps/tools/refeaturize.py against the plugin's own featurization of the same schedule.

A matrix product's schedule whose update is blocked by rows is featurized by the plugin directly
(the reference). Archived copies of it are then carried by refeaturize.py: the unchanged file
must come back byte for byte; ones whose blocked update carries other per-vector load features
(as version 103 wrote them, counting the shared load once per row, and as 102 wrote them) must
come back equal to the reference, with their sample's runtime trailer kept; one that differs
anywhere else (a pure stage's per-vector feature, an algorithm feature, its length) must be
refused by name and not written. Then bgu, whose moments update has an innermost RVar of 8, the
extent a block of rows may have too: a blocked schedule's file as 103 wrote it is carried to the
reference with its schedule source, refused by name without one, and left as it is with a source
that blocks nothing. Last, bgu with affine inlined: its row as 104 wrote it (every call counted)
is carried to the reference, the reference itself is left as it is, and a row that is neither is
refused by name.

  refeaturize_test.py SOURCE_DIR BUILD_DIR WORK_DIR
"""
import os
import re
import shutil
import struct
import subprocess
import sys

S, A = 39, 287
ROW = S + A
PER_VECTOR = (26, 27, 31, 32)  # scalar, vector loads; unique bytes, lines per vector
VECTOR_SIZE = 22
UNROLLED = 8
INLINED = 17  # an inlined Func's work: copies of it computed (calls, before 105)


def floats(path):
    with open(path, "rb") as f:
        b = f.read()
    return list(struct.unpack(f"<{len(b) // 4}f", b))


def write(path, values, trailer=b""):
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{len(values)}f", *values) + trailer)


PURE_UNROLL = re.compile(r"^\s*(\w+)\.update\((\d+)\)\.unroll\((\w+)\);", re.M)


def featurize(build, app, out_dir, seed, log=False):
    """The plugin's schedule and featurization of `app` under random model `seed`: (command,
    stage rows by (func, stage index), features, schedule source[, the plugin's log])."""
    gen = os.path.join(build, "apps", "pipelines", f"hkfac_pipeline_{app}")
    plugin = os.path.join(build, "autoscheduler_plugin", "libautoschedule_hkfac.so")
    os.makedirs(out_dir, exist_ok=True)
    cmd = [gen, "-g", app, "-f", app, "-o", out_dir, "-e", "schedule,featurization",
           "-p", plugin, "-s", "Hkfac", "target=x86-64-linux-avx-avx2-f16c-fma-sse41-no_runtime",
           "auto_schedule=true", "machine_params=2,16777216,40"]
    env = dict(os.environ, HL_RANDOMIZE_WEIGHTS=str(seed), HL_BEAM_SIZE="1",
               HL_DEBUG_AUTOSCHEDULE="2")
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, check=True).stdout
    # Stage rows in realization order, e.g. "a_im(1) b_im(1) prod(2) c(1)".
    order = next(l for l in out.splitlines() if "realization order:" in l).split(":", 2)[2].split()
    rows, r = {}, 0
    for item in order:
        name, n = item[:-1].split("(")
        for k in range(int(n)):
            rows[(name, k)] = r
            r += 1
    ref = floats(os.path.join(out_dir, f"{app}.featurization"))
    assert len(ref) == ROW * r, (len(ref), r)
    with open(os.path.join(out_dir, f"{app}.schedule.h")) as f:
        source = f.read()
    return (cmd, rows, ref, source, out) if log else (cmd, rows, ref, source)


def unrolled_vars(source, func):
    """The (Var or RVar) names func's first update unrolls, and which of them are pure Vars."""
    names = {v for fn, k, v in PURE_UNROLL.findall(source) if fn == func and k == "0"}
    pure = set(re.findall(r"^\s*Var (\w+)\(", source, re.M))
    return names, names & pure


def run_refeaturize(src, build, archive, out_dir):
    r = subprocess.run([sys.executable, os.path.join(src, "apps", "tools", "refeaturize.py"),
                        "--samples", archive, "--out", out_dir, "--build", build, "--jobs", "1"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(r.stdout)
    return r


def main():
    src, build, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    trailer = struct.pack("<fii", 12.5, 7, 3)

    def sample(archive, app, k, values, cmd, source=None):
        d = os.path.join(archive, app, f"{app}_s{k}")
        os.makedirs(d)
        write(os.path.join(d, f"{app}_s{k}.featurization"), values)
        write(os.path.join(d, f"{app}_s{k}.sample"), values, trailer)
        with open(os.path.join(d, "search.txt"), "w") as f:
            f.write("HL_BEAM_SIZE=1\n" + " ".join(cmd) + "\n")
        if source is not None:
            with open(os.path.join(d, f"{app}_s{k}.schedule.h"), "w") as f:
                f.write(source)

    def carried(out_dir, app, k, ref):
        base = os.path.join(out_dir, app, f"{app}_s{k}", f"{app}_s{k}")
        assert floats(base + ".featurization") == ref, f"{app} s{k}: not the plugin's featurization"
        with open(base + ".sample", "rb") as f:
            b = f.read()
        assert b[-12:] == trailer and floats(base + ".featurization") == \
            list(struct.unpack(f"<{(len(b) - 12) // 4}f", b[:-12])), f"{app} s{k}: sample"
        assert os.path.exists(os.path.join(out_dir, app, f"{app}_s{k}", "search.txt"))

    def refused(out_dir, stdout, app, k, why):
        base = os.path.join(out_dir, app, f"{app}_s{k}", f"{app}_s{k}")
        assert not os.path.exists(base + ".featurization"), f"{app} s{k} was written"
        assert not os.path.exists(base + ".sample"), f"{app} s{k}'s sample was written"
        assert any(f"{app}_s{k}.featurization" in l and why in l
                   for l in stdout.splitlines()), f"{app} s{k}: no refusal naming it ({why})"

    # A matrix product blocked by rows, one vector wide (the archived versions had no column
    # blocks, `j_u`): the first random model that blocks it so.
    for seed in range(1, 41):
        cmd, rows, ref, source = featurize(build, "cuda_mat_mul", os.path.join(work, "ref"), seed)
        update, pure = rows[("prod", 1)], rows[("prod", 0)]
        blocked = unrolled_vars(source, "prod")[1]
        if (blocked and not any(v.endswith("_u") for v in blocked) and
                ref[update * ROW + VECTOR_SIZE] > 1):
            break
    else:
        raise AssertionError("no random model of 40 blocked the product's rows")
    rows_blocked = int(ref[update * ROW + UNROLLED])
    assert rows_blocked in (4, 8), rows_blocked
    # b(j, k) is one vector load shared by the block, a(k, i) one broadcast per row.
    assert ref[update * ROW + PER_VECTOR[1]] == 1.0 / rows_blocked, ref[update * ROW + 27]

    archive = os.path.join(work, "archive")
    sample(archive, "cuda_mat_mul", 0, ref, cmd, source)
    for k, values in ((1, (1.0, 1.0, 36.0, 2.0)),   # 103's: b's load counted once per row
                      (5, (8.0, 1.0, 64.0, 9.0))):  # 102's: b a gather along k
        old = list(ref)
        for i, v in zip(PER_VECTOR, values):
            old[update * ROW + i] = v
        assert old != ref
        sample(archive, "cuda_mat_mul", k, old, cmd, source if k == 1 else None)
    bad_pure = list(ref)
    bad_pure[pure * ROW + PER_VECTOR[0]] += 3
    sample(archive, "cuda_mat_mul", 2, bad_pure, cmd)
    bad_algo = list(ref)
    bad_algo[update * ROW + S + 10] += 1
    sample(archive, "cuda_mat_mul", 3, bad_algo, cmd)
    sample(archive, "cuda_mat_mul", 4, ref[:-1], cmd)

    # bgu's moments update has an innermost RVar of 8, the extent a block of rows may have too.
    # B: a random model's schedule that blocks 8 rows of it; P: the per-row loads (what 103
    # wrote for B, and what an unrolled RVar keeps), from a schedule that vectorizes it unblocked.
    found = {}
    for seed in range(1, 41):
        bcmd, brows, bref, bsource = featurize(build, "bgu", os.path.join(work, f"bgu{seed}"), seed)
        moments = brows[("moments", 1)]
        row = bref[moments * ROW:(moments + 1) * ROW]
        if row[VECTOR_SIZE] == 8:
            blocked = bool(unrolled_vars(bsource, "moments")[1])
            if not blocked or row[UNROLLED] == 8:
                found.setdefault(blocked, (bcmd, moments, bref, bsource))
        if len(found) == 2:
            break
    assert len(found) == 2, f"40 random models gave only {list(found)} (blocked) for moments"
    bcmd, moments, bblocked, bsource = found[True]
    per_row = list(bblocked)
    for i in PER_VECTOR:
        per_row[moments * ROW + i] = found[False][2][moments * ROW + i]
    assert per_row != bblocked, "blocking moments' rows shares none of its loads"
    no_block = "\n".join(l for l in bsource.splitlines()
                         if not l.strip().startswith("moments.update(0).unroll("))
    sample(archive, "bgu", 0, bblocked, bcmd, bsource)
    sample(archive, "bgu", 1, per_row, bcmd, bsource)  # 103's counts: carried to B
    sample(archive, "bgu", 2, per_row, bcmd)           # no source: refused
    sample(archive, "bgu", 3, per_row, bcmd, no_block)  # a source that blocks nothing: as it is

    # bgu's affine inlined into output, whose four calls share the trilinear lookup's work after
    # CSE: version 104 counted all four calls (INLINED), 105 the copies the plugin logs
    # ("affine in output.0: K of 4"). A schedule that computes model (affine's producer), so
    # affine's row is the only one that changes.
    for seed in range(1, 61):
        icmd, irows, iref, isource, log = featurize(build, "bgu", os.path.join(work, f"i{seed}"),
                                                     seed, log=True)
        affine, model = irows[("affine", 0)], irows[("model", 0)]
        if iref[affine * ROW + INLINED] > 0 and iref[model * ROW + INLINED] == 0:
            break
    else:
        raise AssertionError("no random model of 60 inlined affine and computed model")
    copies = float(re.search(r"affine in output\.0: ([0-9.]+) of 4;", log).group(1))
    assert 1 < copies < 4, copies
    by_calls = list(iref)
    by_calls[affine * ROW + INLINED] = iref[affine * ROW + INLINED] * 4 / copies
    sample(archive, "bgu", 4, by_calls, icmd, isource)  # 104's count: carried to the reference
    sample(archive, "bgu", 5, iref, icmd, isource)      # already 105's: as it is
    twice = list(by_calls)
    twice[affine * ROW + INLINED] *= 2
    sample(archive, "bgu", 6, twice, icmd, isource)     # neither: refused

    out_dir = os.path.join(work, "out")
    r = run_refeaturize(src, build, archive, out_dir)
    assert r.returncode == 1, "refused files must make the run fail"
    for k in (0, 1, 5):
        carried(out_dir, "cuda_mat_mul", k, ref)
    for k, want in ((0, bblocked), (1, bblocked), (3, per_row), (4, iref), (5, iref)):
        carried(out_dir, "bgu", k, want)
    for app, k, why in (("cuda_mat_mul", 2, "where nothing changed"),
                        ("cuda_mat_mul", 3, "other algorithm features"),
                        ("cuda_mat_mul", 4, "holds"),
                        ("bgu", 2, "no schedule source tells which"),
                        ("bgu", 6, "inlined calls")):
        refused(out_dir, r.stdout, app, k, why)
    assert "5 refused" in r.stdout, r.stdout
    print("refeaturize: 8 carried to the plugin's featurization, 5 refused by name")


if __name__ == "__main__":
    main()
