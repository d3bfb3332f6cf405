// Timing candidates in child processes (see measure.h).
#include "measure.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <sstream>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "aot_candidate.h"
#include "apply_schedule.h"
#include "estimated_run.h"
#include "host_quiet.h"

namespace hkfac::sched {

using namespace Halide;
using namespace Halide::Internal;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

Clock::time_point after(Clock::time_point t, double seconds) {
  return t + std::chrono::microseconds(static_cast<long long>(std::max(0.0, seconds) * 1e6));
}

void send_line(int fd, const std::string &line) {
  const std::string s = line + "\n";
  size_t done = 0;
  while (done < s.size()) {
    // MSG_NOSIGNAL: a child that died must not take this process down with SIGPIPE.
    const ssize_t k = send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (k <= 0)
      return;
    done += static_cast<size_t>(k);
  }
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  while (!s.empty() && s.back() == ' ')
    s.pop_back();
  return s.size() > 300 ? s.substr(0, 300) + "..." : s;
}

// Blocking read of one line in the child.
bool read_line_blocking(int fd, std::string &buffer, std::string &line) {
  for (;;) {
    const size_t nl = buffer.find('\n');
    if (nl != std::string::npos) {
      line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      return true;
    }
    char chunk[256];
    const ssize_t k = recv(fd, chunk, sizeof(chunk), 0);
    if (k <= 0)
      return false;
    buffer.append(chunk, static_cast<size_t>(k));
  }
}

// The child: applies the candidate to its copy of the Funcs, compiles, then times on request.
// A crash as Halide's passes would have one. LLVM's file-removal handler returns from a raised
// signal (a real fault would fault again), so the default action is restored first.
[[noreturn]] void crash() {
  signal(SIGSEGV, SIG_DFL);
  raise(SIGSEGV);
  _exit(128 + SIGSEGV);
}

// Protocol (lines): child "C <compile seconds>" or "F <reason>"; parent "T <min seconds> <stop
// ms>" answered by "R <best ms> <runs>"; parent "Q" ends it.
[[noreturn]] void child_main(int fd, const PipelineAnalysis &dag,
                             const std::vector<Function> &outputs, const State &state,
                             EstimatedRun &run, const MeasureSettings &settings,
                             const AotToolchain &tools, const std::string &work, int index,
                             int debug) {
  const rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core); // a crash in Halide's passes leaves no core file behind
  if (debug < 3) {
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) {
      dup2(null, 1);
      dup2(null, 2);
    }
  }
  std::string buffer, line;
  try {
    const auto t0 = Clock::now();
    apply_schedule(dag, state, outputs, true);
    std::vector<Func> funcs;
    for (const Function &f : outputs)
      funcs.emplace_back(f);
    Pipeline pipeline(funcs);
    if (tools.ok) {
      // Built ahead of time: the timing runner runs it later, in a process of its own.
      build_candidate(pipeline, settings.jit.without_feature(Target::JIT), tools, work, index);
      if (index == settings.inject_crash)
        crash();
      if (index == settings.inject_hang)
        for (;;)
          pause();
      send_line(fd, "C " + std::to_string(seconds_between(t0, Clock::now())));
      _exit(0);
    }
    run.bind(settings.seed);
    pipeline.compile_jit(settings.jit);
    if (index == settings.inject_hang)
      for (;;)
        pause();
    send_line(fd, "C " + std::to_string(seconds_between(t0, Clock::now())));
    bool warm = false;
    while (read_line_blocking(fd, buffer, line)) {
      if (line.empty() || line[0] != 'T')
        break;
      double min_s = 0, stop_ms = 0;
      std::istringstream(line.substr(1)) >> min_s >> stop_ms;
      if (index == settings.inject_crash)
        crash();
      if (!warm) {
        // The first run faults in the outputs' pages and starts Halide's thread pool.
        pipeline.realize(run.outputs(), settings.jit);
        warm = true;
      }
      double best = INFINITY;
      int runs = 0;
      const auto start = Clock::now();
      do {
        const auto a = Clock::now();
        pipeline.realize(run.outputs(), settings.jit);
        const double ms = seconds_between(a, Clock::now()) * 1e3;
        best = std::min(best, ms);
        ++runs;
        if (ms > stop_ms)
          break;
      } while (runs < 2 || seconds_between(start, Clock::now()) < min_s);
      std::ostringstream reply;
      reply.precision(17);
      reply << "R " << best << " " << runs;
      send_line(fd, reply.str());
    }
  } catch (const std::exception &e) {
    send_line(fd, "F " + one_line(e.what()));
  } catch (...) {
    send_line(fd, "F an exception that is not a std::exception");
  }
  _exit(0);
}

struct Child {
  int index = -1; // the candidate
  pid_t pid = -1;
  std::string runner; // built ahead of time: the executable the timing runs
  int fd = -1;
  std::string buffer;
  bool compiling = true;
  Clock::time_point started;
};

enum class Read { Line, Eof, Timeout };

Read read_line(Child &c, Clock::time_point deadline, std::string &line) {
  for (;;) {
    const size_t nl = c.buffer.find('\n');
    if (nl != std::string::npos) {
      line = c.buffer.substr(0, nl);
      c.buffer.erase(0, nl + 1);
      return Read::Line;
    }
    // A deadline already past still takes what has arrived (a poll of 0 ms).
    const double left = std::max(0.0, seconds_between(Clock::now(), deadline));
    pollfd p{c.fd, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(std::ceil(std::min(left * 1e3, 1e9))));
    if (r < 0 && errno == EINTR)
      continue;
    if (r == 0) {
      if (left <= 0)
        return Read::Timeout;
      continue;
    }
    char chunk[256];
    const ssize_t k = r > 0 ? recv(c.fd, chunk, sizeof(chunk), 0) : -1;
    if (k <= 0)
      return Read::Eof;
    c.buffer.append(chunk, static_cast<size_t>(k));
  }
}

// How a child that stopped talking ended (reaping it).
std::string ending(Child &c) {
  int status = 0;
  pid_t r = -1;
  for (int i = 0; i < 200 && (r = waitpid(c.pid, &status, WNOHANG)) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (r == 0) {
    kill(c.pid, SIGKILL);
    r = waitpid(c.pid, &status, 0);
  }
  c.pid = -1;
  if (r <= 0)
    return "its process ended";
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char *name = sig == SIGSEGV   ? "SIGSEGV"
                       : sig == SIGBUS  ? "SIGBUS"
                       : sig == SIGFPE  ? "SIGFPE"
                       : sig == SIGILL  ? "SIGILL"
                       : sig == SIGABRT ? "SIGABRT"
                       : sig == SIGKILL ? "SIGKILL"
                                        : nullptr;
    return std::string("crashed (") + (name ? name : "signal " + std::to_string(sig)) + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

void stop(Child &c) {
  if (c.fd >= 0) {
    close(c.fd);
    c.fd = -1;
  }
  if (c.pid > 0) {
    kill(c.pid, SIGKILL);
    waitpid(c.pid, nullptr, 0);
    c.pid = -1;
  }
}

// Every child this measurement started, stopped whatever happens to the caller.
struct Children {
  std::vector<Child> all;
  ~Children() {
    for (Child &c : all)
      stop(c);
  }
};

// Starts the timing runner `path` with `spec`, its stdin and stdout on a socket of `c`'s, and
// waits for it to say it is ready: "" or why it is not.
std::string start_runner(Child &c, const std::string &path, const std::string &spec, uint64_t seed,
                         int debug, Clock::time_point deadline) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return "no socket for the timing runner";
  const std::string seed_text = std::to_string(seed);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(sv[1], 0);
    dup2(sv[1], 1);
    if (debug < 3) {
      const int null = open("/dev/null", O_WRONLY);
      if (null >= 0)
        dup2(null, 2);
    }
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    execl(path.c_str(), path.c_str(), spec.c_str(), seed_text.c_str(),
          static_cast<char *>(nullptr));
    _exit(127);
  }
  close(sv[1]);
  if (pid < 0) {
    close(sv[0]);
    return "the timing runner did not start";
  }
  c.pid = pid;
  c.fd = sv[0];
  c.buffer.clear();
  std::string line;
  const Read got = read_line(c, deadline, line);
  if (got == Read::Line && line == "READY")
    return "";
  const std::string why = got == Read::Timeout ? "the timing runner did not start in time"
                          : got == Read::Line
                              ? "run: " + line.substr(std::min<size_t>(2, line.size()))
                              : "run: " + ending(c);
  stop(c);
  return why;
}

// A directory of its own for one measurement's builds, removed with everything in it.
struct WorkDir {
  std::string path;
  WorkDir() {
    const char *tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/hkfac-candidates-XXXXXX";
    if (mkdtemp(pattern.data()))
      path = pattern;
  }
  ~WorkDir() {
    if (path.empty())
      return;
    if (DIR *d = opendir(path.c_str())) {
      while (dirent *e = readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
          std::remove((path + "/" + e->d_name).c_str());
      closedir(d);
    }
    rmdir(path.c_str());
  }
};

} // namespace

std::vector<Timing> measure_candidates(const PipelineAnalysis &dag,
                                       const std::vector<Function> &outputs,
                                       const std::vector<StatePtr> &candidates,
                                       const MeasureSettings &settings, const Parameters &params) {
  const int n = static_cast<int>(candidates.size());
  std::vector<Timing> out(n);
  if (n == 0)
    return out;
  EstimatedRun run(dag, outputs);
  if (!run.missing().empty()) {
    for (Timing &t : out)
      t.failure = "not timed: " + run.missing();
    return out;
  }
  const auto start = Clock::now();
  const auto deadline = after(start, settings.budget_s);
  // Ahead of time and run fresh where a compiler is at hand; else in the children themselves.
  WorkDir work;
  AotToolchain tools;
  if (!settings.runner_dir.empty() && !work.path.empty())
    tools = aot_toolchain(settings.runner_dir);
  const std::string spec = work.path + "/arguments.spec";
  if (tools.ok) {
    std::ofstream f(spec);
    f << run.runner_spec();
    tools.ok = static_cast<bool>(f);
  }
  if (!tools.ok && !settings.runner_dir.empty())
    log_line(params, 1,
             "candidates timed in this process's children (" +
                 (tools.why_not.empty() ? std::string("no work directory") : tools.why_not) +
                 "): large per-task buffers may time faster than in a fresh program");
  HostTimingLock lock(settings.lock_path);
  if (!settings.lock_path.empty())
    lock.shared(std::min(2.0, settings.budget_s / 4));
  std::fflush(stdout);
  std::fflush(stderr);

  // Compiles, `compile_jobs` at a time, launched while half the budget is left.
  Children kids;
  int next = 0;
  auto compiling = [&]() {
    return std::count_if(kids.all.begin(), kids.all.end(),
                         [](const Child &c) { return c.pid > 0 && c.compiling; });
  };
  const auto launch_until = after(start, 0.5 * settings.budget_s);
  const auto compile_until = after(start, 0.75 * settings.budget_s);
  while (true) {
    while (next < n && compiling() < std::max(1, settings.compile_jobs) &&
           Clock::now() < launch_until) {
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        out[next++].failure = "not timed: no socket for its process";
        continue;
      }
      const pid_t pid = fork();
      if (pid == 0) {
        close(sv[0]);
        child_main(sv[1], dag, outputs, *candidates[next], run, settings, tools, work.path, next,
                   params.debug);
      }
      close(sv[1]);
      if (pid < 0) {
        close(sv[0]);
        out[next++].failure = "not timed: fork failed";
        continue;
      }
      Child c;
      c.index = next++;
      c.pid = pid;
      c.fd = sv[0];
      c.started = Clock::now();
      kids.all.push_back(std::move(c));
    }
    if (compiling() == 0)
      break;
    // Wait for any compiling child to report.
    std::vector<pollfd> fds;
    std::vector<Child *> who;
    for (Child &c : kids.all)
      if (c.pid > 0 && c.compiling) {
        fds.push_back({c.fd, POLLIN, 0});
        who.push_back(&c);
      }
    const double left = seconds_between(Clock::now(), compile_until);
    if (left <= 0) {
      for (Child *c : who) {
        out[c->index].failure = "its compile did not finish within the budget";
        stop(*c);
      }
      break;
    }
    const int r = poll(fds.data(), fds.size(), static_cast<int>(std::min(left, 0.25) * 1e3) + 1);
    if (r <= 0)
      continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents)
        continue;
      Child &c = *who[i];
      std::string line;
      const Read got = read_line(c, Clock::now(), line);
      if (got == Read::Timeout)
        continue;
      Timing &t = out[c.index];
      if (got == Read::Line && line.rfind("C ", 0) == 0) {
        t.compile_s = std::atof(line.c_str() + 2);
        c.compiling = false;
        if (tools.ok) {
          // Its build is done: the child ends, and the runner built takes its place later.
          c.runner = work.path + "/candidate" + std::to_string(c.index);
          close(c.fd);
          c.fd = -1;
          ending(c);
        }
      } else {
        t.failure = got == Read::Line ? "compile: " + line.substr(std::min<size_t>(2, line.size()))
                                      : "compile: " + ending(c);
        stop(c);
      }
    }
  }
  for (int i = next; i < n; ++i)
    out[i].failure = "not compiled: the budget ran out";
  lock.release();

  // Timing: one child at a time, in rounds that rotate the order.
  std::vector<Child *> ready;
  for (Child &c : kids.all) {
    if (!c.runner.empty()) {
      const std::string why =
          start_runner(c, c.runner, spec, settings.seed, params.debug, after(Clock::now(), 10.0));
      if (!why.empty())
        out[c.index].failure = why;
    }
    if (c.pid > 0 && !c.compiling)
      ready.push_back(&c);
  }
  bool alone = settings.lock_path.empty();
  if (!ready.empty() && !alone)
    alone = lock.exclusive(std::clamp(seconds_between(Clock::now(), deadline) / 3, 0.5, 5.0));
  std::vector<bool> spoiled(n, false);
  double best = INFINITY;
  for (int round = 0; round < std::max(1, settings.rounds); ++round) {
    if (round > 0 && Clock::now() >= deadline)
      break;
    const size_t k = ready.size();
    for (size_t j = 0; j < k; ++j) {
      Child &c = *ready[(j + round) % k];
      if (c.pid <= 0)
        continue;
      Timing &t = out[c.index];
      const double stop_ms = std::isfinite(best)
                                 ? std::max(5 * best, 1.0)
                                 : std::max(1e3, seconds_between(Clock::now(), deadline) * 1e3);
      for (int attempt = 0; attempt < 2; ++attempt) {
        CoreUse use(c.pid);
        std::ostringstream cmd;
        cmd << "T " << settings.min_round_s << " " << stop_ms;
        send_line(c.fd, cmd.str());
        std::string line;
        const Read got =
            read_line(c, after(Clock::now(), settings.min_round_s + 3 * stop_ms / 1e3 + 1), line);
        if (got != Read::Line || line.rfind("R ", 0) != 0) {
          t.ok = false;
          t.failure = got == Read::Timeout ? "stopped: slower than five times the best (" +
                                                 std::to_string(best) + " ms) or hung"
                      : got == Read::Line ? "run: " + line.substr(std::min<size_t>(2, line.size()))
                                          : "run: " + ending(c);
          stop(c);
          break;
        }
        double ms = INFINITY;
        int runs = 0;
        std::istringstream(line.substr(2)) >> ms >> runs;
        const double foreign = use.foreign_share();
        const bool quiet = alone && foreign >= 0 && foreign <= settings.max_foreign_share;
        if (!quiet && attempt == 0) {
          // Something else used the cores: wait a moment and take the sample again.
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          continue;
        }
        spoiled[c.index] = spoiled[c.index] || !quiet;
        t.runs += runs;
        t.ms = t.ok ? std::min(t.ms, ms) : ms;
        t.ok = true;
        if (ms > stop_ms) {
          // Out of the running: its time stands (a sample of what the model rated well and
          // ran slowly is worth keeping), but it is not timed again.
          t.stopped = true;
          stop(c);
        }
        break;
      }
      if (t.ok)
        best = std::min(best, t.ms);
    }
  }
  for (Child *c : ready) {
    if (c->pid > 0)
      send_line(c->fd, "Q");
    out[c->index].quiet = out[c->index].ok && !spoiled[c->index];
  }
  for (Child &c : kids.all)
    if (c.pid > 0)
      ending(c);
  return out;
}

} // namespace hkfac::sched
