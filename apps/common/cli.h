// Command-line plumbing the apps and benchmarks share: checks of arguments and output paths with
// errors that name the flag, writes that report failure, and stopping on SIGINT / SIGTERM.
#pragma once

#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hkfac::apps {

// Throws hkfac::Error "<flag>=<value>: must be <requirement>" unless `ok`.
void require_flag(bool ok, const std::string &flag, double value, const std::string &requirement);
void require_flag(bool ok, const std::string &flag, const std::string &value,
                  const std::string &requirement);

// Finite and within float range: the optimizers compute in float, where a larger double is inf.
bool finite_float(double v);

// The int that `text` spells in full (decimal, optional sign), or nothing: no trailing junk, no
// empty text, nothing out of int range.
std::optional<int> parse_int(const std::string &text);

// How an app writes an output: replaced whole at the end (write_file_checked, a rename over the
// old file), or streamed into the opened file as results come (where a FIFO or /dev/stdout works).
enum class OutputWrite { replaced, streamed };
// Throws hkfac::Error naming `flag` and the reason unless a file can be written at `path`: it is
// not a directory, its directory exists and takes new files, and a file already there is
// writable; a replaced output must also be a regular file or absent (write_file_checked's own
// check, detail::check_replaceable). For checking outputs before the work whose results go there.
void require_writable_output(const std::string &flag, const std::string &path,
                             OutputWrite how = OutputWrite::replaced);
// Throws hkfac::Error "<flag>: <path>: <reason>" unless `path` (the flag's value or a file it
// leads to) is a readable file.
void require_readable_input(const std::string &flag, const std::string &path);
// Throws hkfac::Error unless no two (flag, path) outputs are the same file: the later one would
// overwrite the earlier.
void require_distinct_outputs(const std::vector<std::pair<std::string, std::string>> &outputs);

// Replaces `path` with `bytes` through the runtime's atomic writer (detail::write_file_atomically:
// a synced temporary renamed into place); throws hkfac::Error "<path>: ...: <strerror>" when a
// write fails (a full disk, a file size limit) or the target cannot be replaced.
void write_file_checked(const std::string &path, const std::string &bytes);
// Appends `text` to `out` (open on `path`) and flushes it, so a file written as it goes holds
// every row so far; throws hkfac::Error like write_file_checked when that fails.
void append_checked(std::ofstream &out, const std::string &path, const std::string &text);

// From now on the first SIGINT or SIGTERM only records itself, for training loops to read at a
// step boundary (stop_signal()) and stop there with their outputs written; a second one kills as
// before. A signal the process inherited as ignored (a background job's SIGINT) stays ignored.
void stop_on_signals();
// The signal received since stop_on_signals(), 0 if none.
int stop_signal();
// "SIGINT", "SIGTERM" or "signal N".
std::string signal_name(int sig);

} // namespace hkfac::apps
