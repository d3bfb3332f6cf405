// Loss-curve output: a CSV table and a PNG line plot (no plotting library needed).
#pragma once

#include <string>
#include <vector>

namespace autoencoder {

struct LossPoint {
  int step;
  double seconds;
  double loss;
};

// Writes "step,seconds,loss" rows. Throws hkfac::Error naming the path on failure.
void write_csv(const std::string &path, const std::vector<LossPoint> &points);

// Plots loss (log scale) against step as a 640x400 PNG. Throws hkfac::Error on failure.
void write_png(const std::string &path, const std::vector<LossPoint> &points,
               const std::string &title);

} // namespace autoencoder
