// Pipeline fingerprints (see pipeline_fingerprint.h).
#include "pipeline_fingerprint.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "estimated_run.h"
#include "hkfac/cost_model/weights.h"
#include "state_codec.h"

namespace hkfac::sched {

using namespace Halide;
using namespace Halide::Internal;

namespace {

void print_definition(std::ostream &out, const Definition &def) {
  for (const Expr &a : def.args())
    out << " a:" << a;
  for (const Expr &v : def.values())
    out << " v:" << v;
  if (def.predicate().defined())
    out << " p:" << def.predicate();
  for (const ReductionVariable &r : def.schedule().rvars())
    out << " r:" << r.var << "[" << r.min << ", " << r.extent << "]";
  out << "\n";
}

// The text with every Func name and every name Halide made unique ("$" in it: "blur$2",
// "r12$x") replaced by its order of first appearance. Halide numbers such names per process, so
// the same pipeline built twice, or after other Funcs, prints other names; the structure, which
// the text keeps whole, is what identifies it.
std::string canonical_names(const std::string &text, const PipelineAnalysis &dag) {
  std::set<std::string> funcs;
  for (const FuncNode &f : dag.funcs)
    funcs.insert(f.name);
  auto ident = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$';
  };
  std::map<std::string, int> index;
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (!ident(text[i])) {
      out += text[i++];
      continue;
    }
    size_t j = i;
    while (j < text.size() && ident(text[j]))
      ++j;
    const std::string token = text.substr(i, j - i);
    if (funcs.count(token) || token.find('$') != std::string::npos)
      out +=
          "#" + std::to_string(index.emplace(token, static_cast<int>(index.size())).first->second);
    else
      out += token;
    i = j;
  }
  return out;
}

uint64_t fnv(const std::string &s, uint64_t h) {
  for (unsigned char c : s)
    h = (h ^ c) * 1099511628211ull;
  return h;
}

} // namespace

std::string pipeline_fingerprint(const PipelineAnalysis &dag, const std::vector<Function> &outputs,
                                 const Target &target, const std::string &machine_params) {
  std::ostringstream out;
  out.precision(17);
  out << "format " << kScheduleFormat << " features " << cost_model::kCpuScheduleFeaturesVersion
      << " " << cost_model::kPipelineFeaturesVersion << "\n";
  out << "target " << target.to_string() << "\nmachine_params " << machine_params << "\n";
  for (const FuncNode &f : dag.funcs) {
    out << "func " << f.name << " output " << f.is_output << " args";
    for (const std::string &a : f.func.args())
      out << " " << a;
    out << " types";
    for (const Type &t : f.func.output_types())
      out << " " << t;
    out << " region";
    for (const Span &s : f.root_region)
      out << " [" << s.min << ", " << s.max << "]";
    out << "\n";
    if (f.func.has_extern_definition()) {
      out << "extern " << f.func.extern_function_name() << "\n";
      continue;
    }
    print_definition(out, f.func.definition());
    for (const Definition &u : f.func.updates())
      print_definition(out, u);
  }
  out << EstimatedRun(dag, outputs).describe();
  const std::string text = canonical_names(out.str(), dag);
  if (std::getenv("HKFAC_DEBUG_FINGERPRINT"))
    std::cerr << text;
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx",
                static_cast<unsigned long long>(fnv(text, 1469598103934665603ull)),
                static_cast<unsigned long long>(fnv(text, 0x84222325cbf29ce4ull ^ text.size())));
  return buf;
}

std::string pipeline_name(const std::vector<Function> &outputs) {
  std::string name;
  for (const Function &f : outputs)
    name += (name.empty() ? "" : ", ") + f.name();
  return name;
}

} // namespace hkfac::sched
