// Argument and output-path checks, checked writes, and the stop request from SIGINT / SIGTERM.
#include "cli.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstring>
#include <limits>
#include <sstream>
#include <tuple>
#include <vector>

#include "hkfac/error.h"
#include "hkfac/file_util.h"

namespace hkfac::apps {
namespace {

std::string errno_text(int err) { return err ? std::strerror(err) : "unknown error"; }

// The directory a file at `path` would be created in.
std::string directory_of(const std::string &path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void record_stop(int sig) { g_stop_signal = sig; }

} // namespace

void require_flag(bool ok, const std::string &flag, double value, const std::string &requirement) {
  if (ok)
    return;
  std::ostringstream v;
  v << value;
  require_flag(false, flag, v.str(), requirement);
}

void require_flag(bool ok, const std::string &flag, const std::string &value,
                  const std::string &requirement) {
  if (!ok)
    throw Error(flag + "=" + value + ": must be " + requirement);
}

bool finite_float(double v) { return std::abs(v) <= std::numeric_limits<float>::max(); }

std::optional<int> parse_int(const std::string &text) {
  const char *first = text.data(), *last = text.data() + text.size();
  if (first != last && *first == '+')
    ++first; // from_chars takes '-' only
  int v = 0;
  const auto [end, err] = std::from_chars(first, last, v);
  if (first == last || err != std::errc() || end != last)
    return std::nullopt;
  return v;
}

void require_writable_output(const std::string &flag, const std::string &path, OutputWrite how) {
  const std::string shown = flag + "=" + path;
  if (path.empty())
    throw Error(flag + " is empty; it needs a file path");
  if (path.back() == '/')
    throw Error(shown + ": names a directory; " + flag + " needs a file path");
  // The common mistakes first, in the flag's words.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      throw Error(shown + ": is a directory; " + flag + " needs a file path");
    if (how == OutputWrite::streamed && ::access(path.c_str(), W_OK) != 0)
      throw Error(shown + ": cannot write: " + errno_text(errno));
  } else if (errno == ENOENT) {
    const std::string dir = directory_of(path);
    if (::stat(dir.c_str(), &st) != 0)
      throw Error(shown + ": directory " + dir + ": " + errno_text(errno));
    if (!S_ISDIR(st.st_mode))
      throw Error(shown + ": " + dir + " is not a directory");
    if (how == OutputWrite::streamed && ::access(dir.c_str(), W_OK | X_OK) != 0)
      throw Error(shown + ": cannot create a file in " + dir + ": " + errno_text(errno));
  } else {
    throw Error(shown + ": " + errno_text(errno));
  }
  // A replaced file then passes the writer's own check, so what it would refuse after a long run
  // (a device or a FIFO, a read-only file, a directory that takes no new file) is refused now.
  if (how == OutputWrite::replaced) {
    try {
      detail::check_replaceable(path);
    } catch (const Error &e) {
      throw Error(flag + ": " + e.what());
    }
  }
}

void require_readable_input(const std::string &flag, const std::string &path) {
  // "flag: path", not "flag=path": the path may be a file under the flag's directory.
  const std::string shown = flag + ": " + path;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw Error(shown + ": " + errno_text(errno));
  if (S_ISDIR(st.st_mode))
    throw Error(shown + ": is a directory, not a file");
  if (::access(path.c_str(), R_OK) != 0)
    throw Error(shown + ": cannot read: " + errno_text(errno));
}

void require_distinct_outputs(const std::vector<std::pair<std::string, std::string>> &outputs) {
  // A file is its directory (by device and inode, whatever the spelling) and its name there.
  auto file_key = [](const std::string &path) {
    struct stat st {};
    ::stat(directory_of(path).c_str(), &st); // checked by require_writable_output
    const size_t slash = path.rfind('/');
    return std::make_tuple(st.st_dev, st.st_ino,
                           slash == std::string::npos ? path : path.substr(slash + 1));
  };
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (!outputs[i].second.empty() && !outputs[j].second.empty() &&
          file_key(outputs[i].second) == file_key(outputs[j].second)) {
        throw Error(outputs[j].first + "=" + outputs[j].second + " and " + outputs[i].first + "=" +
                    outputs[i].second + " are the same file; give each output its own");
      }
    }
  }
}

void write_file_checked(const std::string &path, const std::string &bytes) {
  detail::write_file_atomically(path, std::vector<uint8_t>(bytes.begin(), bytes.end()));
}

void append_checked(std::ofstream &out, const std::string &path, const std::string &text) {
  errno = 0;
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.flush();
  if (!out)
    throw Error(path + ": write error: " + errno_text(errno));
}

void stop_on_signals() {
  struct sigaction sa {};
  sa.sa_handler = record_stop;
  sigemptyset(&sa.sa_mask);
  // SA_RESETHAND: the second signal meets the default action and kills.
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  for (int sig : {SIGINT, SIGTERM}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler != SIG_IGN)
      ::sigaction(sig, &sa, nullptr);
  }
}

int stop_signal() { return g_stop_signal; }

std::string signal_name(int sig) {
  if (sig == SIGINT)
    return "SIGINT";
  if (sig == SIGTERM)
    return "SIGTERM";
  return "signal " + std::to_string(sig);
}

} // namespace hkfac::apps
