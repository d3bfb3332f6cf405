// Cost model network generators: inference (predictions) and training (loss, gradients, K-FAC
// records).
#include "cost_model.h"
#include "Halide.h"

#include <stdexcept>
#include <string>

namespace {

using namespace Halide;
using namespace hkfac::cost_model;

constexpr TailStrategy kGuard = TailStrategy::GuardWithIf;

// Inputs shared by both generators, with their bounds and estimates. Extents of the batch and
// stage dimensions come from schedule_features; everything else is fixed by the network.
template <typename G> struct NetworkInputs {
  static void constrain(G &g, int num_features) {
    g.schedule_features.dim(0).set_min(0);
    g.schedule_features.dim(1).set_bounds(0, num_features);
    g.schedule_features.dim(2).set_min(0);
    Expr stages = g.schedule_features.dim(2).extent();
    g.pipeline_features.dim(0).set_bounds(0, kPipelineFeatureRows);
    g.pipeline_features.dim(1).set_bounds(0, kPipelineFeatureTypes);
    g.pipeline_features.dim(2).set_bounds(0, stages);
    g.head1_filter.dim(0).set_bounds(0, kHead1Channels);
    g.head1_filter.dim(1).set_bounds(0, kPipelineFeatureRows);
    g.head1_filter.dim(2).set_bounds(0, kPipelineFeatureTypes);
    g.head1_bias.dim(0).set_bounds(0, kHead1Channels);
    g.head2_filter.dim(0).set_bounds(0, kHead2Channels);
    g.head2_filter.dim(1).set_bounds(0, num_features);
    g.head2_bias.dim(0).set_bounds(0, kHead2Channels);
    g.conv1_filter.dim(0).set_bounds(0, kConv1Channels);
    g.conv1_filter.dim(1).set_bounds(0, kConv1Channels);
    g.conv1_bias.dim(0).set_bounds(0, kConv1Channels);

    const int batch_est = 1024, stages_est = 20;
    g.pipeline_features.set_estimates(
        {{0, kPipelineFeatureRows}, {0, kPipelineFeatureTypes}, {0, stages_est}});
    g.schedule_features.set_estimates({{0, batch_est}, {0, num_features}, {0, stages_est}});
    g.head1_filter.set_estimates(
        {{0, kHead1Channels}, {0, kPipelineFeatureRows}, {0, kPipelineFeatureTypes}});
    g.head1_bias.set_estimates({{0, kHead1Channels}});
    g.head2_filter.set_estimates({{0, kHead2Channels}, {0, num_features}});
    g.head2_bias.set_estimates({{0, kHead2Channels}});
    g.conv1_filter.set_estimates({{0, kConv1Channels}, {0, kConv1Channels}});
    g.conv1_bias.set_estimates({{0, kConv1Channels}});
    g.num_cores.set_estimate(16);
  }

  static Network build(G &g, int num_features) {
    if (num_features != kCpuScheduleFeatureCount && num_features != kGpuScheduleFeatureCount) {
      throw std::invalid_argument("num_features must be 39 or 73, got " +
                                  std::to_string(num_features));
    }
    constrain(g, num_features);
    return network(g, num_features);
  }

  // Another copy of the network's Funcs over the same inputs (to compute them in a second place).
  static Network network(G &g, int num_features) {
    return Network(g.pipeline_features, g.schedule_features, g.head1_filter, g.head1_bias,
                   g.head2_filter, g.head2_bias, g.conv1_filter, g.conv1_bias, g.num_cores,
                   num_features);
  }
};

// The per-stage algorithm embedding: tiny, computed once per call before the schedules' loops.
// Its reduction (280 terms per stage) runs for kAlgoStagesAtOnce stages side by side: one stage
// at a time it was a single chain of dependent multiply-adds, a quarter of a batch-16 prediction
// (Halide's profiler).
constexpr int kAlgoStagesAtOnce = 8;
void schedule_algorithm_part_cpu(Network &net) {
  Var so("so"), si("si");
  net.sig_head1.compute_root().vectorize(net.c, kHead1Channels);
  net.algo.compute_root().bound(net.c, 0, kHead1Channels).vectorize(net.c);
  net.algo.update()
      .split(net.s, so, si, kAlgoStagesAtOnce, TailStrategy::GuardWithIf)
      .reorder(net.c, si, net.r_pf.x, net.r_pf.y, so)
      .vectorize(net.c)
      .unroll(si);
  net.algo_conv1.compute_root().bound(net.c, 0, kConv1Channels).vectorize(net.c, 8);
  net.algo_conv1.update().reorder(net.c, net.r_algo, net.s).vectorize(net.c, 8);
}

void schedule_algorithm_part_gpu(Network &net) {
  Var co("co"), ci("ci"), so("so"), si("si");
  net.sig_head1.compute_root().gpu_tile(net.c, net.i, co, so, ci, si, 8, 8, kGuard);
  net.algo.compute_root().bound(net.c, 0, kHead1Channels);
  for (Stage st : {Stage(net.algo), Stage(net.algo.update())}) {
    st.gpu_tile(net.c, net.s, co, so, ci, si, kHead1Channels, 8, kGuard);
  }
  net.algo_conv1.compute_root().bound(net.c, 0, kConv1Channels);
  for (Stage st : {Stage(net.algo_conv1), Stage(net.algo_conv1.update())}) {
    st.gpu_tile(net.c, net.s, co, so, ci, si, kConv1Channels, 4, kGuard);
  }
}

// The sum over stages `total` (pure 0, one update over r_s) of per-(schedule, stage) costs: one
// native vector of schedules per parallel task; for each stage, that vector's activations
// (S + 24 + 32 vectors) live on the stack. Whole vectors are computed past the batch's end (the
// feature reads clamp), only the stores of `total` are guarded.
void schedule_forward_cpu(Network &net, Func total, RDom r_s, int vec,
                          Expr parallel = Halide::Internal::const_true()) {
  Var no("no"), ni("ni");
  schedule_algorithm_part_cpu(net);
  total.compute_root().split(net.n, no, ni, vec, kGuard).vectorize(ni);
  total.specialize(parallel).parallel(no);
  total.update().split(net.n, no, ni, vec, kGuard).reorder(ni, r_s, no).vectorize(ni);
  total.update().specialize(parallel).parallel(no);
  for (Func f : {net.x2, net.h2pre, net.h2, net.c1pre}) {
    f.compute_at(total, r_s).bound_extent(net.n, vec).vectorize(net.n);
  }
  // The products keep a block of output channels' accumulators in registers while their inputs
  // run (12 of head2's 24, 8 of conv1's 32, with the input vector and a broadcast weight within
  // AVX2's 16 registers); channel by channel each multiply-add loaded and stored its accumulator.
  Var co("co"), ci("ci");
  net.h2pre.update()
      .split(net.c, co, ci, kHead2Channels / 2)
      .reorder(net.n, ci, net.r_f, co)
      .vectorize(net.n)
      .unroll(ci);
  net.c1pre.update()
      .split(net.c, co, ci, kConv1Channels / 4)
      .reorder(net.n, ci, net.r_h2, co)
      .vectorize(net.n)
      .unroll(ci);
}

// The same on a GPU: one thread per (schedule, stage) for the stage costs, then one per schedule
// for the sum over stages.
void schedule_forward_gpu(Network &net, const std::vector<Func> &per_stage, Func total) {
  Var no("no"), ni("ni"), so("so"), si("si");
  schedule_algorithm_part_gpu(net);
  for (Func f : per_stage) {
    f.compute_root().gpu_tile(net.n, net.s, no, so, ni, si, 64, 1, kGuard);
  }
  for (Func f : {net.x2, net.h2pre, net.h2, net.c1pre}) {
    f.compute_at(per_stage.front(), ni);
  }
  total.compute_root().gpu_tile(net.n, no, ni, 64, kGuard);
  total.update().gpu_tile(net.n, no, ni, 64, kGuard);
}

// predictions(n) = Σ_s stage_cost(n, s).
class CostModelPredict : public Generator<CostModelPredict> {
public:
  GeneratorParam<int> num_features{"num_features", kCpuScheduleFeatureCount};

  Input<Buffer<float>> pipeline_features{"pipeline_features", 3};
  Input<Buffer<float>> schedule_features{"schedule_features", 3};
  Input<Buffer<float>> head1_filter{"head1_filter", 3};
  Input<Buffer<float>> head1_bias{"head1_bias", 1};
  Input<Buffer<float>> head2_filter{"head2_filter", 2};
  Input<Buffer<float>> head2_bias{"head2_bias", 1};
  Input<Buffer<float>> conv1_filter{"conv1_filter", 2};
  Input<Buffer<float>> conv1_bias{"conv1_bias", 1};
  Input<int> num_cores{"num_cores", 1};
  Output<Buffer<float>> predictions{"predictions", 1};

  void generate() {
    Network net = NetworkInputs<CostModelPredict>::build(*this, num_features);
    RDom r_s(0, schedule_features.dim(2).extent(), "r_s");
    predictions(net.n) = 0.0f;
    predictions(net.n) += net.stage_cost(net.n, r_s);

    predictions.dim(0).set_bounds(0, schedule_features.dim(0).extent());
    predictions.set_estimates({{0, 1024}});
    if (get_target().has_gpu_feature()) {
      net.stage_cost.compute_root();
      schedule_forward_gpu(net, {net.stage_cost}, predictions);
    } else {
      schedule_forward_cpu(net, predictions, r_s, natural_vector_size<float>());
    }
  }
};

// Training: loss, predictions, ∂J/∂(every weight buffer), and the K-FAC records, where
// J = loss_weight L_rel + penalty_weight Pen + Σ_n cotangent(n) p_n (see the runtime header).
//
// Two passes, written by hand. The forward pass sums predictions and penalties over stages
// exactly as inference does (so the two kernels' predictions agree). The backward pass needs the
// loss, hence all predictions, first; it then recomputes the activations per tile of schedules
// while it writes the records, which are channel-major (channel innermost, like a conv layer's)
// and double as the backward pass's intermediates: no batch-sized temporary is allocated, only
// the records the caller provides. Weight gradients are sums over (schedule, stage) of outer
// products of the records.
class CostModelTrain : public Generator<CostModelTrain> {
public:
  GeneratorParam<int> num_features{"num_features", kCpuScheduleFeatureCount};

  Input<Buffer<float>> pipeline_features{"pipeline_features", 3};
  Input<Buffer<float>> schedule_features{"schedule_features", 3};
  Input<Buffer<float>> head1_filter{"head1_filter", 3};
  Input<Buffer<float>> head1_bias{"head1_bias", 1};
  Input<Buffer<float>> head2_filter{"head2_filter", 2};
  Input<Buffer<float>> head2_bias{"head2_bias", 1};
  Input<Buffer<float>> conv1_filter{"conv1_filter", 2};
  Input<Buffer<float>> conv1_bias{"conv1_bias", 1};
  Input<int> num_cores{"num_cores", 1};
  Input<Buffer<float>> true_runtimes{"true_runtimes", 1};
  Input<Buffer<float>> cotangent{"cotangent", 1};
  Input<float> loss_weight{"loss_weight", 1.0f};
  Input<float> penalty_weight{"penalty_weight", 0.0f};

  Output<Buffer<float>> loss{"loss", 1};
  Output<Buffer<float>> predictions{"predictions", 1};
  Output<Buffer<float>> head1_filter_grad{"head1_filter_grad", 3};
  Output<Buffer<float>> head1_bias_grad{"head1_bias_grad", 1};
  Output<Buffer<float>> head2_filter_grad{"head2_filter_grad", 2};
  Output<Buffer<float>> head2_bias_grad{"head2_bias_grad", 1};
  Output<Buffer<float>> conv1_filter_grad{"conv1_filter_grad", 2};
  Output<Buffer<float>> conv1_bias_grad{"conv1_bias_grad", 1};
  Output<Buffer<float>> head1_out_grad{"head1_out_grad", 3};
  Output<Buffer<float>> head2_input{"head2_input", 3};
  Output<Buffer<float>> head2_out_grad{"head2_out_grad", 3};
  Output<Buffer<float>> conv1_input{"conv1_input", 3};
  Output<Buffer<float>> conv1_out_grad{"conv1_out_grad", 3};

  void generate() {
    const int S = num_features;
    Network fwd = NetworkInputs<CostModelTrain>::build(*this, S);
    // A second copy of the network's Funcs for the backward pass, which computes them per tile.
    Network bwd = NetworkInputs<CostModelTrain>::network(*this, S);
    const Var n = fwd.n, c = fwd.c, s = fwd.s, i = fwd.i, j = fwd.j;
    const Expr batch = schedule_features.dim(0).extent();
    const Expr stages = schedule_features.dim(2).extent();
    RDom r_s(0, stages, "r_s"), r_n(0, batch, "r_n"), r_ns(0, batch, 0, stages, "r_ns");
    RDom r_f(0, S, "r_f"), r_h2(0, kHead2Channels, "r_h2"), r_o(0, kConv1Channels, "r_o");

    // Forward: predictions and per-schedule penalties, summed over stages in one loop.
    stage_sums(n, s) = Tuple(fwd.stage_cost(n, s), fwd.stage_penalty(n, s));
    sums(n) = Tuple(0.0f, 0.0f);
    sums(n) = Tuple(sums(n)[0] + stage_sums(n, r_s)[0], sums(n)[1] + stage_sums(n, r_s)[1]);
    predictions(n) = sums(n)[0];

    // Loss. r = the fastest schedule (argmin keeps the first index on ties); p_r is floored so
    // an all-zero prediction stays finite, and then carries no gradient.
    const Expr p_n = sums(n)[0];
    best() = argmin(r_n, true_runtimes(r_n))[0];
    const Expr r = clamp(best(), 0, batch - 1);
    p_best() = sums(r)[0];
    const Expr p_r_raw = p_best(), p_r = max(p_r_raw, 1e-10f);
    const Expr q = p_n / p_r, m = max(q, 1e-10f);
    rel_err(n) = 1.0f / m - true_runtimes(r) / true_runtimes(n);
    // dL/dq_n: zero where the 1e-10 floor is active.
    dl_dq(n) = select(q > 1e-10f, -2.0f * rel_err(n) / (m * m), 0.0f);
    totals() = Tuple(0.0f, 0.0f);
    totals() = Tuple(totals()[0] + rel_err(r_n) * rel_err(r_n), totals()[1] + sums(r_n)[1]);
    loss(i) = select(i == 0, totals()[0], totals()[1]);

    // Backward to the predictions. Through p_r: dq_m/dp_r = -p_m / p_r², collected on r.
    via_best() = 0.0f;
    via_best() += dl_dq(r_n) * sums(r_n)[0];
    const Expr through_r = select(n == r && p_r_raw > 1e-10f, via_best() / (p_r * p_r), 0.0f);
    dp(n) = loss_weight * (dl_dq(n) / p_r - through_r) + cotangent(n);

    // Backward through the network, channel-major, recomputing the forward activations.
    head2_input(c, n, s) = bwd.x2(n, c, s);
    h2pre(c, n, s) = head2_bias(c);
    h2pre(c, n, s) += head2_filter(c, r_f) * head2_input(r_f, n, s);
    conv1_input(c, n, s) = select(c < kHead1Channels, fwd.algo(min(c, kHead1Channels - 1), s),
                                  max(h2pre(max(c - kHead1Channels, 0), n, s), 0.0f));
    c1pre(c, n, s) = fwd.algo_conv1(c, s);
    c1pre(c, n, s) +=
        conv1_filter(c, kHead1Channels + r_h2) * conv1_input(kHead1Channels + r_h2, n, s);
    conv1_out_grad(c, n, s) = select(c1pre(c, n, s) > 0.0f, dp(n) * bwd.term(n, c, s), 0.0f) +
                              2.0f * penalty_weight * min(c1pre(c, n, s), 0.0f);
    conv1_filter_t(c, i) = conv1_filter(i, c);
    // ∂J/∂emb, split into its algorithm (head1) and schedule (head2) halves.
    demb_algo(c, n, s) = 0.0f;
    demb_algo(c, n, s) += conv1_filter_t(c, r_o) * conv1_out_grad(r_o, n, s);
    demb_sched(c, n, s) = 0.0f;
    demb_sched(c, n, s) += conv1_filter_t(kHead1Channels + c, r_o) * conv1_out_grad(r_o, n, s);
    head1_out_grad(c, n, s) = demb_algo(c, n, s);
    head2_out_grad(c, n, s) =
        select(conv1_input(kHead1Channels + c, n, s) > 0.0f, demb_sched(c, n, s), 0.0f);

    // Weight gradients.
    conv1_filter_grad(c, i) = 0.0f;
    conv1_filter_grad(c, i) += conv1_out_grad(c, r_ns.x, r_ns.y) * conv1_input(i, r_ns.x, r_ns.y);
    conv1_bias_grad(c) = 0.0f;
    conv1_bias_grad(c) += conv1_out_grad(c, r_ns.x, r_ns.y);
    head2_filter_grad(c, i) = 0.0f;
    head2_filter_grad(c, i) += head2_out_grad(c, r_ns.x, r_ns.y) * head2_input(i, r_ns.x, r_ns.y);
    head2_bias_grad(c) = 0.0f;
    head2_bias_grad(c) += head2_out_grad(c, r_ns.x, r_ns.y);
    dalgo(c, s) = 0.0f;
    dalgo(c, s) += head1_out_grad(c, r_n, s);
    head1_bias_grad(c) = 0.0f;
    head1_bias_grad(c) += dalgo(c, r_s);
    dfilter_sum(c, i, j) = 0.0f;
    dfilter_sum(c, i, j) += dalgo(c, r_s) * pipeline_features(i, j, r_s);
    const Expr sg = fwd.sig_head1(c, i, j);
    head1_filter_grad(c, i, j) = sg * (1.0f - sg) * dfilter_sum(c, i, j);

    true_runtimes.dim(0).set_bounds(0, batch);
    cotangent.dim(0).set_bounds(0, batch);
    true_runtimes.set_estimates({{0, 1024}});
    cotangent.set_estimates({{0, 1024}});
    loss_weight.set_estimate(1.0f);
    penalty_weight.set_estimate(1e-3f);
    loss.dim(0).set_bounds(0, 2);
    loss.set_estimates({{0, 2}});
    predictions.dim(0).set_bounds(0, batch);
    predictions.set_estimates({{0, 1024}});
    head1_filter_grad.dim(0).set_bounds(0, kHead1Channels);
    head1_filter_grad.dim(1).set_bounds(0, kPipelineFeatureRows);
    head1_filter_grad.dim(2).set_bounds(0, kPipelineFeatureTypes);
    head1_bias_grad.dim(0).set_bounds(0, kHead1Channels);
    head2_filter_grad.dim(0).set_bounds(0, kHead2Channels);
    head2_filter_grad.dim(1).set_bounds(0, S);
    head2_bias_grad.dim(0).set_bounds(0, kHead2Channels);
    conv1_filter_grad.dim(0).set_bounds(0, kConv1Channels);
    conv1_filter_grad.dim(1).set_bounds(0, kConv1Channels);
    conv1_bias_grad.dim(0).set_bounds(0, kConv1Channels);
    head1_filter_grad.set_estimates(
        {{0, kHead1Channels}, {0, kPipelineFeatureRows}, {0, kPipelineFeatureTypes}});
    head1_bias_grad.set_estimates({{0, kHead1Channels}});
    head2_filter_grad.set_estimates({{0, kHead2Channels}, {0, S}});
    head2_bias_grad.set_estimates({{0, kHead2Channels}});
    conv1_filter_grad.set_estimates({{0, kConv1Channels}, {0, kConv1Channels}});
    conv1_bias_grad.set_estimates({{0, kConv1Channels}});
    for (const auto &[rec, channels] : records(S)) {
      rec->dim(0).set_bounds(0, channels);
      rec->dim(1).set_bounds(0, batch);
      rec->dim(2).set_bounds(0, stages);
      rec->set_estimates({{0, channels}, {0, 1024}, {0, 20}});
    }

    if (get_target().has_gpu_feature()) {
      schedule_gpu(fwd, bwd);
    } else {
      schedule_cpu(fwd, bwd, r_s, r_ns);
    }
  }

private:
  Func stage_sums{"stage_sums"}, sums{"sums"}, best{"best"}, p_best{"p_best"}, rel_err{"rel_err"},
      dl_dq{"dl_dq"}, totals{"totals"}, via_best{"via_best"}, dp{"dp"}, h2pre{"h2pre_cm"},
      c1pre{"c1pre_cm"}, conv1_filter_t{"conv1_filter_t"}, demb_algo{"demb_algo"},
      demb_sched{"demb_sched"}, dalgo{"dalgo"}, dfilter_sum{"dfilter_sum"};

  std::vector<std::pair<Output<Buffer<float>> *, int>> records(int S) {
    return {{&head1_out_grad, kHead1Channels},
            {&head2_input, S},
            {&head2_out_grad, kHead2Channels},
            {&conv1_input, kConv1Channels},
            {&conv1_out_grad, kConv1Channels}};
  }

  // Records: parallel over (stage, tile of schedules), vectorized across channels; the
  // activations a tile needs are computed at the tile. Weight gradients stream the records once,
  // accumulating the (small) gradient in L1.
  // Below this many (schedule, stage) pairs the training kernel runs on the calling thread. A
  // training step's call is short and comes between other work, so Halide's workers have gone to
  // sleep, and waking them cost more than they saved at small batches; from this size two threads
  // win (see docs/RESULTS.md#cost-model-kernel-threads).
  static constexpr int kParallelPairsFrom = 256;

  void schedule_cpu(Network &fwd, Network &bwd, RDom r_s, RDom r_ns) {
    const int vec = natural_vector_size<float>();
    const int tile = 16;
    const Var n = fwd.n, c = fwd.c, s = fwd.s, i = fwd.i;
    Var no("no"), ni("ni"), t("t");
    const Expr parallel = schedule_features.dim(0).extent() * schedule_features.dim(2).extent() >=
                          kParallelPairsFrom;
    schedule_forward_cpu(fwd, sums, r_s, vec, parallel);
    predictions.vectorize(n, vec, kGuard);
    for (Func f : {dl_dq, dp}) {
      f.compute_root().vectorize(n, vec, kGuard);
    }
    for (Func f : {best, p_best, totals, via_best}) {
      f.compute_root();
    }
    conv1_filter_t.compute_root();
    for (const auto &[rec, channels] : records(num_features)) {
      (void)channels;
      rec->split(n, no, ni, tile, kGuard)
          .reorder(c, ni, no, s)
          .fuse(no, s, t)
          .vectorize(c, 8, kGuard);
      rec->specialize(parallel).parallel(t);
    }
    bwd.x2.compute_at(head2_input, t).bound_extent(n, tile).vectorize(n, vec);
    bwd.term.compute_at(conv1_out_grad, t)
        .bound_extent(n, tile)
        .bound(c, 0, kNumCostTerms)
        .vectorize(n, vec)
        .unroll(c);
    const std::vector<std::pair<Func, Output<Buffer<float>> *>> tiles = {
        {h2pre, &conv1_input},
        {c1pre, &conv1_out_grad},
        {demb_algo, &head1_out_grad},
        {demb_sched, &head2_out_grad}};
    for (const auto &[f, rec] : tiles) {
      Func g = f;
      g.compute_at(*rec, t).vectorize(c, 8, kGuard);
      g.update().reorder(c, n).vectorize(c, 8, kGuard);
    }
    // Outer products: per (schedule, stage), every (c, i) of a slice of i; the accumulators stay
    // in L1 and each slice streams the records once.
    Var io("io"), ii("ii");
    for (Func f : {Func(conv1_filter_grad), Func(head2_filter_grad)}) {
      f.vectorize(c, 8);
      f.update()
          .split(i, io, ii, 8, kGuard)
          .reorder(c, ii, r_ns.x, r_ns.y, io)
          .vectorize(c, 8);
      f.update().specialize(parallel).parallel(io);
    }
    for (Func f : {Func(conv1_bias_grad), Func(head2_bias_grad), Func(head1_bias_grad)}) {
      f.vectorize(c, 8, kGuard);
      f.update().vectorize(c, 8, kGuard);
    }
    dalgo.compute_root().vectorize(c, 8, kGuard);
    dalgo.update().vectorize(c, 8, kGuard);
    dfilter_sum.compute_root().vectorize(c, 8, kGuard);
    dfilter_sum.update().reorder(c, i, fwd.j).vectorize(c, 8, kGuard);
    head1_filter_grad.vectorize(c, 8, kGuard);
  }

  void schedule_gpu(Network &fwd, Network &bwd) {
    const Var n = fwd.n, c = fwd.c, s = fwd.s, i = fwd.i;
    Var no("no"), ni("ni"), so("so"), si("si"), co("co"), ci("ci");
    auto all_stages = [](Func f) {
      std::vector<Stage> st = {Stage(f)};
      for (int u = 0; u < f.num_update_definitions(); u++)
        st.push_back(f.update(u));
      return st;
    };
    // Forward: stage costs and penalties per (schedule, stage) thread, then summed per schedule.
    schedule_forward_gpu(fwd, {stage_sums}, sums);
    // One thread per schedule.
    for (Func f : {dl_dq, dp, Func(predictions)}) {
      f.compute_root();
      for (Stage st : all_stages(f))
        st.gpu_tile(n, no, ni, 64, kGuard);
    }
    // Scalars: one thread.
    for (Func f : {best, p_best, totals, via_best, Func(loss)}) {
      f.compute_root();
      for (Stage st : all_stages(f))
        st.gpu_single_thread();
    }
    // Records: one thread per (channel, schedule); per-thread activations.
    for (const auto &[rec, channels] : records(num_features)) {
      (void)channels;
      rec->gpu_tile(c, n, s, co, no, so, ci, ni, si, 8, 32, 1, kGuard);
    }
    // At the innermost thread loop: computed at ni (thread y), with the channel threads inside,
    // Halide 14 gave every thread its own copy of the 8 channels but sized the block's buffer
    // for one, and the threads wrote past its end (found by scripts/opencl-check under pocl:
    // heap corruption at batch 7; on a GPU, writes past a device allocation).
    bwd.x2.compute_at(head2_input, ci);
    // Terms at root, one thread per (schedule, stage): a thread per (term, schedule) would
    // evaluate the whole mux.
    bwd.term.compute_root()
        .bound(c, 0, kNumCostTerms)
        .unroll(c)
        .gpu_tile(n, s, no, so, ni, si, 64, 1, kGuard);
    conv1_filter_t.compute_root().gpu_tile(c, i, co, so, ci, si, 8, 8, kGuard);
    for (Func f : {h2pre, c1pre, demb_algo, demb_sched}) {
      f.compute_root();
      for (Stage st : all_stages(f))
        st.gpu_tile(c, n, s, co, no, so, ci, ni, si, 8, 32, 1, kGuard);
    }
    // Weight gradients: one thread per weight, the (schedule, stage) sum in a loop.
    for (Func f : {Func(conv1_filter_grad), Func(head2_filter_grad), Func(dfilter_sum)}) {
      for (Stage st : all_stages(f))
        st.gpu_tile(c, i, co, so, ci, si, 8, 8, kGuard);
    }
    dfilter_sum.compute_root();
    for (Func f : {Func(conv1_bias_grad), Func(head2_bias_grad), Func(head1_bias_grad)}) {
      for (Stage st : all_stages(f))
        st.gpu_tile(c, co, ci, 32, kGuard);
    }
    dalgo.compute_root();
    for (Stage st : all_stages(dalgo))
      st.gpu_tile(c, s, co, so, ci, si, 8, 8, kGuard);
    head1_filter_grad.gpu_tile(c, i, co, so, ci, si, 8, 8, kGuard);
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(CostModelPredict, hkfac_cost_model_predict)
HALIDE_REGISTER_GENERATOR(CostModelTrain, hkfac_cost_model_train)
