// CSV and PNG writers for the loss curve; the PNG is encoded with zlib directly.
#include "loss_plot.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "cli.h"
#include "hkfac/error.h"

namespace autoencoder {
namespace {

constexpr int kWidth = kPlotWidth, kHeight = kPlotHeight;
// Text is drawn at 2x: a 5x7 glyph becomes 10x14 pixels, legible without anti-aliasing.
constexpr int kScale = 2, kAdvance = 6 * kScale, kTextHeight = 7 * kScale;

struct Glyph {
  char c;
  uint8_t rows[7]; // top to bottom; bit 4 is the leftmost pixel
};

// Only what the labels need: digits and number punctuation, lower-case letters (upper case is
// folded onto them) and a little punctuation for titles such as "fashion_mnist".
constexpr Glyph kFont[] = {
    {' ', {0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000}},
    {'0', {0b01110, 0b10001, 0b10011, 0b10101, 0b11001, 0b10001, 0b01110}},
    {'1', {0b00100, 0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110}},
    {'2', {0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b01000, 0b11111}},
    {'3', {0b11111, 0b00010, 0b00100, 0b00010, 0b00001, 0b10001, 0b01110}},
    {'4', {0b00010, 0b00110, 0b01010, 0b10010, 0b11111, 0b00010, 0b00010}},
    {'5', {0b11111, 0b10000, 0b11110, 0b00001, 0b00001, 0b10001, 0b01110}},
    {'6', {0b00110, 0b01000, 0b10000, 0b11110, 0b10001, 0b10001, 0b01110}},
    {'7', {0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b01000, 0b01000}},
    {'8', {0b01110, 0b10001, 0b10001, 0b01110, 0b10001, 0b10001, 0b01110}},
    {'9', {0b01110, 0b10001, 0b10001, 0b01111, 0b00001, 0b00010, 0b01100}},
    {'.', {0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b01100, 0b01100}},
    {'-', {0b00000, 0b00000, 0b00000, 0b11111, 0b00000, 0b00000, 0b00000}},
    {'+', {0b00000, 0b00100, 0b00100, 0b11111, 0b00100, 0b00100, 0b00000}},
    {'_', {0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b11111}},
    {'(', {0b00010, 0b00100, 0b01000, 0b01000, 0b01000, 0b00100, 0b00010}},
    {')', {0b01000, 0b00100, 0b00010, 0b00010, 0b00010, 0b00100, 0b01000}},
    {':', {0b00000, 0b01100, 0b01100, 0b00000, 0b01100, 0b01100, 0b00000}},
    {',', {0b00000, 0b00000, 0b00000, 0b00000, 0b01100, 0b00100, 0b01000}},
    {'/', {0b00000, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0b00000}},
    {'=', {0b00000, 0b00000, 0b11111, 0b00000, 0b11111, 0b00000, 0b00000}},
    {'%', {0b11000, 0b11001, 0b00010, 0b00100, 0b01000, 0b10011, 0b00011}},
    {'?', {0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b00000, 0b00100}},
    {'a', {0b00000, 0b00000, 0b01110, 0b00001, 0b01111, 0b10001, 0b01111}},
    {'b', {0b10000, 0b10000, 0b10110, 0b11001, 0b10001, 0b10001, 0b11110}},
    {'c', {0b00000, 0b00000, 0b01110, 0b10000, 0b10000, 0b10001, 0b01110}},
    {'d', {0b00001, 0b00001, 0b01101, 0b10011, 0b10001, 0b10001, 0b01111}},
    {'e', {0b00000, 0b00000, 0b01110, 0b10001, 0b11111, 0b10000, 0b01110}},
    {'f', {0b00110, 0b01001, 0b01000, 0b11100, 0b01000, 0b01000, 0b01000}},
    {'g', {0b00000, 0b01111, 0b10001, 0b10001, 0b01111, 0b00001, 0b01110}},
    {'h', {0b10000, 0b10000, 0b10110, 0b11001, 0b10001, 0b10001, 0b10001}},
    {'i', {0b00100, 0b00000, 0b01100, 0b00100, 0b00100, 0b00100, 0b01110}},
    {'j', {0b00010, 0b00000, 0b00110, 0b00010, 0b00010, 0b10010, 0b01100}},
    {'k', {0b10000, 0b10000, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010}},
    {'l', {0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110}},
    {'m', {0b00000, 0b00000, 0b11010, 0b10101, 0b10101, 0b10001, 0b10001}},
    {'n', {0b00000, 0b00000, 0b10110, 0b11001, 0b10001, 0b10001, 0b10001}},
    {'o', {0b00000, 0b00000, 0b01110, 0b10001, 0b10001, 0b10001, 0b01110}},
    {'p', {0b00000, 0b00000, 0b11110, 0b10001, 0b11110, 0b10000, 0b10000}},
    {'q', {0b00000, 0b00000, 0b01101, 0b10011, 0b01111, 0b00001, 0b00001}},
    {'r', {0b00000, 0b00000, 0b10110, 0b11001, 0b10000, 0b10000, 0b10000}},
    {'s', {0b00000, 0b00000, 0b01110, 0b10000, 0b01110, 0b00001, 0b11110}},
    {'t', {0b01000, 0b01000, 0b11100, 0b01000, 0b01000, 0b01001, 0b00110}},
    {'u', {0b00000, 0b00000, 0b10001, 0b10001, 0b10001, 0b10011, 0b01101}},
    {'v', {0b00000, 0b00000, 0b10001, 0b10001, 0b10001, 0b01010, 0b00100}},
    {'w', {0b00000, 0b00000, 0b10001, 0b10001, 0b10101, 0b10101, 0b01010}},
    {'x', {0b00000, 0b00000, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001}},
    {'y', {0b00000, 0b00000, 0b10001, 0b10001, 0b01111, 0b00001, 0b01110}},
    {'z', {0b00000, 0b00000, 0b11111, 0b00010, 0b00100, 0b01000, 0b11111}},
};

// Characters outside the font draw as '?' so a missing glyph is visible rather than silent.
const Glyph &glyph(char c) {
  if (c >= 'A' && c <= 'Z')
    c = static_cast<char>(c - 'A' + 'a');
  const Glyph *unknown = nullptr;
  for (const Glyph &g : kFont) {
    if (g.c == c)
      return g;
    if (g.c == '?')
      unknown = &g;
  }
  return *unknown;
}

int text_width(const std::string &s) {
  return s.empty() ? 0 : static_cast<int>(s.size()) * kAdvance - kScale;
}

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
  // Horizontal text with its top-left corner at (x, y); `vertical` rotates it a quarter turn
  // anticlockwise (reading upwards, as y-axis titles do) with (x, y) the bottom-left corner.
  void text(int x, int y, const std::string &s, bool vertical = false, uint8_t shade = 0) {
    for (size_t i = 0; i < s.size(); ++i) {
      const Glyph &g = glyph(s[i]);
      const int pen = static_cast<int>(i) * kAdvance;
      for (int gy = 0; gy < 7; ++gy) {
        for (int gx = 0; gx < 5; ++gx) {
          if (!(g.rows[gy] >> (4 - gx) & 1))
            continue;
          for (int sy = 0; sy < kScale; ++sy) {
            for (int sx = 0; sx < kScale; ++sx) {
              const int u = pen + gx * kScale + sx, v = gy * kScale + sy;
              if (vertical)
                set(x + v, y - u, shade, shade, shade);
              else
                set(x + u, y + v, shade, shade, shade);
            }
          }
        }
      }
    }
  }
};

// Shortest "%g" rendering that reads back as every tick in the set, with the exponent compacted
// ("1e-05" -> "1e-5") and whole numbers kept out of exponent form, so labels stay narrow.
std::vector<std::string> tick_labels(const std::vector<double> &ticks) {
  for (int prec = 1;; ++prec) {
    std::vector<std::string> labels;
    bool exact = true;
    for (const double v : ticks) {
      char buf[32];
      if (v == std::round(v) && std::abs(v) < 1e6)
        std::snprintf(buf, sizeof buf, "%.0f", v);
      else
        std::snprintf(buf, sizeof buf, "%.*g", prec, v);
      exact = exact && std::abs(std::strtod(buf, nullptr) - v) <= 1e-9 * std::abs(v);
      std::string s = buf;
      const size_t e = s.find('e');
      if (e != std::string::npos) {
        std::string mant = s.substr(0, e), sign = s[e + 1] == '-' ? "-" : "";
        std::string digits = s.substr(e + 2);
        digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
        s = mant + "e" + sign + digits;
      }
      labels.push_back(s);
    }
    if (exact || prec >= 12)
      return labels;
  }
}

// Distance of a tick count from the 4-6 that label an axis without crowding or leaving it bare.
int tick_penalty(size_t n) {
  return n < 4 ? 4 - static_cast<int>(n) : n > 6 ? static_cast<int>(n) - 6 : 0;
}

// Multiples of a 1-2-5 step inside [lo, hi]; the step is the one whose count suits an axis best.
std::vector<double> linear_ticks(double lo, double hi, bool whole) {
  std::vector<double> best;
  const int k0 = static_cast<int>(std::floor(std::log10(std::max(hi - lo, 1e-300))));
  for (int k = k0 - 2; k <= k0 + 1; ++k) {
    for (const double m : {1.0, 2.0, 5.0}) {
      const double step = m * std::pow(10.0, k);
      if (whole && step < 1)
        continue;
      std::vector<double> t;
      for (double i = std::ceil(lo / step - 1e-9); i <= std::floor(hi / step + 1e-9); ++i)
        t.push_back(i * step + 0.0); // + 0.0 turns -0 into 0, which would print as "-0"
      if (best.empty() || tick_penalty(t.size()) < tick_penalty(best.size()))
        best = t;
    }
  }
  return best;
}

// Log-axis ticks: powers of ten (every decade or every few) when the range spans several, then
// more mantissas per decade as it narrows, and plain 1-2-5 steps inside a factor of 3, taking the
// first kind with a count in 4-6 (or the closest) so wide ranges keep decade labels.
std::vector<double> log_ticks(double lo, double hi) {
  const double llo = std::log10(lo), lhi = std::log10(hi);
  const auto inside = [&](double v) { return v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9); };
  std::vector<std::vector<double>> candidates;
  for (const int stride : {1, 2, 3, 5, 10, 20, 50, 100}) {
    std::vector<double> t;
    for (int e = static_cast<int>(std::ceil(llo - 1e-9)); e <= lhi + 1e-9; ++e) {
      if (e % stride == 0)
        t.push_back(std::pow(10.0, e));
    }
    candidates.push_back(t);
  }
  if (lhi - llo < 10) {
    for (const std::vector<double> &mantissas :
         {std::vector<double>{1, 3}, {1, 2, 5}, {1, 2, 3, 5}, {1, 2, 3, 4, 5, 6, 8}}) {
      std::vector<double> t;
      for (int e = static_cast<int>(std::floor(llo)); e <= static_cast<int>(std::floor(lhi)); ++e) {
        for (const double m : mantissas) {
          if (inside(m * std::pow(10.0, e)))
            t.push_back(m * std::pow(10.0, e));
        }
      }
      candidates.push_back(t);
    }
  }
  // Even steps bunch up at the top of a log axis; within a factor of 3 the bunching is mild.
  if (hi < 3 * lo)
    candidates.push_back(linear_ticks(lo, hi, false));
  const std::vector<double> *best = &candidates.front();
  for (const std::vector<double> &t : candidates) {
    if (tick_penalty(t.size()) < tick_penalty(best->size()))
      best = &t;
  }
  return *best;
}

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
  std::ostringstream out;
  out << "step,seconds,loss\n";
  for (const LossPoint &p : points)
    out << p.step << "," << p.seconds << "," << p.loss << "\n";
  hkfac::apps::write_file_checked(path, out.str());
}

std::vector<uint8_t> render_plot(const std::vector<LossPoint> &points, const std::string &title) {
  Canvas c;
  std::vector<LossPoint> finite;
  for (const LossPoint &p : points) {
    if (std::isfinite(p.loss) && p.loss > 0)
      finite.push_back(p);
  }
  double llo = 0, lhi = 1, s0 = 0, s1 = 1;
  std::vector<double> yticks, xticks;
  if (finite.size() >= 2) {
    double lo = finite[0].loss, hi = lo;
    for (const LossPoint &p : finite)
      lo = std::min(lo, p.loss), hi = std::max(hi, p.loss);
    llo = std::log10(lo), lhi = std::max(std::log10(hi), llo + 1e-6);
    s0 = finite.front().step, s1 = std::max<double>(finite.back().step, s0 + 1);
    yticks = log_ticks(lo, std::pow(10.0, lhi));
    xticks = linear_ticks(s0, s1, true);
  }
  const std::vector<std::string> ylabels = tick_labels(yticks), xlabels = tick_labels(xticks);
  // Left margin: rotated y title, gap, the widest tick label, gap, tick mark.
  int label_w = 0;
  for (const std::string &l : ylabels)
    label_w = std::max(label_w, text_width(l));
  const int x0 = 6 + kTextHeight + 8 + label_w + 10, x1 = kWidth - 36;
  const int y1 = 12 + kTextHeight + 10, y0 = kHeight - (8 + 2 * kTextHeight + 16);
  const auto ypx = [&](double loss) {
    return y0 - static_cast<int>((std::log10(loss) - llo) / (lhi - llo) * (y0 - y1));
  };
  const auto xpx = [&](double step) {
    return x0 + static_cast<int>((step - s0) / (s1 - s0) * (x1 - x0));
  };

  c.text(std::max(4, (kWidth - text_width(title)) / 2), 8, title);
  const std::string ytitle = "loss (log scale)", xtitle = "step";
  c.text(6, (y0 + y1 + text_width(ytitle)) / 2, ytitle, true);
  c.text((x0 + x1 - text_width(xtitle)) / 2, y0 + 10 + kTextHeight + 6, xtitle);
  for (size_t i = 0; i < yticks.size(); ++i) {
    const int y = ypx(yticks[i]);
    for (int x = x0 + 4; x < x1; x += 4)
      c.set(x, y, 180, 180, 180);
    c.line(x0 - 5, y, x0, y, 0, 0, 0);
    c.text(x0 - 8 - text_width(ylabels[i]), y - kTextHeight / 2, ylabels[i], false, 40);
  }
  for (size_t i = 0; i < xticks.size(); ++i) {
    const int x = xpx(xticks[i]);
    for (int y = y0 - 4; y > y1; y -= 4)
      c.set(x, y, 180, 180, 180);
    c.line(x, y0, x, y0 + 5, 0, 0, 0);
    c.text(x - text_width(xlabels[i]) / 2, y0 + 10, xlabels[i], false, 40);
  }
  c.line(x0, y0, x1, y0, 0, 0, 0);
  c.line(x0, y0, x0, y1, 0, 0, 0);
  if (finite.size() < 2) {
    const std::string msg = "fewer than 2 finite losses";
    c.text((x0 + x1 - text_width(msg)) / 2, (y0 + y1 - kTextHeight) / 2, msg, false, 120);
  }
  for (size_t i = 1; i < finite.size(); ++i) {
    c.line(xpx(finite[i - 1].step), ypx(finite[i - 1].loss), xpx(finite[i].step),
           ypx(finite[i].loss), 31, 119, 180);
  }
  return c.rgb;
}

void write_png(const std::string &path, const std::vector<LossPoint> &points,
               const std::string &title) {
  const std::vector<uint8_t> rgb = render_plot(points, title);
  std::vector<uint8_t> raw;
  raw.reserve((kWidth * 3 + 1) * kHeight);
  for (int y = 0; y < kHeight; ++y) {
    raw.push_back(0); // filter: none
    raw.insert(raw.end(), rgb.begin() + y * kWidth * 3, rgb.begin() + (y + 1) * kWidth * 3);
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
  hkfac::apps::write_file_checked(path, std::string(png.begin(), png.end()));
}

} // namespace autoencoder
