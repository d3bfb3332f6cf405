// Command-line parsing for the apps built on absl flags.
#pragma once

#include <string>

namespace hkfac::apps {

// Sets `usage` as the program's usage message and parses the command line into the absl flags.
// --help (and --helpshort, --help=SUBSTRING: flags whose name or file contains it) lists the
// flags defined in `main_file` (a path suffix such as "autoencoder/main.cpp"), --helpfull every
// flag; each prints to stdout and exits 0, where absl's own handling exits 1. A word that is no
// flag (`--use_adaptive_damping false` leaves "false": a bool flag takes --flag=false) prints an
// error naming it and exits 1, as absl does for an unknown flag. Makes stdout line-buffered, so
// progress lines reach a pipe or file as they are printed.
void parse_flags(int argc, char **argv, const std::string &program, const std::string &usage,
                 const std::string &main_file);

// parse_flags' help handling alone, for programs that parse the rest themselves: answers --help,
// --helpshort, --help=SUBSTRING and --helpfull as above (exit status 0) and returns when none is
// given.
void handle_help_flags(int argc, char **argv, const std::string &usage,
                       const std::string &main_file);

} // namespace hkfac::apps
