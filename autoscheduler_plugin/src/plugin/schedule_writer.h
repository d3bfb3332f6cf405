// Scheduling calls issued on a pipeline's Funcs and written, call for call, as C++ source.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "Halide.h"

namespace hkfac::sched {

// The C++ name apply_schedule gives Func `func_name` in its source (Halide's "$n" suffix
// dropped), unless another Func, Var or stage of the source has it already (then the first free
// "_n" suffix is added).
std::string cpp_func_name(const std::string &func_name);

// Issues scheduling calls on one Func's stages and writes the same calls as C++: the body of
// Halide's apply_schedule_<name>(pipeline, target), each Func fetched with pipeline.get_func(i)
// and each Var or RVar declared by name where first used. With `apply` false it only writes.
// Funcs, Vars and stages share one C++ scope beside the apply function's own names and C++'s
// keywords, so each gets a free name there. begin() moves on to the next Func; stage `s` is 0 for
// the pure definition (or its specialization, between specialize_fixed() and general()) and
// u + 1 for update u. Which calls to make is apply_schedule's business (apply_schedule.h).
class ScheduleWriter {
public:
  ScheduleWriter(bool apply, std::ostringstream &src);

  void begin(const Halide::Internal::Function &f, int index);
  void declare_var(const std::string &v, bool rvar);
  Halide::Stage stage(int s);
  std::string stage_text(int s) const;
  // Until general(), the pure definition's directives go to its specialization for outputs whose
  // extent along each dimension d of `extents` is a multiple of extents[d] (see fixed_dims).
  void specialize_fixed(const std::vector<std::pair<int, int>> &extents);
  void general();
  Halide::VarOrRVar var(const std::string &v, bool rvar) const;

  void split(int s, const std::string &old, bool rvar, const std::string &outer,
             const std::string &inner, double factor, Halide::TailStrategy tail);
  void reorder(int s, const std::vector<std::pair<std::string, bool>> &vars);
  void fuse(int s, const std::string &inner, const std::string &outer, const std::string &fused);
  // An update left as Halide's default, said so (Halide warns about it otherwise).
  void unscheduled(int s);
  void loop_type(int s, const std::string &v, bool rvar, const char *what);
  // An update whose writes are made atomic (gpu_atomics.h).
  void atomic(int s);
  // A Func staged per GPU block: its storage in the block's shared memory.
  void store_in_shared();
  // A Func allocated inside a loop: on the stack where its size has a small constant bound, and
  // otherwise in a stack slot reused by every iteration (Halide's pseudostack), which grows at most
  // a few times per task instead of calling halide_malloc and halide_free once per iteration.
  void store_in_stack();
  void compute_root();
  void compute_at(const Halide::Internal::Function &site, const std::string &site_name,
                  const std::string &v);
  // Storage hoisted above the compute level: at `v` of `site`, or at root when `v` is empty.
  void store_at(const Halide::Internal::Function &site, const std::string &site_name,
                const std::string &v);

private:
  // The C++ name of a declared Var or RVar.
  const std::string &id(const std::string &v) const;
  // `base`, or `base` with the first free suffix: Funcs, Vars and stages share one C++ scope,
  // beside the apply function's own names.
  std::string unique_name(const std::string &base);

  bool apply_;
  std::ostringstream &src_;
  Halide::Func func_;
  std::optional<Halide::Stage> fixed_;
  std::string name_, fixed_name_;
  std::set<std::string> names_;
  std::map<std::string, std::string> var_names_;
  std::map<std::string, std::string> site_names_;
};

} // namespace hkfac::sched
