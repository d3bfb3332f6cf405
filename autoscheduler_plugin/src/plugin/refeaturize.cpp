// Rewriting archived featurizations with the current per-vector load features (see refeaturize.h).
#include "refeaturize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <vector>

#include "cost_model_features.h"
#include "input_error.h"
#include "schedule_features.h"
#include "schedule_writer.h"
#include "stage_reads.h"
#include "update_nest.h"

namespace hkfac::sched {

using namespace hkfac::cost_model;

namespace {

constexpr int kS = kCpuFeatureCount;
constexpr int kPerVector[] = {kCpuScalarLoadsPerVector, kCpuVectorLoadsPerVector,
                              kCpuUniqueBytesReadPerVector, kCpuUniqueLinesReadPerVector};

// Rewrites the inlined Funcs' work (kCpuInlinedCalls) from calls to copies after CSE
// (Access::inline_copies), consumers first as LoopNestModel counts them: a consumer's multiplier
// is its points computed (a computed Func's row) or its own inlined work. A row that is neither
// what calls give (version 104) nor what copies give (already carried) was made by other code.
std::string patch_inlined(const PipelineAnalysis &dag, std::vector<float> &f, int &rows_changed) {
  const size_t row = f.size() / std::max(1, dag.num_stages);
  const int n = static_cast<int>(dag.funcs.size());
  std::vector<size_t> first(n);
  for (int id = 0, r = 0; id < n; r += static_cast<int>(dag.funcs[id].stages.size()), ++id)
    first[id] = static_cast<size_t>(r);
  auto at = [&](int id) { return f.data() + first[id] * row; };
  std::vector<double> calls(n, 0), copies(n, 0); // inlined work by calls, and by copies
  for (int id = n - 1; id >= 0; --id) {
    float *o = at(id);
    if (!(o[kCpuInlinedCalls] > 0))
      continue;
    const FuncNode &fn = dag.funcs[id];
    if (fn.is_extern || fn.stages.size() != 1)
      return "stage " + std::to_string(first[id]) + " (" + fn.name + ") is inlined and cannot be";
    for (int g : fn.consumers) {
      const std::vector<StageNode> &stages = dag.funcs[g].stages;
      const bool computed = !(at(g)[kCpuInlinedCalls] > 0);
      for (const StageNode &s : stages) {
        const double points = at(g)[kCpuPointsTotal] * s.runs_per_point;
        const double c = s.calls_to(id), k = s.copies_of(id);
        calls[id] += c * (computed ? points : calls[g]);
        copies[id] += k * (computed ? points : copies[g]);
      }
    }
    const double was = o[kCpuInlinedCalls];
    auto near = [&](double v) { return std::fabs(v - was) <= 1e-4 * was; };
    if (static_cast<float>(copies[id]) == o[kCpuInlinedCalls] || near(copies[id])) {
      copies[id] = was; // carried already (or the calls share nothing)
      continue;
    }
    if (!near(calls[id]))
      return "stage " + std::to_string(first[id]) + " (" + fn.name + ") has " +
             std::to_string(was) + " inlined calls, recomputed " + std::to_string(calls[id]);
    calls[id] = was;
    o[kCpuInlinedCalls] = static_cast<float>(copies[id]);
    ++rows_changed;
  }
  return {};
}

// Rewrites one featurization in place in `f`; an empty string, or why it does not fit.
// `blocked`: the updates the schedule's source unrolls a pure Var of ("func.k" for func's
// update(k)), where the archive has that source; null where it does not.
std::string patch(const PipelineAnalysis &dag, const Parameters &params,
                  const std::set<std::string> *blocked, std::vector<float> &f, int &rows_changed) {
  const int algo = static_cast<int>(dag.funcs.empty() ? 0 : dag.funcs[0].stages[0].features.size());
  const size_t row = static_cast<size_t>(kS + algo);
  if (f.size() != row * dag.num_stages)
    return "holds " + std::to_string(f.size()) + " values, this pipeline's featurization " +
           std::to_string(row * dag.num_stages);
  size_t r = 0;
  for (const FuncNode &fn : dag.funcs) {
    for (const StageNode &s : fn.stages) {
      float *o = f.data() + r * row;
      for (size_t i = 0; i < s.features.size(); ++i)
        if (o[kS + i] != static_cast<float>(s.features[i]))
          return "stage " + std::to_string(r) + " (" + fn.name + ") has other algorithm features";
      const int vw = static_cast<int>(o[kCpuVectorSize]);
      // Rows of Funcs that are not computed (inlined) have no vector size and no such loads.
      if (vw >= 1) {
        // A blocked update's rows are its unrolled extent, unless an unrolled innermost RVar of
        // that extent could have made it: then the file does not tell which.
        int rows = 1;
        const float unrolled = o[kCpuUnrolledLoopExtent];
        if (vw > 1 && may_block_rows(fn, s) && (unrolled == 4 || unrolled == 8)) {
          const LoopDim &in = s.loops[0];
          rows = static_cast<int>(unrolled);
          if (in.is_rvar && in.constant_extent && in.rextent == unrolled) {
            if (!blocked)
              return "stage " + std::to_string(r) + " (" + fn.name + ") unrolls " +
                     std::to_string(rows) + ", which may be blocked rows or its innermost RVar, "
                     "and no schedule source tells which";
            const std::string stage = cpp_func_name(fn.name) + "." + std::to_string(s.index - 1);
            if (!blocked->count(stage))
              rows = 1;
          }
        }
        float fresh[kS] = {};
        const VectorLoads v = vector_loads(s, vw, rows);
        fresh[kCpuScalarLoadsPerVector] = static_cast<float>(v.scalar_loads);
        fresh[kCpuVectorLoadsPerVector] = static_cast<float>(v.vector_loads);
        fresh[kCpuUniqueBytesReadPerVector] = static_cast<float>(v.bytes);
        fresh[kCpuUniqueLinesReadPerVector] = static_cast<float>(v.lines);
        machine_adjusted_features(params, fresh, 1);
        bool changed = false;
        for (int i : kPerVector) {
          if (fresh[i] == o[i])
            continue;
          // Only a vectorized update may change; anything else means other code made the file.
          if (vw <= 1 || s.index == 0)
            return "stage " + std::to_string(r) + " (" + fn.name + ") feature " +
                   std::to_string(i) + " is " + std::to_string(o[i]) + ", recomputed " +
                   std::to_string(fresh[i]) + " where nothing changed";
          o[i] = fresh[i];
          changed = true;
        }
        rows_changed += changed;
      }
      ++r;
    }
  }
  return patch_inlined(dag, f, rows_changed);
}

} // namespace

int refeaturize(const PipelineAnalysis &dag, const Parameters &params, const std::string &list_file) {
  input_check(!params.gpu) << "Hkfac: HKFAC_REFEATURIZE carries CPU featurizations only\n";
  std::ifstream list(list_file);
  input_check(static_cast<bool>(list))
      << "Hkfac: HKFAC_REFEATURIZE=\"" << list_file << "\" cannot be read\n";
  int written = 0, refused = 0, rows_changed = 0;
  std::string line;
  while (std::getline(list, line)) {
    // "old new" or "old new blocked", blocked a comma-separated list of "func.k" or "-".
    std::istringstream fields(line);
    std::string from, to, hint;
    if (!(fields >> from >> to))
      continue;
    std::set<std::string> blocked;
    const bool hinted = static_cast<bool>(fields >> hint);
    for (size_t at = 0; hinted && hint != "-" && at <= hint.size();) {
      const size_t comma = std::min(hint.find(',', at), hint.size());
      blocked.insert(hint.substr(at, comma - at));
      at = comma + 1;
    }
    std::ifstream in(from, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string why = !in.eof() && !in ? "cannot be read" : "";
    std::vector<float> f(bytes.size() / sizeof(float));
    if (why.empty() && bytes.size() % sizeof(float) != 0)
      why = "is not whole float32 values";
    if (why.empty()) {
      std::memcpy(f.data(), bytes.data(), f.size() * sizeof(float));
      why = patch(dag, params, hinted ? &blocked : nullptr, f, rows_changed);
    }
    if (why.empty()) {
      std::ofstream out(to, std::ios::binary);
      out.write(reinterpret_cast<const char *>(f.data()),
                static_cast<std::streamsize>(f.size() * sizeof(float)));
      if (!out)
        why = "could not be written to " + to;
    }
    if (!why.empty()) {
      std::cerr << "Hkfac: refeaturize: " << from << " " << why << "; not written\n";
      ++refused;
      continue;
    }
    ++written;
  }
  std::cerr << "Hkfac: refeaturize: " << written << " written, " << refused << " refused, "
            << rows_changed << " stage rows changed\n";
  return written;
}

} // namespace hkfac::sched
