// Feature layouts and network sizes of the Hkfac cost model (plain C++, shared with the plugin).
//
// The network (generators/cost_model.cpp) reads, per stage, the 40 x 7 grid of algorithm
// features and S raw schedule features (S = 39 on CPU targets, 73 on GPU targets). The enums
// below fix the index of each schedule feature; the cost terms and the featurizer must agree on
// them, so both include this header. Counts are per realization of the whole pipeline unless a
// comment says otherwise; "task" is one iteration of the innermost parallel loop (CPU) or one
// GPU block; bytes and lines are those of the stage's own storage unless they say "read".
#pragma once

namespace hkfac::cost_model {

// Algorithm features: the last 280 of the 287 PipelineFeatures values, seen as a 40 x 7 grid
// (dimension 0: op kind / access-pattern row, dimension 1: scalar type).
constexpr int kPipelineFeatureRows = 40;
constexpr int kPipelineFeatureTypes = 7;
constexpr int kPipelineFeatureCount = kPipelineFeatureRows * kPipelineFeatureTypes;

// Layer widths: head1 embeds the algorithm features, head2 the schedule features, conv1 mixes
// their concatenation into one coefficient per cost term.
constexpr int kHead1Channels = 8;
constexpr int kHead2Channels = 24;
constexpr int kConv1Channels = kHead1Channels + kHead2Channels; // 32
constexpr int kNumCostTerms = kConv1Channels;                   // one coefficient per term

constexpr int kCpuScheduleFeatureCount = 39;
constexpr int kGpuScheduleFeatureCount = 73;

// Schedule features for CPU targets, in the spec's order (Adams2019's layout, our own numbers).
enum CpuFeature : int {
  kCpuNumRealizations = 0,                // allocations of this stage (times its storage is made)
  kCpuNumProductions = 1,                 // tiles computed (times its compute loop nest is entered)
  kCpuPointsPerRealization = 2,           // points computed per allocation
  kCpuPointsPerProduction = 3,            // points computed per tile
  kCpuPointsTotal = 4,                    // points computed in total, recompute included
  kCpuPointsMinimum = 5,                  // points the consumers need (no recompute)
  kCpuInnermostLoopExtent = 6,            // trip count of the innermost loop
  kCpuInnermostPureLoopExtent = 7,        // the same, counting pure (non-reduction) loops only
  kCpuUnrolledLoopExtent = 8,             // extent of the unrolled inner loops (1 = none)
  kCpuInnerParallelism = 9,               // parallel tasks inside one allocation
  kCpuOuterParallelism = 10,              // parallel instances of the enclosing loops outside it
  kCpuBytesAtRealization = 11,            // bytes allocated at the store site
  kCpuBytesAtProduction = 12,             // bytes written per tile
  kCpuBytesAtRoot = 13,                   // bytes it would take if computed at root
  kCpuInnermostBytesAtRealization = 14,   // feature 11 along the innermost storage dimension only
  kCpuInnermostBytesAtProduction = 15,    // feature 12 along the innermost storage dimension only
  kCpuInnermostBytesAtRoot = 16,          // feature 13 along the innermost storage dimension only
  kCpuInlinedCalls = 17,                  // inlined: copies of it computed, CSE-shared calls once
  kCpuUniqueBytesReadPerRealization = 18, // distinct bytes of its inputs read per allocation
  kCpuUniqueLinesReadPerRealization = 19, // distinct cache lines of its inputs per allocation
  kCpuAllocationBytesReadPerRealization = 20, // bytes of the producers' allocations read per alloc.
  kCpuWorkingSet = 21,                        // bytes live while it is computed
  kCpuVectorSize = 22,                        // vector width used (lanes; 1 = scalar code)
  kCpuNativeVectorSize = 23,                  // native vector width of the target for its type
  kCpuNumVectors = 24,                        // vectors computed in total
  kCpuNumScalars = 25,                   // scalars computed in total (tails, unvectorized loops)
  kCpuScalarLoadsPerVector = 26,         // scalar loads (gathers, broadcasts) per vector computed
  kCpuVectorLoadsPerVector = 27,         // dense vector loads per vector computed
  kCpuScalarLoadsPerScalar = 28,         // loads per scalar computed
  kCpuBytesWrittenPerTask = 29,          // bytes written by one parallel task
  kCpuInnermostBytesWrittenPerTask = 30, // feature 29 along the innermost storage dimension only
  kCpuUniqueBytesReadPerVector = 31,     // distinct bytes read per vector computed
  kCpuUniqueLinesReadPerVector = 32,     // distinct cache lines read per vector computed
  kCpuUniqueBytesReadPerTask = 33,       // distinct bytes read by one parallel task
  kCpuUniqueLinesReadPerTask = 34,       // distinct cache lines read by one parallel task
  kCpuWorkingSetAtTask = 35,             // live bytes of all stages at the parallel-task level
  kCpuWorkingSetAtProduction = 36,       // live bytes at the tile level
  kCpuWorkingSetAtRealization = 37,      // live bytes at the allocation level
  kCpuWorkingSetAtRoot = 38,             // live bytes at the root level
  kCpuFeatureCount = 39
};

// Schedule features for GPU (CUDA) targets. 0-29 are the CPU features without the vector ones
// (a "task" is one block here); 30-72 describe the launch, the threads and the memory levels.
// Ratios (utilisation, occupancy, efficiency) are in [0, 1].
enum GpuFeature : int {
  kGpuNumRealizations = 0,         // as kCpuNumRealizations
  kGpuNumProductions = 1,          // as kCpuNumProductions
  kGpuPointsPerRealization = 2,    // as kCpuPointsPerRealization
  kGpuPointsPerProduction = 3,     // as kCpuPointsPerProduction
  kGpuPointsTotal = 4,             // as kCpuPointsTotal
  kGpuPointsMinimum = 5,           // as kCpuPointsMinimum
  kGpuInnermostLoopExtent = 6,     // as kCpuInnermostLoopExtent
  kGpuInnermostPureLoopExtent = 7, // as kCpuInnermostPureLoopExtent
  kGpuUnrolledLoopExtent = 8,      // as kCpuUnrolledLoopExtent (register tiling)
  kGpuInnerParallelism = 9,        // parallel iterations (blocks x threads) inside one allocation
  kGpuOuterParallelism = 10,       // parallel instances of the enclosing loops outside it
  kGpuBytesAtRealization = 11,     // as kCpuBytesAtRealization
  kGpuBytesAtProduction = 12,      // as kCpuBytesAtProduction
  kGpuBytesAtRoot = 13,            // as kCpuBytesAtRoot
  kGpuInnermostBytesAtRealization = 14,       // as kCpuInnermostBytesAtRealization
  kGpuInnermostBytesAtProduction = 15,        // as kCpuInnermostBytesAtProduction
  kGpuInnermostBytesAtRoot = 16,              // as kCpuInnermostBytesAtRoot
  kGpuInlinedCalls = 17,                      // calls made to it when inlined (0 otherwise)
  kGpuUniqueBytesReadPerRealization = 18,     // as kCpuUniqueBytesReadPerRealization
  kGpuUniqueLinesReadPerRealization = 19,     // as kCpuUniqueLinesReadPerRealization
  kGpuAllocationBytesReadPerRealization = 20, // as kCpuAllocationBytesReadPerRealization
  kGpuWorkingSet = 21,                        // as kCpuWorkingSet
  kGpuBytesWrittenPerBlock = 22,              // bytes written by one block
  kGpuInnermostBytesWrittenPerBlock = 23, // feature 22 along the innermost storage dimension only
  kGpuUniqueBytesReadPerBlock = 24,       // distinct bytes read by one block
  kGpuUniqueLinesReadPerBlock = 25,       // distinct cache lines read by one block
  kGpuWorkingSetAtBlock = 26,             // live bytes at the block level
  kGpuWorkingSetAtProduction = 27,        // live bytes at the tile level
  kGpuWorkingSetAtRealization = 28,       // live bytes at the allocation level
  kGpuWorkingSetAtRoot = 29,              // live bytes at the root level
  kGpuNumKernelLaunches = 30,         // launches of the kernel computing it (> 1 inside host loops)
  kGpuBlocksPerLaunch = 31,           // blocks in one launch
  kGpuThreadsPerBlock = 32,           // threads in one block
  kGpuWarpsPerBlock = 33,             // warps in one block (threads rounded up to 32)
  kGpuTotalThreads = 34,              // threads launched over all launches
  kGpuTotalWarps = 35,                // warps launched over all launches
  kGpuWarpLaneUtilization = 36,       // active lanes / 32, averaged over warps
  kGpuIdleLanes = 37,                 // warp lanes launched that compute nothing, in total
  kGpuNumSMs = 38,                    // streaming multiprocessors of the target
  kGpuWavesPerLaunch = 39,            // ceil(blocks / (SMs x active blocks per SM))
  kGpuActiveBlocksPerSM = 40,         // resident blocks per SM (threads, shared, registers)
  kGpuOccupancy = 41,                 // resident warps / the SM's maximum warps
  kGpuSharedBytesPerBlock = 42,       // shared memory allocated per block
  kGpuRegisterBytesPerThread = 43,    // register working set of one thread
  kGpuSpilledBytesPerThread = 44,     // register working set beyond the register file (local)
  kGpuBarriersPerBlock = 45,          // __syncthreads executed per block
  kGpuPointsPerThread = 46,           // points computed by one thread
  kGpuPointsPerWarp = 47,             // points computed by one warp
  kGpuPointsPerBlock = 48,            // points computed by one block
  kGpuSerialLoopExtentPerThread = 49, // trip count of the innermost serial loop inside a thread
  kGpuGlobalLoadsPerThread = 50,      // global load instructions per thread
  kGpuGlobalLoadTransactionsPerAccess = 51, // 32-byte sectors per warp-wide global load
  kGpuGlobalLoadEfficiency = 52, // bytes used / bytes transferred by global loads (coalescing)
  kGpuUniqueGlobalBytesReadPerBlock = 53,    // distinct global bytes read by one block
  kGpuUniqueGlobalLinesReadPerBlock = 54,    // distinct 128-byte global lines read by one block
  kGpuGlobalStoresPerThread = 55,            // global store instructions per thread
  kGpuGlobalStoreTransactionsPerAccess = 56, // 32-byte sectors per warp-wide global store
  kGpuGlobalStoreEfficiency = 57,            // bytes used / bytes transferred by global stores
  kGpuGlobalBytesWrittenPerBlock = 58,       // global bytes written by one block
  kGpuGlobalBytesLoadedTotal = 59, // global bytes loaded by all blocks, redundant reads included
  kGpuSharedLoadsPerThread = 60,   // shared-memory load instructions per thread
  kGpuSharedLoadTransactionsPerAccess = 61, // wavefronts per warp-wide shared load (bank conflicts)
  kGpuSharedLoadEfficiency = 62,            // 1 / (bank-conflict replay factor) of shared loads
  kGpuSharedStoresPerThread = 63,           // shared-memory store instructions per thread
  kGpuSharedStoreTransactionsPerAccess = 64, // wavefronts per warp-wide shared store
  kGpuSharedStoreEfficiency = 65,            // 1 / (bank-conflict replay factor) of shared stores
  kGpuSharedBytesWrittenPerBlock = 66,       // bytes staged into shared memory per block
  kGpuSharedBytesReadPerBlock = 67,          // bytes read from shared memory per block
  kGpuRegisterLoadsPerThread = 68,     // loads served from registers (reuse through unrolling)
  kGpuBroadcastLoadsPerThread = 69,    // loads where every lane of a warp reads one address
  kGpuGlobalWorkingSetPerBlock = 70,   // global bytes one block touches
  kGpuRegisterWorkingSetPerBlock = 71, // register bytes of all threads of a block
  kGpuL2WorkingSet = 72,               // global bytes touched by all concurrently resident blocks
  kGpuFeatureCount = 73
};

static_assert(kCpuFeatureCount == kCpuScheduleFeatureCount, "CPU feature enum out of sync");
static_assert(kGpuFeatureCount == kGpuScheduleFeatureCount, "GPU feature enum out of sync");

} // namespace hkfac::cost_model
