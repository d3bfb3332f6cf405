// Keeping timings away from other work on the host: a host-wide lock and a check of the cores.
#pragma once

#include <string>
#include <sys/types.h>

namespace hkfac::sched {

// A host-wide reader-writer lock (flock on a file in /tmp, as generate_data.py --host-lock):
// generators compiling candidates hold it shared, one timing them holds it alone, so Hkfac runs
// of a parallel build never time beside each other's compiles. A process that dies releases it.
class HostTimingLock {
public:
  explicit HostTimingLock(std::string path);
  ~HostTimingLock();
  HostTimingLock(const HostTimingLock &) = delete;
  HostTimingLock &operator=(const HostTimingLock &) = delete;

  // Waits up to `seconds` for the lock; false (holding nothing) when it stays taken or the file
  // cannot be opened.
  bool shared(double seconds);
  bool exclusive(double seconds);
  void release();

private:
  bool take(int operation, double seconds);
  std::string path_;
  int fd_ = -1;
};

// Whether the cores stayed free for one process while it was timed. Other work on the host (a
// compile, another program) is read from /proc/stat as the busy time of all cores minus that of
// the timed process; a timing taken beside it is worse than none as a sample of this machine.
class CoreUse {
public:
  // Starts a window over the process `pid`.
  explicit CoreUse(pid_t pid);
  // Ends the window: the cores' busy time spent by other processes, as a fraction of all the
  // cores' time in the window; negative where /proc could not be read.
  double foreign_share() const;

private:
  static bool read(pid_t pid, double &busy, double &total, double &process);
  pid_t pid_;
  bool ok_ = false;
  double busy_ = 0, total_ = 0, process_ = 0;
};

} // namespace hkfac::sched
