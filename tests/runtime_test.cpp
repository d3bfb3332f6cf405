// Runtime: device parsing, the CUDA probe and zero-copy Eigen views.
#include "hkfac/buffer.h"
#include "hkfac/device.h"

#include "test_util.h"

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

} // namespace
} // namespace hkfac
