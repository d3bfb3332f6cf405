// A small interleaved benchmark harness: contenders run A B C A B C …, ratios are per round.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "hkfac/device.h"

namespace hkfac::bench {

struct Contender {
  std::string name;          // "halide", "openblas", "eigen", "cublas", ...
  std::function<void()> run; // one call of the operation; must leave results where checked
  // Waits for the calls' device work; empty means hkfac::synchronize on the run's device. cuBLAS
  // works in the CUDA runtime's context, which Halide's synchronisation does not cover.
  std::function<void()> sync = {};
};

struct Case {
  std::string group; // kernel group, e.g. "covariance"
  std::string shape; // e.g. "d=1001 n=128"
  double flops = 0;  // useful floating-point operations per call (for GFLOP/s)
  // Builds the contenders (allocating inputs); first contender is the generated kernel, the
  // second the anchor that ratios are taken against (OpenBLAS where it applies).
  std::function<std::vector<Contender>()> make;
};

// Registers a case factory; call from a static initialiser in <group>_bench.cpp.
struct Register {
  explicit Register(std::function<std::vector<Case>(bool quick)> cases);
};

// The device the generated kernels run on in this run (--device); cases pass it to the kernels.
hkfac::Device device();

struct Options {
  hkfac::Device device = hkfac::Device::cpu;
  bool quick = false; // demo mode: few rounds, generated kernels only
  int rounds = 15;    // interleaved rounds (median taken over these)
  double min_round_s = 0.02;
  std::string only;     // run groups whose name contains this
  std::string markdown; // also write the table here
};

int run_all(const Options &opt);

} // namespace hkfac::bench
