// hkfac::Error: the one exception type every hkfac library API throws.
#pragma once

#include <stdexcept>
#include <string>

namespace hkfac {

// Messages name the offending input and what was expected, so callers can print them as-is.
class Error : public std::runtime_error {
public:
  explicit Error(const std::string &what) : std::runtime_error(what) {}
};

} // namespace hkfac
