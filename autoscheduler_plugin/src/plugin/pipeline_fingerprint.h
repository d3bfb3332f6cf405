// What identifies a pipeline for the tuning cache.
#pragma once

#include <string>
#include <vector>

#include "Halide.h"
#include "pipeline_analysis.h"

namespace hkfac::sched {

// A 128-bit hash (32 hex digits) of everything a measured schedule depends on: every Func's
// definitions as Halide prints them (values, arguments, predicates, reduction domains), its
// types, and the region the search gave it; the inputs' types and estimates and the scalar
// parameters' estimates; the target, machine_params, the feature versions and the plugin's
// schedule format. Any change to the algorithm or its sizes gives another fingerprint, so a
// cached schedule is never applied to a pipeline it was not measured on.
std::string pipeline_fingerprint(const PipelineAnalysis &dag,
                                 const std::vector<Halide::Internal::Function> &outputs,
                                 const Halide::Target &target, const std::string &machine_params);

// The outputs' names, for people reading the cache ("unsharp", "a, b").
std::string pipeline_name(const std::vector<Halide::Internal::Function> &outputs);

} // namespace hkfac::sched
