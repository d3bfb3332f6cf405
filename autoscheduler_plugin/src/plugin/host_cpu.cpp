// What this CPU runs (see host_cpu.h).
#include "host_cpu.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace hkfac::sched {

using Halide::Target;

namespace {

// The features measured selection compares: instruction sets only. The others (asserts, bounds
// queries, large buffers, strict float, ...) change the code but not whether the CPU can run it.
const std::vector<Target::Feature> kIsaFeatures = {
    Target::SSE41,
    Target::AVX,
    Target::F16C,
    Target::FMA,
    Target::AVX2,
    Target::AVX512,
    Target::AVX512_KNL,
    Target::AVX512_Skylake,
    Target::AVX512_Cannonlake,
    Target::AVX512_SapphireRapids,
    Target::ARMv7s,
    Target::ARMv81a,
    Target::ARMDotProd,
    Target::ARMFp16,
    Target::VSX,
    Target::POWER_ARCH_2_07,
    Target::RVV,
    Target::FMA4,
    Target::SVE,
    Target::SVE2,
    Target::NoNEON,
};

// Features kept when a candidate is compiled in-process: they change the generated code's
// behaviour or speed, where JIT-only features do not apply (no runtime, C++ name mangling,
// user context are about linking the final library).
const std::vector<Target::Feature> kCodeFeatures = {
    Target::NoAsserts,
    Target::NoBoundsQuery,
    Target::LargeBuffers,
    Target::StrictFloat,
};

bool is_gpu(const Target &t) { return t.has_gpu_feature(); }

#if defined(__x86_64__) || defined(__i386__)
struct Cpuid {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Cpuid cpuid(unsigned leaf, unsigned sub) {
  Cpuid r;
  if (__get_cpuid_max(0, nullptr) < leaf)
    return r;
  __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
  return r;
}

// The x86 features as CPUID reports them, in Halide's grouping (calculate_host_target's), except
// that avx512_sapphirerapids also needs AVX512-FP16, which LLVM's sapphirerapids assumes.
std::vector<Target::Feature> x86_features(std::string *detail) {
  std::vector<Target::Feature> f;
  const Cpuid l1 = cpuid(1, 0);
  const bool sse41 = l1.c & (1u << 19), avx = l1.c & (1u << 28), f16c = l1.c & (1u << 29);
  const bool fma = l1.c & (1u << 12), rdrand = l1.c & (1u << 30);
  if (sse41)
    f.push_back(Target::SSE41);
  if (avx)
    f.push_back(Target::AVX);
  if (f16c)
    f.push_back(Target::F16C);
  if (fma)
    f.push_back(Target::FMA);
  if (!(avx && f16c && rdrand))
    return f;
  const Cpuid l7 = cpuid(7, 0), l71 = cpuid(7, 1);
  auto has = [](unsigned reg, unsigned bits) { return (reg & bits) == bits; };
  const unsigned avx512 = (1u << 16) | (1u << 28);                        // F, CD
  const unsigned skylake = avx512 | (1u << 17) | (1u << 30) | (1u << 31); // DQ, BW, VL
  const unsigned cannonlake = skylake | (1u << 21);                       // IFMA
  if (has(l7.b, 1u << 5))
    f.push_back(Target::AVX2);
  if (!has(l7.b, avx512))
    return f;
  f.push_back(Target::AVX512);
  if (has(l7.b, avx512 | (1u << 26) | (1u << 27)))
    f.push_back(Target::AVX512_KNL);
  if (has(l7.b, skylake))
    f.push_back(Target::AVX512_Skylake);
  if (!has(l7.b, cannonlake))
    return f;
  f.push_back(Target::AVX512_Cannonlake);
  const bool vnni = l7.c & (1u << 11), bf16 = l71.a & (1u << 5), fp16 = l7.d & (1u << 23);
  if (vnni && bf16 && fp16)
    f.push_back(Target::AVX512_SapphireRapids);
  else if (detail)
    *detail = std::string("no ") + (!vnni ? "AVX512-VNNI" : !bf16 ? "AVX512-BF16" : "AVX512-FP16");
  return f;
}
#endif

std::string feature_name(Target::Feature f) {
  // Target::to_string names a feature inside a target string; take it from a bare target.
  const std::string base = Target(Target::Linux, Target::X86, 64).to_string();
  const std::string with = Target(Target::Linux, Target::X86, 64).with_feature(f).to_string();
  return with.size() > base.size() + 1 ? with.substr(base.size() + 1) : with;
}

std::vector<Target::Feature> host_features(std::string *detail) {
#if defined(__x86_64__) || defined(__i386__)
  return x86_features(detail);
#else
  (void)detail;
  std::vector<Target::Feature> f;
  const Target host = Halide::get_host_target();
  for (Target::Feature x : kIsaFeatures)
    if (host.has_feature(x))
      f.push_back(x);
  return f;
#endif
}

} // namespace

std::vector<Target::Feature> host_isa_features() { return host_features(nullptr); }

HostRun host_run(const Target &target) {
  HostRun r;
  const Target host = Halide::get_host_target();
  if (target.os != host.os || target.arch != host.arch || target.bits != host.bits) {
    r.why_not = "a cross target (" + target.to_string() + " on a " + host.to_string() + " host)";
    return r;
  }
  if (is_gpu(target)) {
    r.why_not = "a GPU target (" + target.to_string() + ")";
    return r;
  }
  std::string detail;
  const std::vector<Target::Feature> have = host_features(&detail);
  Target jit(target.os, target.arch, target.bits);
  for (Target::Feature f : kIsaFeatures) {
    if (!target.has_feature(f))
      continue;
    if (std::find(have.begin(), have.end(), f) != have.end())
      jit = jit.with_feature(f);
    else
      r.missing.push_back(feature_name(f));
  }
  for (Target::Feature f : kCodeFeatures)
    if (target.has_feature(f))
      jit = jit.with_feature(f);
  if (!r.missing.empty())
    r.missing_detail = detail;
  r.jit = jit;
  r.runs = true;
  return r;
}

} // namespace hkfac::sched
