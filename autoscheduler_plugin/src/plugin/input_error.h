// Errors in what the user gave the plugin, which fail the generator instead of falling back.
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

// `input_check(cond) << "message"` throws InputError with the message when cond is false.
class InputCheck {
public:
  explicit InputCheck(bool ok) : ok_(ok) {}
  InputCheck(const InputCheck &) = delete;
  template <typename T>
  InputCheck &operator<<(const T &x) {
    if (!ok_)
      msg_ << x;
    return *this;
  }
  ~InputCheck() noexcept(false) {
    if (!ok_)
      throw InputError(msg_.str());
  }

private:
  bool ok_;
  std::ostringstream msg_;
};

inline InputCheck input_check(bool ok) { return InputCheck(ok); }

// A failure of the plugin itself: caught at the entry point, which applies the fallback.
struct PluginError : std::runtime_error {
  explicit PluginError(const std::string &msg) : std::runtime_error(msg) {}
};

// `plugin_check(cond) << "message"` throws PluginError when cond is false.
class PluginCheck {
public:
  explicit PluginCheck(bool ok) : ok_(ok) {}
  PluginCheck(const PluginCheck &) = delete;
  template <typename T>
  PluginCheck &operator<<(const T &x) {
    if (!ok_)
      msg_ << x;
    return *this;
  }
  ~PluginCheck() noexcept(false) {
    if (!ok_)
      throw PluginError(msg_.str());
  }

private:
  bool ok_;
  std::ostringstream msg_;
};

inline PluginCheck plugin_check(bool ok) { return PluginCheck(ok); }

} // namespace hkfac::sched
