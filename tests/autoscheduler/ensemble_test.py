#!/usr/bin/env python3
"""An ensemble of weights files (HL_WEIGHTS_DIR=a.weights:b.weights:...) scores a schedule with the
median of what each file predicts for it alone, as the predict tool computes it from the schedule's
featurization: of two members their geometric mean, of three the middle one, whichever file that
is, and the predict tool scores the list alike; an empty entry or a missing member is an error
naming it.

  ensemble_test.py SOURCE_DIR BUILD_DIR WORK_DIR
"""
import math
import os
import re
import shutil
import struct
import subprocess
import sys


def schedule(build, work, weights, tag):
    """Runs unsharp's generator with Hkfac and `weights`: (exit code, log, featurization path)."""
    out = os.path.join(work, tag)
    os.makedirs(out, exist_ok=True)
    cmd = [os.path.join(build, "apps", "pipelines", "hkfac_pipeline_unsharp"), "-g", "unsharp",
           "-f", "unsharp", "-o", out, "-e", "schedule,featurization",
           "-p", os.path.join(build, "autoscheduler_plugin", "libautoschedule_hkfac.so"),
           "-s", "Hkfac", "target=x86-64-linux-avx-avx2-f16c-fma-sse41-no_runtime",
           "auto_schedule=true", "machine_params=2,16777216,40"]
    env = dict(os.environ, HL_WEIGHTS_DIR=weights, HL_BEAM_SIZE="1", HL_DEBUG_AUTOSCHEDULE="1",
               HKFAC_TUNE_SECONDS="0", HKFAC_CACHE_DIR="off")
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout, os.path.join(out, "unsharp.featurization")


def predict(build, work, weights, featurization):
    """What the predict tool makes of a featurization under one weights file."""
    sample = os.path.join(work, "s.sample")
    with open(featurization, "rb") as f, open(sample, "wb") as s:
        s.write(f.read() + struct.pack("<fii", 1.0, 0, 0))
    listing, csv = os.path.join(work, "list.txt"), os.path.join(work, "p.csv")
    with open(listing, "w") as f:
        f.write(sample + "\n")
    subprocess.run([os.path.join(build, "apps", "tools", "predict"), f"--weights={weights}",
                    f"--samples={listing}", "--num_cores=2", f"--predictions_file={csv}"],
                   check=True, stdout=subprocess.DEVNULL)
    with open(csv) as f:
        return float(f.read().strip().splitlines()[-1].split(",")[1])


def main():
    src, build, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    # Files trained on different data (each without one app): different models.
    a, b, c = (os.path.join(src, "weights", f"{app}.weights") for app in ("bgu", "harris", "hist"))
    rc, log, feat = schedule(build, work, f"{a}:{b}", "ensemble")
    assert rc == 0, log
    assert "an ensemble of 2" in log, log
    cost = float(re.search(r"predicted cost ([0-9.eE+-]+)", log).group(1))
    pa, pb = predict(build, work, a, feat), predict(build, work, b, feat)
    assert abs(pa - pb) > 1e-3 * max(pa, pb), f"the members agree ({pa}, {pb}): no test"
    mean = math.sqrt(pa * pb)
    assert abs(cost - mean) <= 1e-4 * mean, f"ensemble {cost}, geometric mean of {pa}, {pb}: {mean}"

    # Three members: the middle prediction, not the mean; the order of the list does not matter.
    costs = []
    for order in ((a, b, c), (c, a, b)):
        rc, log, feat3 = schedule(build, work, ":".join(order), "ensemble3")
        assert rc == 0 and "an ensemble of 3" in log, log
        costs.append(float(re.search(r"predicted cost ([0-9.eE+-]+)", log).group(1)))
    p3 = sorted(predict(build, work, w, feat3) for w in (a, b, c))
    assert p3[2] - p3[0] > 1e-3 * p3[2], f"the members agree ({p3}): no test"
    mid, gmean = p3[1], (p3[0] * p3[1] * p3[2]) ** (1 / 3)
    assert abs(mid - gmean) > 1e-3 * mid, f"median and geometric mean agree ({p3}): no test"
    for c3 in costs:
        assert abs(c3 - mid) <= 1e-4 * mid, f"ensemble of 3 {c3}, median of {p3}: {mid}"
    # The predict tool scores the same list as the plugin does.
    listed = predict(build, work, ":".join((c, b, a)), feat3)
    assert abs(listed - mid) <= 1e-4 * mid, f"predict of the list {listed}, median {mid}"

    for weights, why in ((f"{a}::{b}", "empty entry"),
                         (f"{a}:{os.path.join(work, 'none.weights')}", "none.weights")):
        rc, log, _ = schedule(build, work, weights, "bad")
        assert "HL_WEIGHTS_DIR" in log and why in log, f"{weights}: no error naming {why}:\n{log}"
    print(f"ensemble: {cost:.6g} = sqrt({pa:.6g} * {pb:.6g}); of three {costs[0]:.6g} = median of "
          f"{', '.join(f'{p:.6g}' for p in p3)}; bad lists named")


if __name__ == "__main__":
    main()
