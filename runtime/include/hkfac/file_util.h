// Little-endian byte helpers, a field-naming sequential reader, and whole-file reads/atomic
// writes, shared by the cost-model files and the K-FAC checkpoints.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hkfac/error.h"

namespace hkfac::detail {

// Byte-by-byte so the files read and write the same on any host byte order.
inline uint32_t load_le32(const uint8_t *p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
inline void store_le32(uint8_t *p, uint32_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
  p[2] = uint8_t(v >> 16);
  p[3] = uint8_t(v >> 24);
}
inline float load_le_float(const uint8_t *p) {
  const uint32_t u = load_le32(p);
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline void store_le_float(uint8_t *p, float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  store_le32(p, u);
}
inline uint64_t load_le64(const uint8_t *p) {
  return uint64_t(load_le32(p)) | uint64_t(load_le32(p + 4)) << 32;
}
inline void store_le64(uint8_t *p, uint64_t v) {
  store_le32(p, uint32_t(v));
  store_le32(p + 4, uint32_t(v >> 32));
}
inline double load_le_double(const uint8_t *p) {
  const uint64_t u = load_le64(p);
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
}
inline void append_le64(std::vector<uint8_t> &out, uint64_t v) {
  out.resize(out.size() + 8);
  store_le64(out.data() + out.size() - 8, v);
}
inline void append_le_double(std::vector<uint8_t> &out, double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  append_le64(out, u);
}
inline void append_le32(std::vector<uint8_t> &out, uint32_t v) {
  out.resize(out.size() + 4);
  store_le32(out.data() + out.size() - 4, v);
}
inline void append_le_float(std::vector<uint8_t> &out, float f) {
  out.resize(out.size() + 4);
  store_le_float(out.data() + out.size() - 4, f);
}

// Sequential little-endian reads over the first `available` bytes of a file of `total` bytes
// (a capped read keeps `available` below `total` for oversized files). Every error starts with
// `name` and says which field was being read, where, and what the file holds.
class FieldReader {
public:
  FieldReader(std::string name, const uint8_t *data, size_t available, size_t total)
      : name_(std::move(name)), data_(data), available_(available), total_(total) {}
  FieldReader(std::string name, const std::vector<uint8_t> &bytes)
      : FieldReader(std::move(name), bytes.data(), bytes.size(), bytes.size()) {}

  [[noreturn]] void fail(const std::string &what) const {
    throw Error(name_ + ": " + what + " (at byte " + std::to_string(pos_) + ")");
  }
  const uint8_t *take(size_t n, const std::string &field) {
    if (total_ - pos_ < n) {
      fail("truncated: " + field + " needs " + std::to_string(n) + " bytes, but the file has " +
           std::to_string(total_) + " bytes");
    }
    // Only reachable for a file larger than the caller's read cap.
    if (available_ - pos_ < n) {
      fail(field + ": the file of " + std::to_string(total_) + " bytes is larger than any " +
           "valid one (" + std::to_string(available_) + " bytes read)");
    }
    const uint8_t *p = data_ + pos_;
    pos_ += n;
    return p;
  }
  uint32_t u32(const std::string &field) { return load_le32(take(4, field)); }
  uint64_t u64(const std::string &field) { return load_le64(take(8, field)); }
  double f64(const std::string &field) { return load_le_double(take(8, field)); }
  // Bytes left after the current position, by the file's full size.
  size_t remaining() const { return total_ - pos_; }
  size_t position() const { return pos_; }
  size_t total() const { return total_; }

private:
  std::string name_;
  const uint8_t *data_;
  size_t available_, total_, pos_ = 0;
};

inline std::string errno_text() { return std::strerror(errno); }

// What a non-regular file is, for errors that refuse one.
inline const char *file_kind(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  if (S_ISLNK(mode))
    return "a symbolic link";
  return "not a regular file";
}

inline std::string not_regular_text(mode_t mode) {
  return std::string("is ") + file_kind(mode) + ", not a regular file";
}

// Size of a regular file, or an error naming `path`.
inline size_t regular_file_size(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw Error(path + ": cannot open: " + errno_text());
  if (!S_ISREG(st.st_mode))
    throw Error(path + ": " + not_regular_text(st.st_mode));
  return static_cast<size_t>(st.st_size);
}

inline bool is_directory(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// True when both paths exist and name the same file (after symbolic links, whatever the spelling).
inline bool same_file(const std::string &a, const std::string &b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

// Reads at most `max_bytes` from the start of `path`; `*total_size` gets the file's full size.
// The cap keeps a hostile or mistaken huge file from being read into memory just to be rejected.
inline std::vector<uint8_t> read_file_prefix(const std::string &path, size_t max_bytes,
                                             size_t *total_size) {
  // Opening a FIFO for reading waits for a writer, so non-regular files are refused before the
  // open; O_NONBLOCK covers one swapped in between (it changes nothing for a regular file).
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw Error(path + ": cannot open: " + errno_text());
  if (!S_ISREG(st.st_mode))
    throw Error(path + ": " + not_regular_text(st.st_mode));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    throw Error(path + ": cannot open: " + errno_text());
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  *total_size = static_cast<size_t>(st.st_size);
  std::vector<uint8_t> bytes(std::min(*total_size, max_bytes));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      const std::string why = n < 0 ? errno_text() : "file shrank while reading";
      ::close(fd);
      throw Error(path + ": read error after " + std::to_string(done) + " bytes: " + why);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return bytes;
}

// `path` with symbolic links in its last component followed, so a replacement lands on the
// link's target instead of replacing the link. A dangling link gives the path it points to.
inline std::string resolve_final_symlinks(const std::string &path) {
  std::string p = path;
  for (int hops = 0;; ++hops) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode))
      return p;
    if (hops == 40) // Linux's own limit (ELOOP)
      throw Error(path + ": too many levels of symbolic links");
    std::vector<char> target(static_cast<size_t>(st.st_size) + 256);
    const ssize_t n = ::readlink(p.c_str(), target.data(), target.size());
    if (n < 0)
      throw Error(path + ": cannot read the symbolic link " + p + ": " + errno_text());
    if (static_cast<size_t>(n) == target.size())
      throw Error(path + ": the symbolic link " + p + " changed while being read");
    const std::string to(target.data(), static_cast<size_t>(n));
    const size_t slash = p.rfind('/');
    // A relative target is relative to the link's own directory.
    p = to.compare(0, 1, "/") == 0 || slash == std::string::npos ? to : p.substr(0, slash + 1) + to;
  }
}

// Checks that `path` can be replaced by a new regular file (writing goes to a temporary file next
// to it, renamed over it) and returns the path to write: `path` with its symbolic links followed.
// Refuses, naming the reason: an existing target that is not a regular file (a device, FIFO,
// directory or socket: a rename would silently swap it for a plain file), an existing file
// without write permission (the rename needs only the directory's, so it would ignore that the
// file was made read-only; checked by its mode bits too, which root's access() ignores), and a
// directory in which no file can be created (probed by creating one).
inline std::string check_replaceable(const std::string &path) {
  if (path.empty())
    throw Error("empty output path");
  const std::string target = resolve_final_symlinks(path);
  const std::string shown = target == path ? path : path + " (-> " + target + ")";
  struct stat st;
  if (::lstat(target.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      throw Error(shown + ": " + not_regular_text(st.st_mode) + "; not replacing it");
    if (::access(target.c_str(), W_OK) != 0)
      throw Error(shown + ": cannot write: " + errno_text());
    if ((st.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) == 0)
      throw Error(shown + ": cannot write: the file is read-only");
  } else if (errno != ENOENT) {
    throw Error(shown + ": cannot write: " + errno_text());
  }
  static std::atomic<unsigned> probes{0};
  const std::string probe =
      target + ".probe." + std::to_string(::getpid()) + "." + std::to_string(probes++);
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    throw Error(shown + ": cannot create a file there: " + errno_text());
  ::close(fd);
  ::unlink(probe.c_str());
  return target;
}

// New contents for `path`, written and synced to a temporary file next to it on construction
// (after check_replaceable) and renamed over it by commit(), so readers see either the old file
// or the complete new one. Destroyed uncommitted, it removes the temporary file: several files
// can be prepared and committed only once all of them were written.
class PendingFile {
public:
  PendingFile(const std::string &path, const std::vector<uint8_t> &bytes)
      : path_(path), target_(check_replaceable(path)) {
    // Unique per process and call, so concurrent writers never share a temporary file.
    static std::atomic<unsigned> counter{0};
    tmp_ = target_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    // O_EXCL: never write through whatever may already sit at the temporary name.
    const int fd = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
      throw Error(path_ + ": cannot create " + tmp_ + ": " + errno_text());
    std::string why;
    // The replacement keeps the permissions of the file it replaces.
    struct stat st;
    if (::stat(target_.c_str(), &st) == 0 && ::fchmod(fd, st.st_mode & 07777) != 0)
      why = errno_text();
    size_t done = 0;
    while (why.empty() && done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        why = errno_text();
      else
        done += static_cast<size_t>(n);
    }
    if (why.empty() && ::fsync(fd) != 0)
      why = errno_text();
    if (::close(fd) != 0 && why.empty())
      why = errno_text();
    if (!why.empty()) {
      ::unlink(tmp_.c_str());
      throw Error(path_ + ": write error: " + why);
    }
  }
  ~PendingFile() {
    if (!tmp_.empty())
      ::unlink(tmp_.c_str());
  }
  PendingFile(PendingFile &&other) noexcept
      : path_(std::move(other.path_)), target_(std::move(other.target_)),
        tmp_(std::exchange(other.tmp_, std::string())) {}
  PendingFile(const PendingFile &) = delete;
  PendingFile &operator=(const PendingFile &) = delete;
  PendingFile &operator=(PendingFile &&) = delete;

  void commit() {
    if (tmp_.empty())
      throw Error(path_ + ": already committed");
    if (::rename(tmp_.c_str(), target_.c_str()) != 0) {
      const std::string why = errno_text();
      throw Error(path_ + ": cannot rename " + tmp_ + " into place: " + why);
    }
    tmp_.clear();
  }

private:
  std::string path_, target_, tmp_;
};

// Replaces `path` (its target, if it is a symbolic link) with `bytes` through a temporary file
// and a rename; see check_replaceable for what it refuses.
inline void write_file_atomically(const std::string &path, const std::vector<uint8_t> &bytes) {
  PendingFile(path, bytes).commit();
}

} // namespace hkfac::detail
