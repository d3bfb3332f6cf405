// The shared entry point of the cost-model tools: usage text, --help, and errors as one line.
#pragma once

#include <absl/flags/parse.h>
#include <absl/flags/usage.h>
#include <absl/flags/usage_config.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "hkfac/allocator.h"

namespace hkfac::tools {

// Parses the flags (--help lists the flags defined in `source_file`, which absl's default filter
// would miss), runs `body` on the positional arguments and turns any exception into one line on
// stderr and exit status 1.
template <typename Body>
int run_tool(int argc, char **argv, const char *name, const char *source_file, const char *usage,
             Body body) {
  retain_freed_memory(); // the trainers call kernels thousands of times
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [source_file](absl::string_view file) {
    return file.find(source_file) != absl::string_view::npos;
  };
  absl::SetFlagsUsageConfig(config);
  const std::vector<char *> parsed = absl::ParseCommandLine(argc, argv);
  const std::vector<std::string> args(parsed.begin() + 1, parsed.end());
  try {
    return body(args);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 1;
  }
}

} // namespace hkfac::tools
