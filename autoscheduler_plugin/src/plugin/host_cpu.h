// Whether code for a Halide target can run on this machine, and the target to time it with.
#pragma once

#include <string>
#include <vector>

#include "Halide.h"

namespace hkfac::sched {

// Measured selection (measure.h) times candidates on this machine, so it needs code this CPU
// runs. The instruction-set features are read from CPUID here rather than taken from Halide's
// get_host_target: Halide 14 claims avx512_sapphirerapids wherever AVX512-VNNI and AVX512-BF16
// exist, which AMD Zen 4 and 5 have without AVX512-FP16, and code built for it can stop with
// SIGILL there (a vmovw). A target that claims what the CPU lacks is timed without those features
// and `missing` names them, so the user is told once and the timings stay real.
struct HostRun {
  bool runs = false;   // same OS, architecture and bits, a CPU target
  std::string why_not; // when it does not: one clause ("a cross target (arm-64-linux)")
  Halide::Target jit;  // the target candidates are compiled for in-process (JIT)
  std::vector<std::string> missing; // features of the target this CPU lacks, by Halide's names
  std::string missing_detail;       // which CPUID bit is absent, for the message
};

HostRun host_run(const Halide::Target &target);

// The instruction-set features this CPU has, as Halide names them (x86: CPUID; elsewhere the
// features of Halide's host target).
std::vector<Halide::Target::Feature> host_isa_features();

} // namespace hkfac::sched
