// A pipeline's inputs and outputs at their estimated sizes (see estimated_run.h).
#include "estimated_run.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

namespace hkfac::sched {

using namespace Halide;
using namespace Halide::Internal;

namespace {

// Every parameter a Func's definitions, bounds and extern arguments read, by name.
class FindParameters : public IRGraphVisitor {
public:
  std::map<std::string, Parameter> found;

private:
  using IRGraphVisitor::visit;
  void add(const Parameter &p) {
    if (p.defined())
      found.emplace(p.name(), p);
  }
  void visit(const Variable *op) override {
    add(op->param);
    IRGraphVisitor::visit(op);
  }
  void visit(const Call *op) override {
    add(op->param);
    IRGraphVisitor::visit(op);
  }
};

int constant_int(const Expr &e) {
  const Expr s = simplify(e);
  const int64_t *i = as_const_int(s);
  return i ? static_cast<int>(*i) : INT32_MIN;
}

// A small, fast, seeded generator (splitmix64): inputs must not depend on the candidate, and
// filling hundreds of megabytes must not cost seconds.
struct Noise {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

void fill(Buffer<> &b, uint64_t seed) {
  Noise noise{seed};
  const Type t = b.type();
  uint8_t *p = static_cast<uint8_t *>(b.raw_buffer()->host);
  const size_t n = b.number_of_elements();
  const int bytes = t.bytes();
  for (size_t i = 0; i < n; ++i, p += bytes) {
    if (t.is_float()) {
      const double x = noise.unit();
      if (t.bits() == 64) {
        std::memcpy(p, &x, 8);
      } else if (t.bits() == 32) {
        const float f = static_cast<float>(x);
        std::memcpy(p, &f, 4);
      } else {
        // float16 and bfloat16: the top bits of a float in [0, 1) are a bfloat16; float16 has
        // its own encoding.
        const uint16_t h = t.is_bfloat() ? static_cast<uint16_t>(bfloat16_t(x).to_bits())
                                         : static_cast<uint16_t>(float16_t(x).to_bits());
        std::memcpy(p, &h, 2);
      }
    } else if (t.is_bool()) {
      *p = static_cast<uint8_t>(noise.next() & 1);
    } else {
      const uint64_t x = noise.next();
      std::memcpy(p, &x, bytes);
    }
  }
}

} // namespace

EstimatedRun::EstimatedRun(const PipelineAnalysis &dag, const std::vector<Function> &outputs) {
  std::set<std::string> output_params;
  for (const Function &f : outputs)
    for (const Parameter &p : f.output_buffers())
      output_params.insert(p.name());
  FindParameters find;
  for (const FuncNode &f : dag.funcs) {
    f.func.accept(&find);
    if (f.func.has_extern_definition())
      for (const ExternFuncArgument &a : f.func.extern_arguments())
        if (a.is_image_param())
          find.found.emplace(a.image_param.name(), a.image_param);
  }
  for (const auto &[name, p] : find.found) {
    if (output_params.count(name))
      continue;
    Input in{p, {}, {}, Expr()};
    if (p.is_buffer()) {
      for (int d = 0; d < p.dimensions() && missing_.empty(); ++d) {
        const Expr mn = p.min_constraint_estimate(d), ex = p.extent_constraint_estimate(d);
        const int m = mn.defined() ? constant_int(mn) : INT32_MIN;
        const int e = ex.defined() ? constant_int(ex) : INT32_MIN;
        if (m == INT32_MIN || e == INT32_MIN || e < 1)
          missing_ = "the input \"" + name + "\" has no constant estimate of dimension " +
                     std::to_string(d);
        in.min.push_back(m);
        in.extent.push_back(e);
      }
    } else {
      in.value = p.estimate();
      if (!in.value.defined())
        in.value = p.default_value();
      if (!in.value.defined() || !is_const(simplify(in.value)))
        missing_ = "the scalar parameter \"" + name + "\" has no constant estimate";
    }
    inputs_.push_back(std::move(in));
  }
  // In the pipeline's output order (Halide's Realization order), not realization order.
  for (const Function &out : outputs)
    for (const FuncNode &f : dag.funcs) {
      if (!f.func.same_as(out))
        continue;
      Output o;
      for (const Span &s : f.root_region) {
        o.min.push_back(static_cast<int>(std::floor(s.min)));
        o.extent.push_back(static_cast<int>(std::llround(s.extent())));
      }
      const std::vector<Parameter> &buffers = f.func.output_buffers();
      for (size_t k = 0; k < f.func.output_types().size(); ++k) {
        o.type = f.func.output_types()[k];
        o.name = k < buffers.size() ? buffers[k].name() : f.func.name();
        outputs_.push_back(o);
      }
    }
}

std::string EstimatedRun::describe() const {
  std::ostringstream out;
  auto region = [&](const std::vector<int> &min, const std::vector<int> &extent) {
    for (size_t d = 0; d < min.size(); ++d)
      out << " [" << min[d] << ", " << extent[d] << "]";
  };
  for (const Input &in : inputs_) {
    out << "input " << in.param.name() << " " << in.param.type();
    if (in.param.is_buffer())
      region(in.min, in.extent);
    else
      out << " = " << in.value;
    out << "\n";
  }
  for (const Output &o : outputs_) {
    out << "output " << o.type;
    region(o.min, o.extent);
    out << "\n";
  }
  return out.str();
}

std::string EstimatedRun::runner_spec() const {
  std::ostringstream out;
  out.precision(17);
  auto buffer = [&](const std::string &name, const std::vector<int> &min,
                    const std::vector<int> &extent) {
    out << "buffer " << name << " " << min.size();
    for (size_t d = 0; d < min.size(); ++d)
      out << " " << min[d] << " " << extent[d];
    out << "\n";
  };
  for (const Input &in : inputs_) {
    if (in.param.is_buffer()) {
      buffer(in.param.name(), in.min, in.extent);
      continue;
    }
    const Expr v = simplify(cast(Float(64), in.value));
    const double *f = as_const_float(v);
    out << "scalar " << in.param.name() << " " << (f ? *f : 0.0) << "\n";
  }
  for (const Output &o : outputs_)
    buffer(o.name, o.min, o.extent);
  return out.str();
}

void EstimatedRun::bind(uint64_t seed) {
  uint64_t k = 0;
  for (Input &in : inputs_) {
    ++k;
    if (in.param.is_buffer()) {
      Buffer<> b(in.param.type(), in.extent);
      b.set_min(in.min);
      fill(b, seed * 1000003u + k);
      in.param.set_buffer(b);
      continue;
    }
    const Expr v = simplify(cast(in.param.type(), in.value));
    halide_scalar_value_t s;
    s.u.u64 = 0;
    const Type t = in.param.type();
    if (const int64_t *i = as_const_int(v)) {
      if (t.bits() == 8)
        s.u.i8 = static_cast<int8_t>(*i);
      else if (t.bits() == 16)
        s.u.i16 = static_cast<int16_t>(*i);
      else if (t.bits() == 32)
        s.u.i32 = static_cast<int32_t>(*i);
      else
        s.u.i64 = *i;
    } else if (const uint64_t *u = as_const_uint(v)) {
      if (t.bits() == 1)
        s.u.b = *u != 0;
      else if (t.bits() == 8)
        s.u.u8 = static_cast<uint8_t>(*u);
      else if (t.bits() == 16)
        s.u.u16 = static_cast<uint16_t>(*u);
      else if (t.bits() == 32)
        s.u.u32 = static_cast<uint32_t>(*u);
      else
        s.u.u64 = *u;
    } else if (const double *f = as_const_float(v)) {
      if (t.bits() == 64)
        s.u.f64 = *f;
      else if (t.bits() == 32)
        s.u.f32 = static_cast<float>(*f);
      else
        s.u.u16 = t.is_bfloat() ? bfloat16_t(*f).to_bits() : float16_t(*f).to_bits();
    }
    in.param.set_scalar(t, s);
  }
  output_buffers_.clear();
  for (const Output &o : outputs_) {
    Buffer<> b(o.type, o.extent);
    b.set_min(o.min);
    output_buffers_.push_back(b);
  }
  realization_ = std::make_unique<Realization>(output_buffers_);
}

} // namespace hkfac::sched
