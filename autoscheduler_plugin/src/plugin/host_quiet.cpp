// The host-wide timing lock and the check of the cores (see host_quiet.h).
#include "host_quiet.h"

#include <chrono>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/file.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace hkfac::sched {

HostTimingLock::HostTimingLock(std::string path) : path_(std::move(path)) {}

HostTimingLock::~HostTimingLock() { release(); }

bool HostTimingLock::take(int operation, double seconds) {
  if (fd_ < 0) {
    // Anyone may take it: the lock is the host's, whoever runs the generators.
    const mode_t old = umask(0);
    fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    umask(old);
    if (fd_ < 0)
      return false;
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::microseconds(static_cast<long>(seconds * 1e6));
  while (flock(fd_, operation | LOCK_NB) != 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      release();
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

bool HostTimingLock::shared(double seconds) { return take(LOCK_SH, seconds); }
bool HostTimingLock::exclusive(double seconds) { return take(LOCK_EX, seconds); }

void HostTimingLock::release() {
  if (fd_ >= 0) {
    flock(fd_, LOCK_UN);
    close(fd_);
    fd_ = -1;
  }
}

CoreUse::CoreUse(pid_t pid) : pid_(pid) { ok_ = read(pid_, busy_, total_, process_); }

bool CoreUse::read(pid_t pid, double &busy, double &total, double &process) {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  double v[10] = {};
  if (!(stat >> cpu) || cpu != "cpu")
    return false;
  for (double &x : v)
    stat >> x;
  // user nice system idle iowait irq softirq steal (guest time is inside user already)
  busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
  total = busy + v[3] + v[4];
  std::ifstream ps("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(ps, line))
    return false;
  // The command name may hold spaces: fields count from the last ')'.
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14)
      utime = std::stod(field);
    if (i == 15)
      stime = std::stod(field);
  }
  process = utime + stime;
  return true;
}

double CoreUse::foreign_share() const {
  double busy, total, process;
  if (!ok_ || !read(pid_, busy, total, process))
    return -1;
  const double all = total - total_;
  if (all <= 0)
    return 0;
  const double other = (busy - busy_) - (process - process_);
  return other > 0 ? other / all : 0;
}

} // namespace hkfac::sched
