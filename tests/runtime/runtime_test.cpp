// Runtime: device parsing, the CUDA probe, zero-copy Eigen views and the buffer value loops.
#include "hkfac/buffer.h"
#include "hkfac/device.h"

#include "../test_util.h"

namespace hkfac {
namespace {

TEST(Device, ParseAcceptsCpuAndAutoAndRejectsOthersByName) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu);
  Device a = parse_device("auto");
  EXPECT_EQ(a == Device::cuda, cuda_status().usable);
  try {
    parse_device("gpu0", "HKFAC_DEVICE");
    FAIL() << "expected hkfac::Error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("HKFAC_DEVICE"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("gpu0"), std::string::npos);
  }
}

TEST(Device, CudaProbeIsConsistentAndExplainsItself) {
  const CudaStatus &s = cuda_status();
  if (s.usable) {
    EXPECT_GE(s.device_count, 1);
    EXPECT_EQ(parse_device("cuda"), Device::cuda);
  } else {
    EXPECT_FALSE(s.reason.empty());
    EXPECT_THROW(parse_device("cuda"), Error);
    EXPECT_THROW(require_device(Device::cuda), Error);
  }
  EXPECT_NO_THROW(require_device(Device::cpu));
}

TEST(Buffers, EigenViewAliasesTheBufferWithoutCopy) {
  Buffer<float> b = make_matrix<float>(3, 5);
  auto m = as_eigen(b);
  ASSERT_EQ(m.rows(), 3);
  ASSERT_EQ(m.cols(), 5);
  m(2, 4) = 7.0f;
  m(1, 0) = -2.0f;
  EXPECT_EQ(b(4, 2), 7.0f); // Halide index order is (column, row)
  EXPECT_EQ(b(0, 1), -2.0f);
  EXPECT_EQ(m.data(), b.data());
}

TEST(Buffers, WrapAliasesAnEigenMatrix) {
  RowMajorMatrix<float> m = RowMajorMatrix<float>::Zero(4, 2);
  Buffer<float> b = wrap<float>(m);
  b(1, 3) = 5.0f;
  EXPECT_EQ(m(3, 1), 5.0f);
  EXPECT_EQ(rows(b), 4);
  EXPECT_EQ(cols(b), 2);
}

TEST(Buffers, BadShapesAreErrors) {
  EXPECT_THROW(make_matrix<float>(0, 3), Error);
  EXPECT_THROW(make_vector<float>(-1), Error);
  Buffer<float> b3(2, 2, 2);
  EXPECT_THROW(as_eigen(b3), Error);
}

// The plain-loop replacements of Buffer::for_each_value / fill / copy_from (buffer_values.h),
// against coordinates read element by element: a 3-D buffer, a cropped (strided) view with
// nonzero mins, and a transposed (non-unit innermost stride) copy.
TEST(Buffers, ValueLoopsVisitEveryElementOnceInStorageOrder) {
  Buffer<float> b(5, 4, 3);
  float next = 0.0f;
  for_each_value(b, [&](float &v) { v = next++; });
  for (int z = 0; z < 3; ++z)
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 5; ++x)
        EXPECT_EQ(b(x, y, z), static_cast<float>(x + 5 * (y + 4 * z)));

  Buffer<float> view = b.cropped(0, 1, 3).cropped(1, 2, 2);
  fill(view, -1.0f);
  int changed = 0;
  for (int z = 0; z < 3; ++z)
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 5; ++x) {
        const bool inside = x >= 1 && x < 4 && y >= 2;
        changed += b(x, y, z) == -1.0f;
        if (!inside) {
          EXPECT_EQ(b(x, y, z), static_cast<float>(x + 5 * (y + 4 * z)));
        }
      }
  EXPECT_EQ(changed, 3 * 2 * 3);

  Buffer<float> m = make_matrix<float>(3, 4);
  for_each_value(m, [&](float &v) { v = next++; });
  Buffer<float> t = Buffer<float>(3, 4).transposed(0, 1); // dimension 0 has stride 3
  copy_values(t, m);
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 4; ++x)
      EXPECT_EQ(t(x, y), m(x, y));
  Buffer<float> wrong(4, 4);
  EXPECT_THROW(copy_values(wrong, m), Error);
}

} // namespace
} // namespace hkfac
