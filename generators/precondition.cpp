// Kronecker-factored preconditioning: U = A⁻¹ V G⁻¹, and the eigenbasis route with (A⊗G + γI)^±1.
#include "Halide.h"

#include "matmul_schedule.h"

namespace {

using namespace Halide;

// U = A_inv V G_inv. V, U are (dA x dG); A_inv (dA x dA) and G_inv (dG x dG).
// Both products cost the same either way round (2 dA dG (dA + dG) flops); the intermediate
// T = A_inv V never leaves the pipeline and is read back while still in the last-level cache.
class KronPrecondition : public Generator<KronPrecondition> {
public:
  Input<Buffer<float>> A_inv{"A_inv", 2};
  Input<Buffer<float>> V{"V", 2};
  Input<Buffer<float>> G_inv{"G_inv", 2};
  Output<Buffer<float>> U{"U", 2};

  void generate() {
    Expr d_a = V.dim(1).extent(), d_g = V.dim(0).extent();
    a_inv(k, i) = A_inv(k, i);
    v(j, k) = V(j, k);
    hkfac::sched::Matmul a_inv_v("a_inv_v", a_inv, v, d_a, d_g, d_a, get_target());
    T(j, i) = a_inv_v(j, i);

    g_inv(j, k) = G_inv(j, k);
    hkfac::sched::Matmul t_g_inv("t_g_inv", T, g_inv, d_a, d_g, d_g, get_target());
    U(j, i) = t_g_inv(j, i);

    A_inv.set_estimates({{0, 1001}, {0, 1001}});
    V.set_estimates({{0, 500}, {0, 1001}});
    G_inv.set_estimates({{0, 500}, {0, 500}});
    U.set_estimates({{0, 500}, {0, 1001}});
    A_inv.dim(0).set_bounds(0, d_a).dim(1).set_bounds(0, d_a);
    G_inv.dim(0).set_bounds(0, d_g).dim(1).set_bounds(0, d_g);

    T.compute_root();
    a_inv_v.schedule(T, j, i);
    t_g_inv.schedule(U, j, i);
  }

private:
  Var j{"j"}, i{"i"}, k{"k"};
  Func a_inv{"a_inv"}, v{"v"}, g_inv{"g_inv"}, T{"T"};
};

// U = Q_A [ (Q_Aᵀ V Q_G) ⊘ (λ_A λ_Gᵀ + γ) ] Q_Gᵀ, eigenvalues clipped at 0; power = +1
// multiplies instead. Four products; the elementwise scaling fuses into the packing of the
// third product's right operand, and the transposes into the reads of the first and last.
class KronPreconditionEigen : public Generator<KronPreconditionEigen> {
public:
  Input<Buffer<float>> Q_A{"Q_A", 2};
  Input<Buffer<float>> lambda_A{"lambda_A", 1};
  Input<Buffer<float>> V{"V", 2};
  Input<Buffer<float>> Q_G{"Q_G", 2};
  Input<Buffer<float>> lambda_G{"lambda_G", 1};
  Input<float> gamma{"gamma"};
  Input<int> power{"power"};
  Output<Buffer<float>> U{"U", 2};

  void generate() {
    Expr d_a = V.dim(1).extent(), d_g = V.dim(0).extent();
    const Target t = get_target();
    // W1 = Q_Aᵀ V: row i of Q_Aᵀ is column i of Q_A.
    q_a_t(k, i) = Q_A(i, k);
    v(j, k) = V(j, k);
    hkfac::sched::Matmul qat_v("qat_v", q_a_t, v, d_a, d_g, d_a, t);
    W1(j, i) = qat_v(j, i);

    // W2 = W1 Q_G, then the eigenbasis scaling S = W2 ⊘ (λ_A λ_Gᵀ + γ).
    q_g(j, k) = Q_G(j, k);
    hkfac::sched::Matmul w1_qg("w1_qg", W1, q_g, d_a, d_g, d_g, t);
    W2(j, i) = w1_qg(j, i);
    Expr curvature = max(lambda_A(i), 0.0f) * max(lambda_G(j), 0.0f) + gamma;
    S(j, i) = W2(j, i) * select(power > 0, curvature, 1.0f / curvature);

    // W3 = Q_A S, U = W3 Q_Gᵀ.
    q_a(k, i) = Q_A(k, i);
    hkfac::sched::Matmul qa_s("qa_s", q_a, S, d_a, d_g, d_a, t);
    W3(j, i) = qa_s(j, i);
    q_g_t(j, k) = Q_G(k, j);
    hkfac::sched::Matmul w3_qgt("w3_qgt", W3, q_g_t, d_a, d_g, d_g, t);
    U(j, i) = w3_qgt(j, i);

    Q_A.set_estimates({{0, 1001}, {0, 1001}});
    lambda_A.set_estimates({{0, 1001}});
    V.set_estimates({{0, 500}, {0, 1001}});
    Q_G.set_estimates({{0, 500}, {0, 500}});
    lambda_G.set_estimates({{0, 500}});
    U.set_estimates({{0, 500}, {0, 1001}});
    Q_A.dim(0).set_bounds(0, d_a).dim(1).set_bounds(0, d_a);
    Q_G.dim(0).set_bounds(0, d_g).dim(1).set_bounds(0, d_g);
    lambda_A.dim(0).set_bounds(0, d_a);
    lambda_G.dim(0).set_bounds(0, d_g);

    W1.compute_root();
    W2.compute_root();
    W3.compute_root();
    qat_v.schedule(W1, j, i);
    w1_qg.schedule(W2, j, i);
    qa_s.schedule(W3, j, i);
    w3_qgt.schedule(U, j, i);
  }

private:
  Var j{"j"}, i{"i"}, k{"k"};
  Func q_a_t{"q_a_t"}, v{"v"}, q_g{"q_g"}, q_a{"q_a"}, q_g_t{"q_g_t"};
  Func W1{"W1"}, W2{"W2"}, S{"S"}, W3{"W3"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(KronPrecondition, hkfac_kron_precondition)
HALIDE_REGISTER_GENERATOR(KronPreconditionEigen, hkfac_kron_precondition_eigen)
