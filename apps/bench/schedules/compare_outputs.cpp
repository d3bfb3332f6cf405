// Compares two pipeline outputs saved by RunGen as .tmp files: exact for integers; floats within
// TOL relative to max(1, |expected|), i.e. absolute for image values in [0, 1]; integers within
// INT_TOL (default 0). Prints one line; exit 0 = agree, 1 = differ, 2 = unreadable.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// The ImageStack .tmp layout RunGen writes: int32 extents[4] (unused ones are 1), int32 type code,
// then the planar payload.
struct TmpImage {
  int32_t extents[4] = {1, 1, 1, 1};
  int32_t type_code = -1;
  std::vector<char> data;
};

// Element size and kind per type code, in halide_image_io's order.
struct TmpType {
  int bytes;
  bool is_float;
  bool is_signed;
};
constexpr TmpType kTmpTypes[] = {
    {4, true, true},  {8, true, true},   {1, false, false}, {1, false, true},  {2, false, false},
    {2, false, true}, {4, false, false}, {4, false, true},  {8, false, false}, {8, false, true}};

TmpImage load(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error("cannot open " + path);
  }
  TmpImage im;
  in.read(reinterpret_cast<char *>(im.extents), sizeof(im.extents));
  in.read(reinterpret_cast<char *>(&im.type_code), sizeof(im.type_code));
  if (!in || im.type_code < 0 || im.type_code >= int32_t(std::size(kTmpTypes))) {
    throw std::runtime_error("bad .tmp header in " + path);
  }
  size_t count = 1;
  for (int32_t e : im.extents) {
    count *= size_t(e);
  }
  im.data.resize(count * kTmpTypes[im.type_code].bytes);
  in.read(im.data.data(), std::streamsize(im.data.size()));
  if (!in) {
    throw std::runtime_error("truncated payload in " + path);
  }
  return im;
}

double element(const TmpImage &im, size_t i) {
  const char *p = im.data.data() + i * kTmpTypes[im.type_code].bytes;
  switch (im.type_code) {
  case 0: {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case 1: {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  case 2:
    return *reinterpret_cast<const uint8_t *>(p);
  case 3:
    return *reinterpret_cast<const int8_t *>(p);
  case 4: {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  case 5: {
    int16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  case 6: {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case 7: {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case 8: {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return double(v);
  }
  default: {
    int64_t v;
    std::memcpy(&v, p, 8);
    return double(v);
  }
  }
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 3 || argc > 5) {
    std::cerr << "usage: " << argv[0] << " EXPECTED.tmp ACTUAL.tmp [TOL=1e-4 [INT_TOL=0]]\n";
    return 2;
  }
  try {
    const TmpImage expected = load(argv[1]);
    const TmpImage actual = load(argv[2]);
    const double tol = argc >= 4 ? std::stod(argv[3]) : 1e-4;
    const double int_tol = argc == 5 ? std::stod(argv[4]) : 0;
    if (expected.type_code != actual.type_code ||
        std::memcmp(expected.extents, actual.extents, sizeof(expected.extents)) != 0) {
      std::cout << "differ: shape or type mismatch\n";
      return 1;
    }
    const bool is_float = kTmpTypes[expected.type_code].is_float;
    const size_t count = expected.data.size() / kTmpTypes[expected.type_code].bytes;
    size_t mismatches = 0, first = 0;
    double worst = 0;
    for (size_t i = 0; i < count; i++) {
      const double e = element(expected, i), a = element(actual, i);
      const bool same = is_float ? (std::isnan(e) && std::isnan(a)) ||
                                       std::abs(e - a) <= tol * std::max(1.0, std::abs(e))
                                 : std::abs(e - a) <= int_tol;
      if (!same) {
        first = mismatches++ == 0 ? i : first;
        worst = std::max(worst, std::abs(e - a));
      }
    }
    if (mismatches == 0) {
      std::cout << "agree: " << count << " elements\n";
      return 0;
    }
    std::cout << "differ: " << mismatches << " of " << count << " elements, largest difference "
              << worst << ", first at flat index " << first << " (expected "
              << element(expected, first) << ", got " << element(actual, first) << ")\n";
    return 1;
  } catch (const std::exception &e) {
    std::cout << "error: " << e.what() << "\n";
    return 2;
  }
}
