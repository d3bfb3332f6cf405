// Appends a runtime and ids to a .featurization, making a .sample (as Halide's tool of that name).
#include <absl/flags/flag.h>

#include <cerrno>
#include <climits>
#include <cstdlib>

#include "hkfac/cost_model/samples.h"
#include "hkfac/error.h"
#include "tool_main.h"

ABSL_FLAG(int, schedule_features, 0,
          "Schedule features S (39 CPU, 73 GPU); 0 = whichever the file size fits");

namespace {

// strtod and strtol also take leading spaces, hex ("0x1p-4") and, for strtod, "inf" and "nan";
// the arguments are decimal numbers, so anything else is a mistake to report.
bool plain_decimal(const std::string &text, bool fraction) {
  if (text.empty())
    return false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool sign = (c == '-' || c == '+') &&
                      (i == 0 || (fraction && (text[i - 1] == 'e' || text[i - 1] == 'E')));
    const bool ok =
        (c >= '0' && c <= '9') || sign || (fraction && (c == '.' || c == 'e' || c == 'E'));
    if (!ok)
      return false;
  }
  return true;
}

double parse_double(const std::string &text, const char *what) {
  errno = 0;
  char *end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (!plain_decimal(text, true) || *end != '\0' || errno != 0) {
    throw hkfac::Error(std::string(what) + ": expected a decimal number, got '" + text + "'");
  }
  return v;
}

int32_t parse_int32(const std::string &text, const char *what) {
  errno = 0;
  char *end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (!plain_decimal(text, false) || *end != '\0' || errno != 0 || v < INT32_MIN || v > INT32_MAX) {
    throw hkfac::Error(std::string(what) + ": expected a 32-bit integer, got '" + text + "'");
  }
  return static_cast<int32_t>(v);
}

} // namespace

int main(int argc, char **argv) {
  namespace cm = hkfac::cost_model;
  return hkfac::tools::run_tool(
      argc, argv, "featurization_to_sample", "tools/featurization_to_sample.cpp",
      "Usage: featurization_to_sample [flags] IN.featurization RUNTIME_SECONDS PIPELINE_ID "
      "SCHEDULE_ID OUT.sample\n"
      "Writes the featurization followed by the runtime in milliseconds and the two ids; the\n"
      "output is byte-identical to Halide 14's featurization_to_sample.",
      [](const std::vector<std::string> &args) {
        if (args.size() != 5) {
          throw hkfac::Error("expected 5 arguments (IN.featurization RUNTIME_SECONDS "
                             "PIPELINE_ID SCHEDULE_ID OUT.sample), got " +
                             std::to_string(args.size()) + "; see --help");
        }
        const double seconds = parse_double(args[1], "RUNTIME_SECONDS");
        // Same arithmetic as Halide's tool (seconds * 1000 in double, then rounded to float),
        // so the runtime bytes match.
        const float runtime_ms = static_cast<float>(seconds * 1000.0);
        const int32_t pipeline_id = parse_int32(args[2], "PIPELINE_ID");
        const int32_t schedule_id = parse_int32(args[3], "SCHEDULE_ID");
        const int S = absl::GetFlag(FLAGS_schedule_features);
        if (S != 0 && S != cm::kCpuScheduleFeatures && S != cm::kGpuScheduleFeatures) {
          throw hkfac::Error("--schedule_features: expected 0, 39 (CPU) or 73 (GPU), got " +
                             std::to_string(S));
        }
        cm::featurization_file_to_sample(args[0], runtime_ms, pipeline_id, schedule_id, S, args[4]);
        return 0;
      });
}
