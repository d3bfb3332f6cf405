// Schedules as text (see state_codec.h).
#include "state_codec.h"

#include <cstdio>
#include <sstream>

namespace hkfac::sched {

std::string encode_state(const State &state) {
  std::ostringstream out;
  out.precision(17);
  out << "hkfac-schedule " << kScheduleFormat << " " << state.choices.size() << "\n";
  for (const FuncChoice &c : state.choices) {
    out << static_cast<int>(c.placement) << " " << c.at_func << " " << static_cast<int>(c.at_level)
        << " " << c.store_outer << " " << c.tile.size();
    for (double t : c.tile)
      out << " " << t;
    out << " " << c.parallel_dims << " " << c.vectorize << " " << c.unroll_rvars << " "
        << c.update_rows << " " << c.update_vectors << " " << c.update_lanes << " "
        << static_cast<int>(c.update_order) << " " << c.rvar_split << " " << c.gpu << " "
        << c.threads[0] << " " << c.threads[1] << " " << c.reg[0] << " " << c.reg[1] << " " << c.pure_rows << "\n";
  }
  return out.str();
}

std::shared_ptr<State> decode_state(const std::string &text, const PipelineAnalysis &dag) {
  std::istringstream in(text);
  std::string magic;
  int format = 0;
  size_t n = 0;
  if (!(in >> magic >> format >> n) || magic != "hkfac-schedule" || format != kScheduleFormat ||
      n != dag.funcs.size())
    return nullptr;
  auto state = std::make_shared<State>();
  state->choices.resize(n);
  for (size_t i = 0; i < n; ++i) {
    FuncChoice &c = state->choices[i];
    int placement = 0, level = 0, order = 0;
    size_t tiles = 0;
    if (!(in >> placement >> c.at_func >> level >> c.store_outer >> tiles))
      return nullptr;
    if (placement < 0 || placement > static_cast<int>(Placement::At) || level < 0 ||
        level > kPerThread || tiles > 16)
      return nullptr;
    c.placement = static_cast<Placement>(placement);
    c.at_level = static_cast<SiteLevel>(level);
    c.tile.resize(tiles);
    for (double &t : c.tile)
      if (!(in >> t) || !(t >= 1))
        return nullptr;
    if (!(in >> c.parallel_dims >> c.vectorize >> c.unroll_rvars >> c.update_rows >>
          c.update_vectors >> c.update_lanes >> order >> c.rvar_split >> c.gpu >> c.threads[0] >>
          c.threads[1] >> c.reg[0] >> c.reg[1] >> c.pure_rows))
      return nullptr;
    if (order < 0 || order > kRVarSplit || c.placement == Placement::Undecided || c.pure_rows < 1 ||
        c.pure_rows > 16)
      return nullptr;
    c.update_order = static_cast<UpdateOrder>(order);
    // A compute_at site is a later Func (a consumer) of this pipeline.
    if (c.placement == Placement::At &&
        (c.at_func <= static_cast<int>(i) || c.at_func >= static_cast<int>(n)))
      return nullptr;
  }
  state->decided = static_cast<int>(n);
  return state;
}

std::string state_hash(const State &state) {
  const std::string text = encode_state(state);
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text)
    h = (h ^ ch) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

} // namespace hkfac::sched
