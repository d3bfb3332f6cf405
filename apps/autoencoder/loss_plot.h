// Loss-curve output: a CSV table and a PNG line plot (no plotting library needed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace autoencoder {

struct LossPoint {
  int step;
  double seconds;
  double loss;
};

// Writes "step,seconds,loss" rows. Throws hkfac::Error naming the path and the reason when the
// file cannot be written in full.
void write_csv(const std::string &path, const std::vector<LossPoint> &points);

constexpr int kPlotWidth = 640, kPlotHeight = 400;

// Plots loss (log scale) against step as a kPlotWidth x kPlotHeight PNG with tick labels, axis
// titles and `title` drawn in a built-in 5x7 bitmap font. Throws hkfac::Error on failure, as
// write_csv.
void write_png(const std::string &path, const std::vector<LossPoint> &points,
               const std::string &title);

// The pixels write_png encodes: kPlotHeight rows of kPlotWidth RGB triples. Separate so tests can
// check the drawing without decoding the PNG.
std::vector<uint8_t> render_plot(const std::vector<LossPoint> &points, const std::string &title);

} // namespace autoencoder
