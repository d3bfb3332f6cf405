#!/usr/bin/env python3
"""apps/tools/refeaturize.py against the plugin's own featurization of the same schedule.

A matrix product's schedule is featurized by the plugin directly (the reference). Archived copies
of it are then carried by refeaturize.py: the unchanged file must come back byte for byte; one
whose vectorized update rows carry other per-vector load features (as version 102 wrote them)
must come back equal to the reference, with its sample's runtime trailer kept; one that differs
anywhere else (a pure stage's per-vector feature, an algorithm feature, its length) must be
refused by name and not written.

  refeaturize_test.py SOURCE_DIR BUILD_DIR WORK_DIR
"""
import os
import shutil
import struct
import subprocess
import sys

S, A = 39, 287
ROW = S + A
PER_VECTOR = (26, 27, 31, 32)  # scalar, vector loads; unique bytes, lines per vector
VECTOR_SIZE = 22


def floats(path):
    with open(path, "rb") as f:
        b = f.read()
    return list(struct.unpack(f"<{len(b) // 4}f", b))


def write(path, values, trailer=b""):
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{len(values)}f", *values) + trailer)


def main():
    src, build, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    gen = os.path.join(build, "apps", "pipelines", "hkfac_pipeline_cuda_mat_mul")
    plugin = os.path.join(build, "autoscheduler_plugin", "libautoschedule_hkfac.so")
    ref_dir = os.path.join(work, "ref")
    os.makedirs(ref_dir)
    cmd = [gen, "-g", "cuda_mat_mul", "-f", "mm", "-o", ref_dir, "-e", "schedule,featurization",
           "-p", plugin, "-s", "Hkfac", "target=x86-64-linux-avx-avx2-f16c-fma-sse41-no_runtime",
           "auto_schedule=true", "machine_params=2,16777216,40"]
    env = dict(os.environ, HL_RANDOMIZE_WEIGHTS="1", HL_BEAM_SIZE="1", HL_DEBUG_AUTOSCHEDULE="2")
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, check=True).stdout
    # Stage rows in realization order: "a_im(1) b_im(1) prod(2) c(1)".
    order = next(l for l in out.splitlines() if "realization order:" in l).split(":", 2)[2].split()
    rows, r = {}, 0
    for item in order:
        name, n = item[:-1].split("(")
        for k in range(int(n)):
            rows[(name, k)] = r
            r += 1
    ref = floats(os.path.join(ref_dir, "mm.featurization"))
    assert len(ref) == ROW * r, (len(ref), r)
    update, pure = rows[("prod", 1)], rows[("prod", 0)]
    assert ref[update * ROW + VECTOR_SIZE] > 1, "the product's update is not vectorized"

    archive = os.path.join(work, "archive", "cuda_mat_mul")
    trailer = struct.pack("<fii", 12.5, 7, 3)

    def sample(k, values):
        d = os.path.join(archive, f"cuda_mat_mul_s{k}")
        os.makedirs(d)
        write(os.path.join(d, f"cuda_mat_mul_s{k}.featurization"), values)
        write(os.path.join(d, f"cuda_mat_mul_s{k}.sample"), values, trailer)
        with open(os.path.join(d, "search.txt"), "w") as f:
            f.write("HL_BEAM_SIZE=1\n" + " ".join(cmd) + "\n")

    sample(0, ref)
    old = list(ref)
    for i, v in zip(PER_VECTOR, (8.0, 1.0, 64.0, 9.0)):  # 102's values: B a gather along k
        old[update * ROW + i] = v
    assert old != ref
    sample(1, old)
    bad_pure = list(ref)
    bad_pure[pure * ROW + PER_VECTOR[0]] += 3
    sample(2, bad_pure)
    bad_algo = list(ref)
    bad_algo[update * ROW + S + 10] += 1
    sample(3, bad_algo)
    sample(4, ref[:-1])

    out_dir = os.path.join(work, "out")
    r = subprocess.run([sys.executable, os.path.join(src, "apps", "tools", "refeaturize.py"),
                        "--samples", os.path.join(work, "archive"), "--out", out_dir,
                        "--build", build, "--jobs", "1"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(r.stdout)
    assert r.returncode == 1, "refused files must make the run fail"
    got = os.path.join(out_dir, "cuda_mat_mul")
    for k in (0, 1):
        base = os.path.join(got, f"cuda_mat_mul_s{k}", f"cuda_mat_mul_s{k}")
        assert floats(base + ".featurization") == ref, f"s{k}: not the plugin's featurization"
        with open(base + ".sample", "rb") as f:
            b = f.read()
        assert b[-12:] == trailer and floats(base + ".featurization") == \
            list(struct.unpack(f"<{(len(b) - 12) // 4}f", b[:-12])), f"s{k}: sample"
        assert os.path.exists(os.path.join(got, f"cuda_mat_mul_s{k}", "search.txt"))
    for k, why in ((2, "where nothing changed"), (3, "other algorithm features"),
                   (4, "holds")):
        base = os.path.join(got, f"cuda_mat_mul_s{k}", f"cuda_mat_mul_s{k}")
        assert not os.path.exists(base + ".featurization"), f"s{k} was written"
        assert not os.path.exists(base + ".sample"), f"s{k}'s sample was written"
        assert any(f"cuda_mat_mul_s{k}.featurization" in l and why in l
                   for l in r.stdout.splitlines()), f"s{k}: no refusal naming it ({why})"
    assert "3 refused" in r.stdout, r.stdout
    print("refeaturize: 2 carried to the plugin's featurization, 3 refused by name")


if __name__ == "__main__":
    main()
