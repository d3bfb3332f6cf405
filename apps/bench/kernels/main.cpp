// kernel_bench: runs every registered kernel case; --quick is the demo's short tour.
#include <cblas.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>

#include "cli.h"
#include "harness.h"
#include "hkfac/allocator.h"
#include "hkfac/device.h"

// OpenBLAS's worker threads busy-wait ~2^28 cycles after each call and libgomp's (Eigen) spin
// too, stealing a core from whichever contender runs next in an interleaved round. Both libraries
// read these settings when they load, so the benchmark re-executes itself with them set.
void quiet_thread_pools(char **argv) {
  if (std::getenv("HKFAC_BENCH_QUIET_POOLS"))
    return;
  setenv("HKFAC_BENCH_QUIET_POOLS", "1", 1);
  setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  execv("/proc/self/exe", argv);
  // Not fatal: the run continues with the libraries' defaults.
  std::perror("kernel_bench: re-exec with quiet thread pools failed");
}

constexpr const char *kUsage = "usage: kernel_bench [--device=cpu|cuda|auto] [--quick] "
                               "[--rounds=N (>= 1, default 15)] [--only=GROUP] [--markdown=FILE]";

// A command-line mistake: the message, the usage line, exit status 2.
int usage_error(const std::string &message) {
  std::fprintf(stderr, "kernel_bench: %s\n%s\n", message.c_str(), kUsage);
  return 2;
}

int main(int argc, char **argv) {
  quiet_thread_pools(argv);
  // As the apps do: the kernels' temporaries (the covariance update's packed X̄, 4 MB at d = 1001,
  // n = 1000) would otherwise be mapped afresh and faulted in by the first call after another
  // contender's allocations trimmed the heap. That cost landed on whichever contender followed
  // Eigen, so the ratios depended on the contenders' order (see docs/RESULTS.md#kernels).
  hkfac::retain_freed_memory();
  hkfac::bench::Options opt;
  try {
    for (int i = 1; i < argc; i++) {
      std::string a = argv[i];
      if (a == "--help" || a == "-h") {
        std::printf("kernel_bench: times every generated kernel against OpenBLAS and Eigen "
                    "(cuBLAS on the GPU), interleaved; --quick runs each kernel alone, briefly.\n"
                    "%s\n",
                    kUsage);
        return 0;
      } else if (a == "--quick") {
        opt.quick = true;
      } else if (a.rfind("--device=", 0) == 0) {
        opt.device = hkfac::parse_device(a.substr(9), "--device");
      } else if (a.rfind("--rounds=", 0) == 0) {
        const std::optional<int> rounds = hkfac::apps::parse_int(a.substr(9));
        if (!rounds || *rounds < 1)
          return usage_error("bad argument '" + a + "': --rounds takes an integer >= 1");
        opt.rounds = *rounds;
      } else if (a.rfind("--only=", 0) == 0) {
        opt.only = a.substr(7);
      } else if (a.rfind("--markdown=", 0) == 0) {
        opt.markdown = a.substr(11);
        try {
          hkfac::apps::require_writable_output("--markdown", opt.markdown);
        } catch (const std::exception &e) {
          return usage_error(e.what());
        }
      } else {
        return usage_error("unknown argument '" + a + "'");
      }
    }
    const auto &cuda = hkfac::cuda_status();
    std::printf("device: %s (CUDA %s); OpenBLAS kernel: %s\n", hkfac::device_name(opt.device),
                cuda.usable ? cuda.device_name.c_str() : cuda.reason.c_str(),
                openblas_get_corename());
    return hkfac::bench::run_all(opt);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kernel_bench: %s\n", e.what());
    return 1;
  }
}
