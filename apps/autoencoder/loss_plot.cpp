// CSV and PNG writers for the loss curve; the PNG is encoded with zlib directly.
#include "loss_plot.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>

#include "hkfac/error.h"

namespace autoencoder {
namespace {

constexpr int kWidth = 640, kHeight = 400, kMargin = 40;

struct Canvas {
  std::vector<uint8_t> rgb = std::vector<uint8_t>(kWidth * kHeight * 3, 255);
  void set(int x, int y, uint8_t r, uint8_t g, uint8_t b) {
    if (x < 0 || y < 0 || x >= kWidth || y >= kHeight)
      return;
    uint8_t *p = &rgb[(static_cast<size_t>(y) * kWidth + x) * 3];
    p[0] = r, p[1] = g, p[2] = b;
  }
  // Bresenham line, two pixels thick so it survives downscaling in viewers.
  void line(int x0, int y0, int x1, int y1, uint8_t r, uint8_t g, uint8_t b) {
    const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
    const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    while (true) {
      set(x0, y0, r, g, b);
      set(x0, y0 + 1, r, g, b);
      if (x0 == x1 && y0 == y1)
        break;
      const int e2 = 2 * err;
      if (e2 >= dy)
        err += dy, x0 += sx;
      if (e2 <= dx)
        err += dx, y0 += sy;
    }
  }
};

void put_u32(std::vector<uint8_t> &out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8)
    out.push_back(static_cast<uint8_t>(v >> s));
}

void chunk(std::vector<uint8_t> &png, const char *type, const std::vector<uint8_t> &data) {
  put_u32(png, static_cast<uint32_t>(data.size()));
  const size_t start = png.size();
  png.insert(png.end(), type, type + 4);
  png.insert(png.end(), data.begin(), data.end());
  put_u32(png, static_cast<uint32_t>(crc32(0, png.data() + start, png.size() - start)));
}

} // namespace

void write_csv(const std::string &path, const std::vector<LossPoint> &points) {
  std::ofstream out(path);
  if (!out)
    throw hkfac::Error("write_csv: cannot write '" + path + "'");
  out << "step,seconds,loss\n";
  for (const LossPoint &p : points)
    out << p.step << "," << p.seconds << "," << p.loss << "\n";
}

void write_png(const std::string &path, const std::vector<LossPoint> &points,
               const std::string &title) {
  (void)title; // no font rendering; the title goes in a tEXt chunk
  Canvas c;
  const int x0 = kMargin, x1 = kWidth - kMargin / 2, y0 = kHeight - kMargin, y1 = kMargin / 2;
  c.line(x0, y0, x1, y0, 0, 0, 0);
  c.line(x0, y0, x0, y1, 0, 0, 0);
  std::vector<LossPoint> finite;
  for (const LossPoint &p : points) {
    if (std::isfinite(p.loss) && p.loss > 0)
      finite.push_back(p);
  }
  if (finite.size() >= 2) {
    double lo = finite[0].loss, hi = lo;
    for (const LossPoint &p : finite)
      lo = std::min(lo, p.loss), hi = std::max(hi, p.loss);
    const double llo = std::log10(lo), lhi = std::max(std::log10(hi), llo + 1e-6);
    const double s0 = finite.front().step, s1 = std::max<double>(finite.back().step, s0 + 1);
    // Grid lines at every power of ten inside the range.
    for (int e = static_cast<int>(std::ceil(llo)); e <= static_cast<int>(std::floor(lhi)); ++e) {
      const int y = y0 - static_cast<int>((e - llo) / (lhi - llo) * (y0 - y1));
      for (int x = x0; x < x1; x += 4)
        c.set(x, y, 180, 180, 180);
    }
    auto px = [&](const LossPoint &p) {
      return std::make_pair(
          x0 + static_cast<int>((p.step - s0) / (s1 - s0) * (x1 - x0)),
          y0 - static_cast<int>((std::log10(p.loss) - llo) / (lhi - llo) * (y0 - y1)));
    };
    for (size_t i = 1; i < finite.size(); ++i) {
      const auto [ax, ay] = px(finite[i - 1]);
      const auto [bx, by] = px(finite[i]);
      c.line(ax, ay, bx, by, 31, 119, 180);
    }
  }
  std::vector<uint8_t> raw;
  raw.reserve((kWidth * 3 + 1) * kHeight);
  for (int y = 0; y < kHeight; ++y) {
    raw.push_back(0); // filter: none
    raw.insert(raw.end(), c.rgb.begin() + y * kWidth * 3, c.rgb.begin() + (y + 1) * kWidth * 3);
  }
  uLongf size = compressBound(raw.size());
  std::vector<uint8_t> z(size);
  if (compress2(z.data(), &size, raw.data(), raw.size(), 6) != Z_OK) {
    throw hkfac::Error("write_png: compression failed");
  }
  z.resize(size);
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  put_u32(ihdr, kWidth);
  put_u32(ihdr, kHeight);
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0}); // 8-bit RGB
  chunk(png, "IHDR", ihdr);
  std::vector<uint8_t> text(title.begin(), title.end());
  const std::string key = "Title";
  text.insert(text.begin(), 0);
  text.insert(text.begin(), key.begin(), key.end());
  chunk(png, "tEXt", text);
  chunk(png, "IDAT", z);
  chunk(png, "IEND", {});
  std::ofstream out(path, std::ios::binary);
  if (!out)
    throw hkfac::Error("write_png: cannot write '" + path + "'");
  out.write(reinterpret_cast<const char *>(png.data()), static_cast<std::streamsize>(png.size()));
}

} // namespace autoencoder
