// absl flag parsing with --help that exits 0 and no silently dropped words.
#include "flags.h"

#include <absl/flags/commandlineflag.h>
#include <absl/flags/parse.h>
#include <absl/flags/reflection.h>
#include <absl/flags/usage.h>
#include <absl/flags/usage_config.h>
#include <absl/strings/string_view.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <tuple>
#include <vector>

namespace hkfac::apps {
namespace {

bool contains(absl::string_view text, absl::string_view part) {
  return text.find(part) != absl::string_view::npos;
}

// Flags in absl's help layout, grouped by the file defining them; `keep` selects them.
template <typename Keep> void print_flags(const std::string &usage, Keep keep) {
  std::vector<const absl::CommandLineFlag *> flags;
  for (const auto &[name, flag] : absl::GetAllFlags()) {
    if (!flag->IsRetired() && keep(*flag))
      flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(), [](const auto *a, const auto *b) {
    return std::make_tuple(a->Filename(), a->Name()) < std::make_tuple(b->Filename(), b->Name());
  });
  std::printf("%s\n", usage.c_str());
  std::string file;
  for (const absl::CommandLineFlag *f : flags) {
    if (f->Filename() != file) {
      file = f->Filename();
      // The file's name alone: the compiler recorded the path of the tree it was built from.
      const size_t slash = file.find_last_of('/');
      std::printf("\n  Flags from %s:\n",
                  file.substr(slash == std::string::npos ? 0 : slash + 1).c_str());
    }
    std::printf("    --%s (%s); default: %s;\n", std::string(f->Name()).c_str(), f->Help().c_str(),
                f->DefaultValue().c_str());
  }
}

} // namespace

void handle_help_flags(int argc, char **argv, const std::string &usage,
                       const std::string &main_file) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (a == "--")
      return; // the rest are not flags
    if (a.substr(0, 2) == "--")
      a.remove_prefix(2);
    else if (a.substr(0, 1) == "-")
      a.remove_prefix(1);
    else
      continue;
    if (a == "help" || a == "helpshort") {
      print_flags(usage, [&](const auto &f) { return contains(f.Filename(), main_file); });
    } else if (a == "helpfull") {
      print_flags(usage, [](const auto &) { return true; });
    } else if (a.substr(0, 5) == "help=") {
      const absl::string_view part = a.substr(5);
      print_flags(usage, [&](const auto &f) {
        return contains(f.Name(), part) || contains(f.Filename(), part);
      });
    } else {
      continue;
    }
    std::exit(0);
  }
}

void parse_flags(int argc, char **argv, const std::string &program, const std::string &usage,
                 const std::string &main_file) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  absl::SetProgramUsageMessage(usage);
  // absl's other help modes (--helppackage, ...) list this program's flags too: its default
  // filter looks for a file named after the program, and ours is main.cpp.
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [main_file](absl::string_view file) {
    return contains(file, main_file);
  };
  absl::SetFlagsUsageConfig(config);
  handle_help_flags(argc, argv, usage, main_file);
  const std::vector<char *> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr,
                 "%s: error: unexpected argument '%s': %s takes flags only, and a bool flag takes "
                 "its value as --flag=false, not as a separate word (see --help)\n",
                 program.c_str(), rest[1], program.c_str());
    std::exit(1);
  }
}

} // namespace hkfac::apps
