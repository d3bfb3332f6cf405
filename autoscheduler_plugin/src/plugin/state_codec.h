// A complete schedule's decisions as text, for the tuning cache.
#pragma once

#include <memory>
#include <string>

#include "pipeline_analysis.h"
#include "schedule_state.h"

namespace hkfac::sched {

// Every FuncChoice field, one Func per line in realization order, after a version line. The
// cache keys schedules by the pipeline's fingerprint, which covers the plugin's schedule format
// (kScheduleFormat), so a decoded schedule belongs to the same Funcs; decoding still checks the
// count of Funcs, every field's range and every compute_at site, and returns nullptr on any
// mismatch rather than guess.
constexpr int kScheduleFormat = 2;

std::string encode_state(const State &state);
std::shared_ptr<State> decode_state(const std::string &text, const PipelineAnalysis &dag);

// A short hash of a schedule's decisions (its samples' key in the cache).
std::string state_hash(const State &state);

} // namespace hkfac::sched
