// Interleaved timing: every contender is timed once per round, in turn, so drift hits all alike.
#include "harness.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "cli.h"
#include "hkfac/error.h"

namespace hkfac::bench {
namespace {

std::vector<std::function<std::vector<Case>(bool)>> &registry() {
  static std::vector<std::function<std::vector<Case>(bool)>> r;
  return r;
}

hkfac::Device g_device = hkfac::Device::cpu;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Seconds per call, timing `iters` calls back to back.
double time_calls(const Contender &c, int iters) {
  double t0 = now_s();
  for (int i = 0; i < iters; i++)
    c.run();
  if (c.sync) {
    c.sync();
  } else {
    hkfac::synchronize(g_device);
  }
  return (now_s() - t0) / iters;
}

} // namespace

Register::Register(std::function<std::vector<Case>(bool)> cases) {
  registry().push_back(std::move(cases));
}

hkfac::Device device() { return g_device; }

int run_all(const Options &opt) {
  g_device = opt.device;
  std::ostringstream md;
  std::vector<Case> cases;
  for (auto &f : registry()) {
    for (Case &c : f(opt.quick)) {
      if (opt.only.empty() || c.group.find(opt.only) != std::string::npos)
        cases.push_back(c);
    }
  }
  std::sort(cases.begin(), cases.end(),
            [](const Case &a, const Case &b) { return a.group < b.group; });
  if (opt.rounds < 1)
    throw hkfac::Error("run_all: rounds must be >= 1, got " + std::to_string(opt.rounds));
  if (cases.empty()) {
    std::fprintf(stderr, "kernel_bench: no kernel case matches --only=%s in this build\n",
                 opt.only.c_str());
    return 2;
  }
  md << "| kernel | shape | contender | median ms | GFLOP/s | ratio vs "
     << (opt.quick ? "-" : "anchor (median of per-round ratios)") << " |\n"
     << "|---|---|---|---|---|---|\n";
  for (const Case &c : cases) {
    std::vector<Contender> cs = c.make();
    if (opt.quick && cs.size() > 1)
      cs.resize(1);
    if (g_device == hkfac::Device::cuda) {
      // On the GPU only the generated kernel and a device anchor (cuBLAS) are comparable.
      std::vector<Contender> gpu;
      for (Contender &x : cs) {
        if (x.name == "halide" || x.name == "cublas")
          gpu.push_back(x);
      }
      cs = gpu;
    }
    if (cs.empty())
      continue;
    // Warm up, then choose iterations per round so each contender runs >= min_round_s.
    std::vector<int> iters(cs.size(), 1);
    for (size_t i = 0; i < cs.size(); i++) {
      double t = time_calls(cs[i], 1);
      t = std::max(time_calls(cs[i], 1), 1e-7);
      iters[i] = std::max(1, static_cast<int>(opt.min_round_s / t));
    }
    const int rounds = opt.quick ? 3 : opt.rounds;
    std::vector<std::vector<double>> times(cs.size());
    std::vector<std::vector<double>> ratios(cs.size());
    for (int r = 0; r < rounds; r++) {
      std::vector<double> t(cs.size());
      for (size_t i = 0; i < cs.size(); i++) {
        t[i] = time_calls(cs[i], iters[i]);
        times[i].push_back(t[i]);
      }
      // Ratio > 1 means the contender is faster than the anchor (index 1).
      for (size_t i = 0; i < cs.size(); i++) {
        if (cs.size() > 1)
          ratios[i].push_back(t[1] / t[i]);
      }
    }
    for (size_t i = 0; i < cs.size(); i++) {
      double ms = median(times[i]) * 1e3;
      double gf = c.flops > 0 ? c.flops / (median(times[i]) * 1e9) : 0;
      char line[512];
      std::snprintf(line, sizeof(line), "| %s | %s | %s | %.4f | %.1f | %s |", c.group.c_str(),
                    c.shape.c_str(), cs[i].name.c_str(), ms, gf,
                    cs.size() > 1 ? std::to_string(median(ratios[i])).substr(0, 5).c_str() : "-");
      std::printf("%s\n", line);
      std::fflush(stdout);
      md << line << "\n";
    }
  }
  if (!opt.markdown.empty()) {
    hkfac::apps::write_file_checked(opt.markdown, md.str());
    std::printf("wrote %s\n", opt.markdown.c_str());
  }
  return 0;
}

} // namespace hkfac::bench
