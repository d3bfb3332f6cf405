// A pipeline's inputs and outputs at their estimated sizes, for timing candidates.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "Halide.h"
#include "pipeline_analysis.h"

namespace hkfac::sched {

// What one run of the pipeline at its estimates needs: every input buffer allocated over its
// estimated region and filled with seeded noise (floats in [0, 1), integers over their type's
// range, as Halide's RunGen fills `random:` inputs), every scalar parameter at its estimate, and
// an output buffer per output (and tuple value) over its estimated region. A candidate is timed
// on the sizes it was searched for, with data that does not depend on the candidate.
class EstimatedRun {
public:
  // Collects the pipeline's parameters; `missing()` says what lacks an estimate.
  EstimatedRun(const PipelineAnalysis &dag, const std::vector<Halide::Internal::Function> &outputs);

  // Empty when every input can be bound; else the first parameter (and dimension) without an
  // estimate, e.g. "the input \"in\" has no estimate of dimension 1".
  const std::string &missing() const { return missing_; }

  // The inputs and outputs with their types and estimated regions (and scalars' values), one
  // per line: part of what identifies the pipeline (pipeline_fingerprint.h).
  std::string describe() const;

  // The same for the timing runner (src/runner/timing_runner.cpp): "buffer NAME DIMS MIN EXTENT
  // ..." per buffer argument, outputs included, and "scalar NAME VALUE" per scalar.
  std::string runner_spec() const;

  // Binds the inputs (allocating and filling them) and allocates the outputs. Call once, in the
  // process that runs the pipeline: it sets the parameters' buffers and scalars.
  void bind(uint64_t seed);

  // The output buffers, one per output Func and tuple value, in the pipeline's output order.
  Halide::Realization &outputs() { return *realization_; }

private:
  struct Input {
    Halide::Internal::Parameter param;
    std::vector<int> min, extent; // buffers
    Halide::Expr value;           // scalars: the estimate
  };
  std::vector<Input> inputs_;
  struct Output {
    std::string name; // the output buffer argument's name (the Func's, ".i" for tuple value i)
    Halide::Type type;
    std::vector<int> min, extent;
  };
  std::vector<Output> outputs_;
  std::vector<Halide::Buffer<>> output_buffers_;
  std::unique_ptr<Halide::Realization> realization_;
  std::string missing_;
};

} // namespace hkfac::sched
