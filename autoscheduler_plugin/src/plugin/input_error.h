// The plugin's two kinds of error: the user's input (fails the generator) and its own (falls back).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#include "Halide.h"

namespace hkfac::sched {

// A missing estimate, a bad weights file, a bad parameter value: the generator stops with a
// message naming the input. Every other failure inside the plugin falls back (autoscheduler.cpp).
struct InputError : Halide::CompileError {
  explicit InputError(const std::string &msg) : Halide::CompileError(msg) {}
};

// A failure of the plugin itself: caught at the entry point, which applies the fallback.
struct PluginError : std::runtime_error {
  explicit PluginError(const std::string &msg) : std::runtime_error(msg) {}
};

// `Check<E>(cond) << "message"` throws E with the message, at the end of the statement, when
// cond is false (the form of Halide's user_assert).
template <typename E>
class Check {
public:
  explicit Check(bool ok) : ok_(ok) {}
  Check(const Check &) = delete;
  template <typename T>
  Check &operator<<(const T &x) {
    if (!ok_)
      msg_ << x;
    return *this;
  }
  ~Check() noexcept(false) {
    if (!ok_)
      throw E(msg_.str());
  }

private:
  bool ok_;
  std::ostringstream msg_;
};

inline Check<InputError> input_check(bool ok) { return Check<InputError>(ok); }
inline Check<PluginError> plugin_check(bool ok) { return Check<PluginError>(ok); }

} // namespace hkfac::sched
