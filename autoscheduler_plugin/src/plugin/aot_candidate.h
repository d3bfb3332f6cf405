// A candidate compiled ahead of time and linked into the timing runner, to run in a fresh process.
#pragma once

#include <string>

#include "Halide.h"

namespace hkfac::sched {

// What building candidates ahead of time needs: a C++ compiler (to compile the timing runner
// once, src/runner/timing_runner.cpp, and to link each candidate with it) and Halide's runtime
// header. Where either is missing, candidates are timed in-process instead (measure.h).
struct AotToolchain {
  bool ok = false;
  std::string why_not;       // when not: one clause
  std::string cxx;           // the compiler
  std::string runner_object; // the timing runner, compiled
};

// $CXX, else the compiler that built the plugin, else c++, g++ or clang++ on the PATH; the
// runner compiled into `dir` once per compiler and runner source (a file named by their hash,
// written through a rename, so generators of a parallel build share it).
AotToolchain aot_toolchain(const std::string &dir);

// Compiles the pipeline as it is scheduled now into `work`/candidate<index>.a (function
// hkfac_candidate, for `target`, with its own runtime) and links the runner into
// `work`/candidate<index>; returns that path. Throws (a Halide error, or PluginError naming the
// failing command) where it cannot. Run in a child process: it compiles with LLVM and starts
// the linker.
std::string build_candidate(const Halide::Pipeline &pipeline, const Halide::Target &target,
                            const AotToolchain &tools, const std::string &work, int index);

} // namespace hkfac::sched
