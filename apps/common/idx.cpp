// idx files through zlib's gz* calls, which read plain files too.
#include "idx.h"

#include <zlib.h>

#include <cstdint>

#include "hkfac/error.h"

namespace hkfac::apps {
namespace {

uint32_t big_endian(const unsigned char *p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

// The header's `dims` extents after its magic number, and the payload of their product bytes.
std::vector<unsigned char> read_idx(const std::string &path, uint32_t magic, int dims,
                                    std::vector<uint32_t> &extents) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f)
    throw Error("idx: cannot open '" + path + "'");
  unsigned char header[16];
  const int header_bytes = 4 + 4 * dims;
  if (gzread(f, header, header_bytes) != header_bytes || big_endian(header) != magic) {
    gzclose(f);
    throw Error("idx: '" + path + "' is not an idx file of " + std::to_string(dims) +
                " dimension(s) of unsigned bytes");
  }
  size_t total = 1;
  extents.clear();
  for (int d = 0; d < dims; ++d) {
    extents.push_back(big_endian(header + 4 + 4 * d));
    total *= extents.back();
  }
  // Fashion-MNIST's largest file holds 47 MB; a header claiming far more is damage.
  if (total > (size_t(1) << 31)) {
    gzclose(f);
    throw Error("idx: '" + path + "' claims " + std::to_string(total) + " bytes");
  }
  std::vector<unsigned char> raw(total);
  const int got = gzread(f, raw.data(), static_cast<unsigned>(raw.size()));
  gzclose(f);
  if (got != static_cast<int>(raw.size()))
    throw Error("idx: '" + path + "' is truncated");
  return raw;
}

} // namespace

kfac::Matrix read_idx_images(const std::string &path) {
  std::vector<uint32_t> e;
  const std::vector<unsigned char> raw = read_idx(path, 0x803, 3, e);
  kfac::Matrix m(static_cast<Eigen::Index>(e[0]), static_cast<Eigen::Index>(e[1]) * e[2]);
  for (size_t i = 0; i < raw.size(); ++i)
    m.data()[i] = raw[i] / 255.0f;
  return m;
}

std::vector<int> read_idx_labels(const std::string &path) {
  std::vector<uint32_t> e;
  const std::vector<unsigned char> raw = read_idx(path, 0x801, 1, e);
  return std::vector<int>(raw.begin(), raw.end());
}

} // namespace hkfac::apps
