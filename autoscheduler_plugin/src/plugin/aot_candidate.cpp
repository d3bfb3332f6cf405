// Candidates built ahead of time for the timing runner (see aot_candidate.h).
#include "aot_candidate.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "input_error.h"

namespace hkfac::sched {

const uint8_t *timing_runner_source();
size_t timing_runner_source_size();

namespace {

#ifndef HKFAC_HALIDE_RUNTIME_INCLUDE
#define HKFAC_HALIDE_RUNTIME_INCLUDE "/usr/include"
#endif
#ifndef HKFAC_BUILD_CXX
#define HKFAC_BUILD_CXX ""
#endif

bool executable(const std::string &path) {
  return !path.empty() && access(path.c_str(), X_OK) == 0;
}

// `name` on the PATH (or itself, when it names a path).
std::string on_path(const std::string &name) {
  if (name.find('/') != std::string::npos)
    return executable(name) ? name : "";
  const char *path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t at = 0;
  while (at <= dirs.size()) {
    const size_t colon = std::min(dirs.find(':', at), dirs.size());
    const std::string candidate = dirs.substr(at, colon - at) + "/" + name;
    if (executable(candidate))
      return candidate;
    at = colon + 1;
  }
  return "";
}

// Runs argv with its output to /dev/null; the exit status (-1: could not start or killed).
int run_quietly(const std::vector<std::string> &argv) {
  std::vector<char *> args;
  for (const std::string &a : argv)
    args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) {
      dup2(null, 1);
      dup2(null, 2);
    }
    execv(args[0], args.data());
    _exit(127);
  }
  if (pid < 0)
    return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

uint64_t fnv(const void *data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < n; ++i)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

void make_dirs(const std::string &dir) {
  for (size_t i = 1; i <= dir.size(); ++i)
    if (i == dir.size() || dir[i] == '/')
      mkdir(dir.substr(0, i).c_str(), 0700);
}

} // namespace

AotToolchain aot_toolchain(const std::string &dir) {
  AotToolchain t;
  const char *cxx_env = std::getenv("CXX");
  for (const char *name :
       {cxx_env, static_cast<const char *>(HKFAC_BUILD_CXX), "c++", "g++", "clang++"}) {
    if (name && *name && !(t.cxx = on_path(name)).empty())
      break;
  }
  if (t.cxx.empty()) {
    t.why_not = "no C++ compiler ($CXX, c++, g++ or clang++) to link candidates with";
    return t;
  }
  const std::string include = HKFAC_HALIDE_RUNTIME_INCLUDE;
  if (access((include + "/HalideRuntime.h").c_str(), R_OK) != 0) {
    t.why_not = "no HalideRuntime.h in " + include;
    return t;
  }
  const uint8_t *src = timing_runner_source();
  const size_t n = timing_runner_source_size();
  uint64_t h = fnv(src, n);
  h = fnv(t.cxx.data(), t.cxx.size(), h);
  h = fnv(include.data(), include.size(), h);
  char name[64];
  std::snprintf(name, sizeof(name), "timing_runner-%016llx", static_cast<unsigned long long>(h));
  make_dirs(dir);
  t.runner_object = dir + "/" + name + ".o";
  if (access(t.runner_object.c_str(), R_OK) == 0) {
    t.ok = true;
    return t;
  }
  // Compiled under a name of this process's, then renamed into place whole.
  const std::string tmp = dir + "/" + name + "." + std::to_string(getpid());
  {
    std::ofstream out(tmp + ".cpp", std::ios::binary);
    out.write(reinterpret_cast<const char *>(src), static_cast<std::streamsize>(n));
    if (!out) {
      t.why_not = "the timing runner's source cannot be written to " + dir;
      return t;
    }
  }
  const int rc = run_quietly(
      {t.cxx, "-O2", "-std=c++17", "-I" + include, "-c", tmp + ".cpp", "-o", tmp + ".o"});
  std::remove((tmp + ".cpp").c_str());
  if (rc != 0 || std::rename((tmp + ".o").c_str(), t.runner_object.c_str()) != 0) {
    std::remove((tmp + ".o").c_str());
    t.why_not = "the timing runner did not compile with " + t.cxx;
    return t;
  }
  t.ok = true;
  return t;
}

std::string build_candidate(const Halide::Pipeline &pipeline, const Halide::Target &target,
                            const AotToolchain &tools, const std::string &work, int index) {
  const std::string base = work + "/candidate" + std::to_string(index);
  Halide::Pipeline p = pipeline;
  p.compile_to_static_library(base, p.infer_arguments(), "hkfac_candidate", target);
  const int rc = run_quietly(
      {tools.cxx, "-o", base, tools.runner_object, base + ".a", "-lpthread", "-ldl", "-lm"});
  plugin_check(rc == 0) << "linking candidate " << index << " with " << tools.cxx << " failed";
  return base;
}

} // namespace hkfac::sched
