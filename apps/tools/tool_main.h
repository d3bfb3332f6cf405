// The shared entry point of the cost-model tools (usage text, --help, errors as one line) and the
// checks of the flags they share.
#pragma once

#include <absl/flags/parse.h>
#include <absl/flags/usage.h>
#include <absl/flags/usage_config.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>

#include "flags.h"
#include "hkfac/allocator.h"
#include "hkfac/error.h"
#include "hkfac/file_util.h"

namespace hkfac::tools {

// --schedule_features of the tools that need one S: 39 or 73.
inline int schedule_features_flag(int value) {
  if (value != 39 && value != 73) {
    throw Error("--schedule_features: expected 39 (CPU) or 73 (GPU), got " + std::to_string(value));
  }
  return value;
}

// --num_cores: 0 means this machine's; a negative count is a mistake, not a default.
inline int num_cores_flag(int value) {
  if (value < 0) {
    throw Error("--num_cores: expected 0 (this machine's) or a positive count, got " +
                std::to_string(value));
  }
  return value > 0 ? value : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// An output written whole through a temporary file (detail::write_file_atomically), checked
// before any work so that a bad path costs nothing; the error names the flag.
inline void check_output_flag(const std::string &flag, const std::string &path) {
  try {
    detail::check_replaceable(path);
  } catch (const Error &e) {
    throw Error(flag + ": " + e.what());
  }
}

// The same for an output written as a stream while the tool runs: that can go to a FIFO or a
// device (--csv=/dev/stdout) as well as to a file, but not to a directory.
inline void check_stream_output_flag(const std::string &flag, const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode))
      throw Error(flag + ": " + path + ": is a directory");
    return;
  }
  check_output_flag(flag, path);
}

// Writes a tool's text output; the error names the flag.
inline void write_output_flag(const std::string &flag, const std::string &path,
                              const std::string &text) {
  try {
    detail::write_file_atomically(path, std::vector<uint8_t>(text.begin(), text.end()));
  } catch (const Error &e) {
    throw Error(flag + ": " + e.what());
  }
}

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
  apps::handle_help_flags(argc, argv, usage, source_file); // absl's own help exits 1
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
