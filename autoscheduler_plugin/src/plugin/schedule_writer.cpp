// Scheduling calls issued and written as C++ (see schedule_writer.h).
#include "schedule_writer.h"

#include <cctype>

namespace hkfac::sched {

using namespace Halide;
using namespace Halide::Internal;

namespace {

std::string identifier(const std::string &name) {
  std::string s;
  for (char c : name)
    s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0])))
    s = "v_" + s;
  return s;
}

std::string display_name(const std::string &name) {
  const size_t d = name.rfind('$');
  if (d == std::string::npos || d + 1 == name.size())
    return name;
  for (size_t i = d + 1; i < name.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i])))
      return name;
  return name.substr(0, d);
}

// Names a printed Func or Var may not take: the apply function's own and C++'s keywords (a Func
// may be called `new` or `int` in Halide).
std::set<std::string> reserved_names() {
  return {"pipeline", "target", "Func", "MemoryType", "RVar", "TailStrategy", "Var",
          "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break",
          "case", "catch", "char", "char8_t", "char16_t", "char32_t", "class", "compl", "concept",
          "const", "consteval", "constexpr", "constinit", "const_cast", "continue", "co_await",
          "co_return", "co_yield", "decltype", "default", "delete", "do", "double", "dynamic_cast",
          "else", "enum", "explicit", "export", "extern", "false", "float", "for", "friend", "goto",
          "if", "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq",
          "nullptr", "operator", "or", "or_eq", "private", "protected", "public", "register",
          "reinterpret_cast", "requires", "return", "short", "signed", "sizeof", "static",
          "static_assert", "static_cast", "struct", "switch", "template", "this", "thread_local",
          "throw", "true", "try", "typedef", "typeid", "typename", "union", "unsigned", "using",
          "virtual", "void", "volatile", "wchar_t", "while", "xor", "xor_eq"};
}

std::string factor_text(double f) { return std::to_string(static_cast<long long>(f)); }

const char *tail_text(TailStrategy t) {
  return t == TailStrategy::ShiftInwards ? "ShiftInwards" : "GuardWithIf";
}

} // namespace

std::string cpp_func_name(const std::string &func_name) {
  return identifier(display_name(func_name));
}

ScheduleWriter::ScheduleWriter(bool apply, std::ostringstream &src)
    : apply_(apply), src_(src), names_(reserved_names()) {}

void ScheduleWriter::begin(const Function &f, int index) {
  func_ = Func(f);
  // Halide makes Func names unique with a "$n" suffix; the C++ name drops it unless another
  // name of the source already has it.
  name_ = unique_name(cpp_func_name(f.name()));
  site_names_[f.name()] = name_;
  src_ << "    Func " << name_ << " = pipeline.get_func(" << index << ");\n";
}

void ScheduleWriter::declare_var(const std::string &v, bool rvar) {
  if (var_names_.count(v))
    return;
  const std::string &name = var_names_[v] = unique_name(identifier(v));
  src_ << "    " << (rvar ? "RVar " : "Var ") << name << "(\"" << v << "\");\n";
}

Stage ScheduleWriter::stage(int s) {
  if (s == 0)
    return fixed_ ? *fixed_ : Stage(func_);
  return func_.update(s - 1);
}

std::string ScheduleWriter::stage_text(int s) const {
  if (s == 0)
    return fixed_ ? fixed_name_ : name_;
  return name_ + ".update(" + std::to_string(s - 1) + ")";
}

void ScheduleWriter::specialize_fixed(const std::vector<std::pair<int, int>> &extents) {
  Expr cond;
  std::ostringstream text;
  for (size_t i = 0; i < extents.size(); ++i) {
    const auto [d, e] = extents[i];
    Expr c = func_.output_buffer().dim(d).extent() % e == 0;
    cond = cond.defined() ? (cond && c) : c;
    text << (i ? " && " : "") << name_ << ".output_buffer().dim(" << d << ").extent() % " << e
         << " == 0";
  }
  fixed_name_ = unique_name(name_ + "_fixed");
  src_ << "    ::Halide::Stage " << fixed_name_ << " = " << name_ << ".specialize(" << text.str()
       << ");\n";
  fixed_ = apply_ ? func_.specialize(cond) : Stage(func_);
}

void ScheduleWriter::general() { fixed_.reset(); }

VarOrRVar ScheduleWriter::var(const std::string &v, bool rvar) const {
  return rvar ? VarOrRVar(RVar(v)) : VarOrRVar(Var(v));
}

void ScheduleWriter::split(int s, const std::string &old, bool rvar, const std::string &outer,
                           const std::string &inner, double factor, TailStrategy tail) {
  declare_var(old, rvar);
  declare_var(outer, rvar);
  declare_var(inner, rvar);
  src_ << "    " << stage_text(s) << ".split(" << id(old) << ", " << id(outer)
       << ", " << id(inner) << ", " << factor_text(factor) << ", TailStrategy::"
       << tail_text(tail) << ");\n";
  if (apply_)
    stage(s).split(var(old, rvar), var(outer, rvar), var(inner, rvar),
                   static_cast<int>(factor), tail);
}

void ScheduleWriter::reorder(int s, const std::vector<std::pair<std::string, bool>> &vars) {
  if (vars.size() < 2)
    return;
  std::vector<VarOrRVar> vs;
  for (const auto &v : vars)
    declare_var(v.first, v.second);
  src_ << "    " << stage_text(s) << ".reorder(";
  for (size_t i = 0; i < vars.size(); ++i) {
    src_ << (i ? ", " : "") << id(vars[i].first);
    vs.push_back(var(vars[i].first, vars[i].second));
  }
  src_ << ");\n";
  if (apply_)
    stage(s).reorder(vs);
}

void ScheduleWriter::fuse(int s, const std::string &inner, const std::string &outer,
                          const std::string &fused) {
  declare_var(inner, false);
  declare_var(outer, false);
  declare_var(fused, false);
  src_ << "    " << stage_text(s) << ".fuse(" << id(inner) << ", " << id(outer)
       << ", " << id(fused) << ");\n";
  if (apply_)
    stage(s).fuse(Var(inner), Var(outer), Var(fused));
}

void ScheduleWriter::unscheduled(int s) {
  src_ << "    " << stage_text(s) << ".unscheduled();\n";
  if (apply_)
    stage(s).unscheduled();
}

void ScheduleWriter::loop_type(int s, const std::string &v, bool rvar, const char *what) {
  declare_var(v, rvar);
  src_ << "    " << stage_text(s) << "." << what << "(" << id(v) << ");\n";
  if (!apply_)
    return;
  const std::string w = what;
  if (w == "parallel")
    stage(s).parallel(var(v, rvar));
  else if (w == "vectorize")
    stage(s).vectorize(var(v, rvar));
  else if (w == "unscheduled")
    stage(s).unscheduled();
  else if (w == "gpu_blocks")
    stage(s).gpu_blocks(var(v, rvar));
  else if (w == "gpu_threads")
    stage(s).gpu_threads(var(v, rvar));
  else
    stage(s).unroll(var(v, rvar));
}

void ScheduleWriter::atomic(int s) {
  src_ << "    " << stage_text(s) << ".atomic();\n";
  if (apply_)
    stage(s).atomic();
}

void ScheduleWriter::store_in_shared() {
  src_ << "    " << name_ << ".store_in(MemoryType::GPUShared);\n";
  if (apply_)
    func_.store_in(MemoryType::GPUShared);
}

void ScheduleWriter::store_in_stack() {
  src_ << "    " << name_ << ".store_in(MemoryType::Stack);\n";
  if (apply_)
    func_.store_in(MemoryType::Stack);
}

void ScheduleWriter::compute_root() {
  src_ << "    " << name_ << ".compute_root();\n";
  if (apply_)
    func_.compute_root();
}

void ScheduleWriter::compute_at(const Function &site, const std::string &site_name,
                                const std::string &v) {
  declare_var(v, false);
  src_ << "    " << name_ << ".compute_at(" << site_names_.at(site_name) << ", " << id(v)
       << ");\n";
  if (apply_)
    func_.compute_at(Func(site), Var(v));
}

void ScheduleWriter::store_at(const Function &site, const std::string &site_name,
                              const std::string &v) {
  if (v.empty()) {
    src_ << "    " << name_ << ".store_root();\n";
    if (apply_)
      func_.store_root();
    return;
  }
  declare_var(v, false);
  src_ << "    " << name_ << ".store_at(" << site_names_.at(site_name) << ", " << id(v)
       << ");\n";
  if (apply_)
    func_.store_at(Func(site), Var(v));
}

const std::string &ScheduleWriter::id(const std::string &v) const { return var_names_.at(v); }

std::string ScheduleWriter::unique_name(const std::string &base) {
  std::string name = base;
  for (int n = 1; !names_.insert(name).second; ++n)
    name = base + "_" + std::to_string(n);
  return name;
}

} // namespace hkfac::sched
