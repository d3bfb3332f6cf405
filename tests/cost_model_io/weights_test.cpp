// hwf1 .weights files and old weights directories: round trips, byte layout, validation, and
// what the atomic writer refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "hkfac/cost_model/weights.h"
#include "hkfac/file_util.h"
#include "io_test_util.h"

namespace cm = hkfac::cost_model;
using hkfac::Buffer;
using hkfac::testing::push_le32;
using hkfac::testing::read_bytes;
using hkfac::testing::ScratchDir;
using hkfac::testing::write_bytes;

namespace {

// The message of the hkfac::Error `f` throws ("" and a test failure when it throws none).
template <typename F> std::string error_of(F f) {
  try {
    f();
  } catch (const hkfac::Error &e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an hkfac::Error";
  return "";
}

void expect_bitwise_equal(const cm::Weights &a, const cm::Weights &b) {
  EXPECT_EQ(a.pipeline_features_version, b.pipeline_features_version);
  EXPECT_EQ(a.schedule_features_version, b.schedule_features_version);
  for (int i = 0; i < cm::kNumWeightBuffers; i++) {
    const Buffer<float> &x = *a.buffers()[i], &y = *b.buffers()[i];
    ASSERT_EQ(x.dimensions(), y.dimensions()) << cm::kWeightBufferNames[i];
    for (int d = 0; d < x.dimensions(); d++)
      ASSERT_EQ(x.dim(d).extent(), y.dim(d).extent());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size_in_bytes()), 0) << cm::kWeightBufferNames[i];
  }
}

// Offset of buffer `index`'s dimension count in an hwf1 stream for S schedule features.
size_t buffer_offset(int index, int s) {
  size_t off = 16;
  for (int b = 0; b < index; b++) {
    const std::vector<int> shape = cm::weight_buffer_shape(b, s);
    size_t n = 1;
    for (int e : shape)
      n *= e;
    off += 4 + 4 * shape.size() + 4 * n;
  }
  return off;
}

void put_le32(std::vector<uint8_t> &bytes, size_t offset, uint32_t v) {
  for (int i = 0; i < 4; i++)
    bytes[offset + i] = static_cast<uint8_t>(v >> (8 * i));
}

cm::Weights parse(const std::vector<uint8_t> &bytes, cm::WeightsLoadOptions options = {}) {
  return cm::parse_weights(bytes.data(), bytes.size(), "test.weights", options);
}

class WeightsFile : public ::testing::TestWithParam<int> {};

TEST_P(WeightsFile, WriteThenReadIsBitwiseEqual) {
  const int s = GetParam();
  ScratchDir dir;
  const cm::Weights w = cm::random_weights(s, 42);
  cm::save_weights_file(w, dir.file("w.weights"));
  const cm::Weights back = cm::load_weights_file(dir.file("w.weights"));
  EXPECT_EQ(back.schedule_features(), s);
  EXPECT_EQ(back.schedule_features_version, cm::schedule_features_version_for(s));
  expect_bitwise_equal(w, back);
  // The temporary file of the atomic write is gone.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

TEST_P(WeightsFile, WriterEmitsHandBuiltLittleEndianBytesAndReaderParsesThem) {
  const int s = GetParam();
  cm::Weights w = cm::make_weights(s);
  std::vector<uint8_t> expected;
  push_le32(expected, 0x68776631);
  push_le32(expected, 101);
  push_le32(expected, s == 39 ? 105 : 200);
  push_le32(expected, 6);
  uint32_t bits = 0x3f800000; // 1.0f, then its successors: distinct, finite, endian-revealing
  for (int b = 0; b < cm::kNumWeightBuffers; b++) {
    Buffer<float> &buf = *w.buffers()[b];
    push_le32(expected, buf.dimensions());
    for (int d = 0; d < buf.dimensions(); d++)
      push_le32(expected, buf.dim(d).extent());
    // Dimension 0 fastest, as Halide lays the buffer out.
    for (size_t i = 0; i < buf.number_of_elements(); i++, bits += 0x101) {
      std::memcpy(buf.data() + i, &bits, 4);
      push_le32(expected, bits);
    }
  }
  EXPECT_EQ(expected.size(), s == 39 ? 17136u : 20400u);
  EXPECT_EQ(cm::serialize_weights(w), expected);
  expect_bitwise_equal(parse(expected), w);
}

INSTANTIATE_TEST_SUITE_P(CpuAndGpu, WeightsFile, ::testing::Values(39, 73),
                         [](const auto &info) { return "S" + std::to_string(info.param); });

TEST(WeightsFile, FirstBytesOnDiskAreTheSignature1fwh) {
  const std::vector<uint8_t> bytes = cm::serialize_weights(cm::make_weights(39));
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "1fwh");
}

TEST(WeightsFile, NonDenseBufferIsWrittenInDimensionZeroFastestOrder) {
  cm::Weights w = cm::random_weights(39, 3);
  // Same values, storage transposed: the file must not change.
  Buffer<float> transposed(w.conv1_filter.dim(1).extent(), w.conv1_filter.dim(0).extent());
  transposed.transpose(0, 1);
  transposed.for_each_element([&](int x, int y) { transposed(x, y) = w.conv1_filter(x, y); });
  const std::vector<uint8_t> dense = cm::serialize_weights(w);
  w.conv1_filter = transposed;
  EXPECT_EQ(cm::serialize_weights(w), dense);
}

TEST(WeightsFile, BadSignatureIsAnErrorNamingFileAndBothValues) {
  std::vector<uint8_t> bytes = cm::serialize_weights(cm::make_weights(39));
  put_le32(bytes, 0, 0x12345678);
  const std::string msg = error_of([&] { parse(bytes); });
  EXPECT_NE(msg.find("test.weights: signature"), std::string::npos) << msg;
  EXPECT_NE(msg.find("68776631"), std::string::npos) << msg;
  EXPECT_NE(msg.find("12345678"), std::string::npos) << msg;
}

TEST(WeightsFile, WrongVersionIsAnErrorUnlessAllowed) {
  std::vector<uint8_t> bytes = cm::serialize_weights(cm::make_weights(39));
  put_le32(bytes, 4, 3);
  std::string msg = error_of([&] { parse(bytes); });
  EXPECT_NE(msg.find("pipeline features version: expected 101, found 3"), std::string::npos) << msg;
  put_le32(bytes, 4, 101);
  put_le32(bytes, 8, 200); // the GPU version on a CPU-shaped file
  msg = error_of([&] { parse(bytes); });
  EXPECT_NE(msg.find("schedule features version: expected 105, found 200"), std::string::npos)
      << msg;
  cm::WeightsLoadOptions allow;
  allow.allow_version_mismatch = true;
  put_le32(bytes, 8, 7); // a foreign version
  EXPECT_EQ(parse(bytes, allow).schedule_features_version, 7u);
}

TEST(WeightsFile, OurVersionForTheOtherScheduleFeatureCountIsRefusedBySavingAndLoading) {
  cm::Weights w = cm::make_weights(39);
  w.schedule_features_version = cm::kGpuScheduleFeaturesVersion;
  std::string msg = error_of([&] { cm::serialize_weights(w); });
  EXPECT_NE(msg.find("schedule features version: expected 105 for S = 39, found 200"),
            std::string::npos)
      << msg;
  ScratchDir dir;
  EXPECT_NE(error_of([&] { cm::save_weights_file(w, dir.file("w.weights")); }).find("found 200"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir.file("w.weights")));
  // Loading refuses it even when foreign versions are allowed, so what loads also saves.
  std::vector<uint8_t> bytes = cm::serialize_weights(cm::make_weights(73));
  put_le32(bytes, 8, cm::kCpuScheduleFeaturesVersion);
  cm::WeightsLoadOptions allow;
  allow.allow_version_mismatch = true;
  msg = error_of([&] { parse(bytes, allow); });
  EXPECT_NE(msg.find("expected 200 for S = 73, found 105"), std::string::npos) << msg;
  // Halide's version is not ours, so it is written as given.
  w.schedule_features_version = cm::kHalideAdams2019Version;
  EXPECT_NO_THROW(cm::serialize_weights(w));
}

TEST(WeightsFile, BufferCountOtherThanSixIsAnError) {
  std::vector<uint8_t> bytes = cm::serialize_weights(cm::make_weights(39));
  put_le32(bytes, 12, 7);
  const std::string msg = error_of([&] { parse(bytes); });
  EXPECT_NE(msg.find("buffer count: expected 6, found 7"), std::string::npos) << msg;
}

TEST(WeightsFile, WrongDimensionCountNamesTheBuffer) {
  std::vector<uint8_t> bytes = cm::serialize_weights(cm::make_weights(39));
  put_le32(bytes, buffer_offset(4, 39), 3);
  const std::string msg = error_of([&] { parse(bytes); });
  EXPECT_NE(msg.find("conv1_filter dimension count: expected 2, found 3"), std::string::npos)
      << msg;
}

TEST(WeightsFile, WrongExtentNamesBufferDimensionAndBothValues) {
  std::vector<uint8_t> bytes = cm::serialize_weights(cm::make_weights(39));
  put_le32(bytes, buffer_offset(0, 39) + 4 + 4, 41); // head1_filter dimension 1
  std::string msg = error_of([&] { parse(bytes); });
  EXPECT_NE(msg.find("head1_filter dimension 1 extent: expected 40, found 41"), std::string::npos)
      << msg;

  bytes = cm::serialize_weights(cm::make_weights(39));
  put_le32(bytes, buffer_offset(2, 39) + 4 + 4, 0xffffffff); // a huge S must not be allocated
  msg = error_of([&] { parse(bytes); });
  EXPECT_NE(msg.find("head2_filter dimension 1 extent: expected 39 or 73, found 4294967295"),
            std::string::npos)
      << msg;
}

TEST(WeightsFile, ScheduleFeatureCountOtherThanExpectedIsAnError) {
  const std::vector<uint8_t> bytes = cm::serialize_weights(cm::make_weights(73));
  cm::WeightsLoadOptions cpu;
  cpu.expected_schedule_features = 39;
  cpu.allow_version_mismatch = true;
  const std::string msg = error_of([&] { parse(bytes, cpu); });
  EXPECT_NE(msg.find("head2_filter dimension 1 extent: expected 39, found 73"), std::string::npos)
      << msg;
}

TEST(WeightsFile, TruncatedDataIsAnErrorNamingTheBuffer) {
  std::vector<uint8_t> bytes = cm::serialize_weights(cm::make_weights(39));
  bytes.resize(buffer_offset(5, 39) + 4 + 4 + 10);
  const std::string msg = error_of([&] { parse(bytes); });
  EXPECT_NE(msg.find("truncated: conv1_bias data"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { parse({}); }).find("truncated: signature"), std::string::npos);
}

TEST(WeightsFile, TrailingByteIsAnError) {
  std::vector<uint8_t> bytes = cm::serialize_weights(cm::make_weights(39));
  bytes.push_back(0);
  const std::string msg = error_of([&] { parse(bytes); });
  EXPECT_NE(msg.find("1 trailing bytes after the last weight: expected file size 17136, found "
                     "17137"),
            std::string::npos)
      << msg;
}

TEST(WeightsFile, NanWeightIsAnErrorNamingBufferAndIndex) {
  cm::Weights w = cm::make_weights(39);
  std::vector<uint8_t> bytes = cm::serialize_weights(w);
  // head2_filter element (5, 2) = linear 2 * 24 + 5.
  put_le32(bytes, buffer_offset(2, 39) + 12 + 4 * (2 * 24 + 5), 0x7fc00000);
  const std::string msg = error_of([&] { parse(bytes); });
  EXPECT_NE(msg.find("head2_filter value at index (5, 2) (element 53) is not finite"),
            std::string::npos)
      << msg;
  // The writer refuses too.
  w.conv1_bias(3) = std::numeric_limits<float>::infinity();
  EXPECT_NE(error_of([&] { cm::serialize_weights(w); }).find("conv1_bias value at index (3)"),
            std::string::npos);
}

TEST(WeightsFile, LoadErrorNamesThePath) {
  ScratchDir dir;
  write_bytes(dir.file("bad.weights"), {1, 2, 3});
  EXPECT_EQ(error_of([&] {
              cm::load_weights_file(dir.file("bad.weights"));
            }).rfind(dir.file("bad.weights") + ": truncated", 0),
            0u);
  EXPECT_NE(error_of([&] { cm::load_weights(dir.file("missing.weights")); }).find("cannot open"),
            std::string::npos);
}

TEST(WeightsFile, RandomInitIsDeterministicFiniteAndScaledByFanIn) {
  const cm::Weights a = cm::random_weights(73, 7), b = cm::random_weights(73, 7);
  expect_bitwise_equal(a, b);
  EXPECT_NE(cm::serialize_weights(a), cm::serialize_weights(cm::random_weights(73, 8)));
  double sum_sq = 0;
  hkfac::for_each_value(a.head1_filter, [&](float v) { sum_sq += double(v) * v; });
  const double variance = sum_sq / a.head1_filter.number_of_elements();
  EXPECT_NEAR(variance * 280, 1.0, 0.1); // fan-in 40 x 7
  EXPECT_NO_THROW(cm::validate_weights(a));
}

TEST(WeightsDir, WriteThenReadIsBitwiseEqual) {
  for (int s : {39, 73}) {
    ScratchDir dir;
    const cm::Weights w = cm::random_weights(s, 11);
    cm::save_weights_dir(w, dir.file("old"));
    EXPECT_EQ(read_bytes(dir.file("old/head1_conv1_bias.data")).size(), 8u * 4);
    // HL_WEIGHTS_DIR semantics: load_weights takes the directory too.
    expect_bitwise_equal(cm::load_weights(dir.file("old")), w);
  }
}

TEST(WeightsDir, WrongSizeFileIsNamedInTheError) {
  ScratchDir dir;
  cm::save_weights_dir(cm::make_weights(39), dir.path());
  write_bytes(dir.file("trunk_conv1_bias.data"), std::vector<uint8_t>(31 * 4));
  std::string msg = error_of([&] { cm::load_weights_dir(dir.path()); });
  EXPECT_NE(msg.find("trunk_conv1_bias.data (conv1_bias): size: expected 128 bytes"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("found 124"), std::string::npos) << msg;
  write_bytes(dir.file("head2_conv1_weight.data"), std::vector<uint8_t>(100));
  msg = error_of([&] { cm::load_weights_dir(dir.path()); });
  EXPECT_NE(msg.find("head2_conv1_weight.data (head2_filter): size: expected 3744 or 7008 bytes"),
            std::string::npos)
      << msg;
}

TEST(WeightsDir, FailedSaveLeavesTheOldSetWhole) {
  ScratchDir dir;
  const cm::Weights old_weights = cm::random_weights(39, 1);
  cm::save_weights_dir(old_weights, dir.path());
  // The fifth file cannot be replaced: a directory stands in its place.
  std::filesystem::remove(dir.file("trunk_conv1_weight.data"));
  std::filesystem::create_directory(dir.file("trunk_conv1_weight.data"));
  std::vector<std::vector<uint8_t>> before;
  for (const char *name : cm::kWeightsDirFileNames) {
    if (std::string(name) != "trunk_conv1_weight.data")
      before.push_back(read_bytes(dir.file(name)));
  }
  const std::string msg =
      error_of([&] { cm::save_weights_dir(cm::random_weights(39, 2), dir.path()); });
  EXPECT_NE(msg.find("trunk_conv1_weight.data: is a directory"), std::string::npos) << msg;
  size_t i = 0;
  for (const char *name : cm::kWeightsDirFileNames) {
    if (std::string(name) != "trunk_conv1_weight.data") {
      EXPECT_EQ(read_bytes(dir.file(name)), before[i++]) << name << " was replaced";
    }
  }
  // No temporary file is left behind: the five files and the directory.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 6);
}

TEST(WeightsDir, PathThatIsAFileIsAnError) {
  ScratchDir dir;
  write_bytes(dir.file("file"), {1});
  const std::string msg =
      error_of([&] { cm::save_weights_dir(cm::make_weights(39), dir.file("file")); });
  EXPECT_NE(msg.find("exists and is not a directory"), std::string::npos) << msg;
}

TEST(AtomicWrite, SymlinkedTargetIsWrittenAndTheLinkKept) {
  ScratchDir dir;
  std::filesystem::create_directory(dir.file("real"));
  write_bytes(dir.file("real/w.weights"), {1, 2, 3});
  std::filesystem::create_symlink("real/w.weights", dir.file("link.weights"));
  const cm::Weights w = cm::random_weights(39, 5);
  cm::save_weights_file(w, dir.file("link.weights"));
  EXPECT_TRUE(std::filesystem::is_symlink(dir.file("link.weights")));
  expect_bitwise_equal(cm::load_weights_file(dir.file("real/w.weights")), w);
  // A dangling link gets its target created.
  std::filesystem::create_symlink("real/new.weights", dir.file("dangling.weights"));
  cm::save_weights_file(w, dir.file("dangling.weights"));
  EXPECT_TRUE(std::filesystem::is_symlink(dir.file("dangling.weights")));
  expect_bitwise_equal(cm::load_weights_file(dir.file("real/new.weights")), w);
}

TEST(AtomicWrite, NonRegularTargetsAreRefusedAndKept) {
  ScratchDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0644), 0);
  std::filesystem::create_directory(dir.file("dir"));
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock_path = dir.file("sock");
  ASSERT_LT(sock_path.size(), sizeof addr.sun_path);
  std::strcpy(addr.sun_path, sock_path.c_str());
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr *>(&addr), sizeof addr), 0);
  const cm::Weights w = cm::make_weights(39);
  for (const auto &[name, kind] : {std::pair{"fifo", "a FIFO"}, std::pair{"dir", "a directory"},
                                   std::pair{"sock", "a socket"}}) {
    const std::string msg = error_of([&] { cm::save_weights_file(w, dir.file(name)); });
    EXPECT_NE(msg.find(std::string("is ") + kind + ", not a regular file"), std::string::npos)
        << msg;
  }
  ::close(sock);
  EXPECT_EQ(std::filesystem::status(dir.file("fifo")).type(), std::filesystem::file_type::fifo);
  EXPECT_TRUE(std::filesystem::is_directory(dir.file("dir")));
  EXPECT_EQ(std::filesystem::status(dir.file("sock")).type(), std::filesystem::file_type::socket);
}

TEST(AtomicWrite, ReadOnlyFileIsRefusedAndKept) {
  ScratchDir dir;
  write_bytes(dir.file("ro.weights"), {1, 2, 3});
  ASSERT_EQ(::chmod(dir.file("ro.weights").c_str(), 0444), 0);
  // Refused even for root, whom access() would let write: the mode bits decide.
  const std::string msg =
      error_of([&] { cm::save_weights_file(cm::make_weights(39), dir.file("ro.weights")); });
  EXPECT_NE(msg.find("cannot write"), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(dir.file("ro.weights")), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

TEST(AtomicWrite, ReplacementKeepsTheFilesPermissions) {
  ScratchDir dir;
  write_bytes(dir.file("w.weights"), {1});
  ASSERT_EQ(::chmod(dir.file("w.weights").c_str(), 0600), 0);
  cm::save_weights_file(cm::make_weights(39), dir.file("w.weights"));
  struct stat st;
  ASSERT_EQ(::stat(dir.file("w.weights").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(AtomicWrite, MissingDirectoryIsNamedBeforeAnythingIsWritten) {
  ScratchDir dir;
  const std::string msg = error_of([&] { hkfac::detail::check_replaceable(dir.file("no/w")); });
  EXPECT_NE(msg.find("cannot create a file there: No such file or directory"), std::string::npos)
      << msg;
}

// A FIFO opened for reading waits for a writer; the loader must refuse it without opening it.
// Run in a child that an alarm kills, so a regression fails instead of hanging the suite.
TEST(WeightsFile, FifoIsRefusedWithoutBlocking) {
  ScratchDir dir;
  const std::string fifo = dir.file("w.weights");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_EXIT(
      {
        ::alarm(10);
        const std::string msg = error_of([&] { cm::load_weights(fifo); });
        std::exit(msg.find("is a FIFO, not a regular file") != std::string::npos ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

} // namespace

// The weights shipped in weights/: each is a valid S = 39 file (so the plugin can load it) and
// weights/README.md records how it was trained.
TEST(ShippedWeights, EveryFileLoadsAndIsRecorded) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(HKFAC_SOURCE_DIR) / "weights";
  std::ifstream readme(dir / "README.md");
  ASSERT_TRUE(readme) << "weights/README.md missing";
  const std::string text((std::istreambuf_iterator<char>(readme)), {});
  int files = 0;
  for (const fs::directory_entry &e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".weights")
      continue;
    ++files;
    cm::WeightsLoadOptions o;
    o.expected_schedule_features = cm::kCpuScheduleFeatures;
    EXPECT_NO_THROW(cm::load_weights_file(e.path().string(), o)) << e.path();
    EXPECT_NE(text.find("`" + e.path().filename().string() + "`"), std::string::npos)
        << e.path().filename() << " has no record in weights/README.md";
  }
  if (files == 0)
    GTEST_SKIP() << "no .weights files shipped";
}
