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

// Size of a regular file, or an error naming `path`.
inline size_t regular_file_size(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw Error(path + ": cannot open: " + errno_text());
  if (!S_ISREG(st.st_mode))
    throw Error(path + ": not a regular file");
  return static_cast<size_t>(st.st_size);
}

inline bool is_directory(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Reads at most `max_bytes` from the start of `path`; `*total_size` gets the file's full size.
// The cap keeps a hostile or mistaken huge file from being read into memory just to be rejected.
inline std::vector<uint8_t> read_file_prefix(const std::string &path, size_t max_bytes,
                                             size_t *total_size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw Error(path + ": cannot open: " + errno_text());
  struct stat st;
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

// Writes `bytes` to a temporary file next to `path`, syncs it and renames it over `path`, so
// readers see either the old file or the complete new one.
inline void write_file_atomically(const std::string &path, const std::vector<uint8_t> &bytes) {
  // Unique per process and call, so concurrent writers never share a temporary file.
  static std::atomic<unsigned> counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw Error(path + ": cannot create " + tmp + ": " + errno_text());
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      const std::string why = errno_text();
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(path + ": write error: " + why);
    }
    done += static_cast<size_t>(n);
  }
  std::string why;
  if (::fsync(fd) != 0)
    why = errno_text();
  if (::close(fd) != 0 && why.empty())
    why = errno_text();
  if (!why.empty()) {
    ::unlink(tmp.c_str());
    throw Error(path + ": write error: " + why);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw Error(path + ": cannot rename " + tmp + " into place: " + why);
  }
}

} // namespace hkfac::detail
