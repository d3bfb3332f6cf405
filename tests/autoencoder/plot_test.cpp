// The autoencoder's loss plot: the PNG decodes to the rendered pixels, and the bitmap-font text
// lands where the layout puts it.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "loss_plot.h"

namespace {

using autoencoder::kPlotHeight;
using autoencoder::kPlotWidth;
using autoencoder::LossPoint;

std::vector<LossPoint> decaying_curve() {
  std::vector<LossPoint> points;
  for (int s = 0; s < 200; ++s)
    points.push_back({s, 0.01 * s, 2.0 * std::exp(-0.03 * s) + 1e-3});
  return points;
}

uint32_t get_u32(const std::vector<uint8_t> &b, size_t at) {
  return uint32_t{b[at]} << 24 | uint32_t{b[at + 1]} << 16 | uint32_t{b[at + 2]} << 8 | b[at + 3];
}

bool dark(const std::vector<uint8_t> &rgb, int x, int y) {
  const uint8_t *p = &rgb[(static_cast<size_t>(y) * kPlotWidth + x) * 3];
  return p[0] < 128 && p[1] < 128 && p[2] < 128;
}

// Dark pixels in rows [ya, yb) and columns [xa, xb), with their bounding box.
struct Ink {
  int count = 0, left = kPlotWidth, right = -1, top = kPlotHeight, bottom = -1;
};
Ink ink(const std::vector<uint8_t> &rgb, int xa, int xb, int ya, int yb) {
  Ink r;
  for (int y = ya; y < yb; ++y) {
    for (int x = xa; x < xb; ++x) {
      if (!dark(rgb, x, y))
        continue;
      ++r.count;
      r.left = std::min(r.left, x), r.right = std::max(r.right, x);
      r.top = std::min(r.top, y), r.bottom = std::max(r.bottom, y);
    }
  }
  return r;
}

TEST(AutoencoderPlot, PngDecodesToTheRenderedPixels) {
  const std::vector<LossPoint> points = decaying_curve();
  const std::string path = ::testing::TempDir() + "autoencoder_plot_test.png";
  autoencoder::write_png(path, points, "autoencoder random kfac");
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> png((std::istreambuf_iterator<char>(in)), {});
  std::remove(path.c_str());
  ASSERT_GT(png.size(), 33u);
  ASSERT_EQ(std::string(png.begin() + 12, png.begin() + 16), "IHDR");
  EXPECT_EQ(get_u32(png, 16), static_cast<uint32_t>(kPlotWidth));
  EXPECT_EQ(get_u32(png, 20), static_cast<uint32_t>(kPlotHeight));
  std::vector<uint8_t> z;
  for (size_t at = 8; at + 8 <= png.size();) {
    const uint32_t len = get_u32(png, at);
    if (std::string(png.begin() + at + 4, png.begin() + at + 8) == "IDAT")
      z.insert(z.end(), png.begin() + at + 8, png.begin() + at + 8 + len);
    at += 12 + len;
  }
  std::vector<uint8_t> raw((kPlotWidth * 3 + 1) * kPlotHeight);
  uLongf size = raw.size();
  ASSERT_EQ(uncompress(raw.data(), &size, z.data(), z.size()), Z_OK);
  ASSERT_EQ(size, raw.size());
  const std::vector<uint8_t> rgb = autoencoder::render_plot(points, "autoencoder random kfac");
  for (int y = 0; y < kPlotHeight; ++y) {
    ASSERT_EQ(raw[y * (kPlotWidth * 3 + 1)], 0) << "row " << y << " filter";
    ASSERT_TRUE(std::equal(rgb.begin() + y * kPlotWidth * 3, rgb.begin() + (y + 1) * kPlotWidth * 3,
                           raw.begin() + y * (kPlotWidth * 3 + 1) + 1))
        << "row " << y;
  }
}

TEST(AutoencoderPlot, TitleGlyphsAreDrawnCentredAtTwiceTheFontSize) {
  const std::vector<LossPoint> points = decaying_curve();
  // The title band lies above the plot area; nothing else is drawn there.
  const int band = 28;
  EXPECT_EQ(ink(autoencoder::render_plot(points, ""), 0, kPlotWidth, 0, band).count, 0);
  // '.' is a 2x2 block at the bottom of the 5x7 cell: a 4x4 square at 2x, centred on the canvas.
  const Ink dot = ink(autoencoder::render_plot(points, "."), 0, kPlotWidth, 0, band);
  EXPECT_EQ(dot.count, 16);
  EXPECT_EQ(dot.right - dot.left, 3);
  EXPECT_EQ(dot.bottom - dot.top, 3);
  EXPECT_NEAR((dot.left + dot.right) / 2.0, kPlotWidth / 2.0, 6);
  // A longer title is wider by 12 pixels (6 columns at 2x) per character.
  const Ink three = ink(autoencoder::render_plot(points, "..."), 0, kPlotWidth, 0, band);
  EXPECT_EQ(three.count, 48);
  EXPECT_EQ(three.right - three.left, 3 + 2 * 12);
}

TEST(AutoencoderPlot, AxesCarryTickLabelsAndTitles) {
  const std::vector<uint8_t> rgb = autoencoder::render_plot(decaying_curve(), "");
  // Left of the y axis: the rotated title and tick labels; below the x axis: labels and "step".
  const Ink left = ink(rgb, 0, 40, 40, kPlotHeight - 60);
  EXPECT_GT(left.count, 100);
  EXPECT_GT(left.bottom - left.top, 150) << "rotated y title runs along the axis";
  const Ink bottom = ink(rgb, 100, kPlotWidth, kPlotHeight - 40, kPlotHeight);
  EXPECT_GT(bottom.count, 50);
  EXPECT_GT(bottom.right - bottom.left, 250) << "x tick labels spread along the axis";
}

TEST(AutoencoderPlot, TooFewPointsStillDrawsAxesAndANote) {
  const std::vector<uint8_t> rgb = autoencoder::render_plot({{0, 0.0, NAN}}, "t");
  EXPECT_GT(ink(rgb, 100, kPlotWidth - 100, 100, kPlotHeight - 100).count, 100);
}

} // namespace
