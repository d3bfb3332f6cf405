// kernel_bench: runs every registered kernel case; --quick is the demo's short tour.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "harness.h"
#include "hkfac/device.h"

int main(int argc, char **argv) {
  hkfac::bench::Options opt;
  try {
    for (int i = 1; i < argc; i++) {
      std::string a = argv[i];
      if (a == "--quick") {
        opt.quick = true;
      } else if (a.rfind("--device=", 0) == 0) {
        opt.device = hkfac::parse_device(a.substr(9), "--device");
      } else if (a.rfind("--rounds=", 0) == 0) {
        opt.rounds = std::stoi(a.substr(9));
      } else if (a.rfind("--only=", 0) == 0) {
        opt.only = a.substr(7);
      } else if (a.rfind("--markdown=", 0) == 0) {
        opt.markdown = a.substr(11);
      } else {
        std::fprintf(stderr,
                     "kernel_bench: unknown argument '%s'\n"
                     "usage: kernel_bench [--device=cpu|cuda|auto] [--quick] [--rounds=N] [--only=GROUP] [--markdown=FILE]\n",
                     a.c_str());
        return 2;
      }
    }
    const auto &cuda = hkfac::cuda_status();
    std::printf("device: %s (CUDA %s)\n", hkfac::device_name(opt.device),
                cuda.usable ? cuda.device_name.c_str() : cuda.reason.c_str());
    return hkfac::bench::run_all(opt);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kernel_bench: %s\n", e.what());
    return 1;
  }
}
