// The state pass (kernels/state_pass.hpp) that context parallel runs on the
// segment before a rank's own: its final state (and key sum) is the forward's,
// bitwise where it runs the fused kernel's own state update or the forward
// itself, and within the fp32 level of the fp64 reference on tensor cores.
// Gated (levels 2 and 3: RetNet's gammas, strong, weak and moderate g), the
// same: bitwise the gated forward's final state, and within the level of the
// fp64 gated reference; on tensor cores the gated segment sums, at the fp32 level.
#include "core/accuracy_levels.hpp"
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "forward_check.hpp"
#include "gate_cases.hpp"
#include "kernels/state_pass.hpp"
#include "reference/gated.hpp"

#include <Kokkos_Core.hpp>
#include <gtest/gtest.h>

#include <vector>

namespace linattn {
namespace {

using testing::InputValues;

Problem problem(std::int64_t B, std::int64_t T, std::int64_t H, std::int64_t DK, std::int64_t DV) {
  Problem p;
  p.B = B; p.T = T; p.H = H; p.DK = DK; p.DV = DV; p.chunk = 16; p.scale = 0.25;
  return p;
}

bool same_bits(const Tensor& a, const Tensor& b) { return a.shape == b.shape && a.dtype == b.dtype && a.bytes == b.bytes; }

StatePassOutput state_of(const Problem& p, ForwardConfig cfg, const ProblemInputs& in, const Tensor* gate = nullptr) {
  cfg.poison_outputs = true;
  return run_state_pass(p, cfg, in.k, in.v, in.initial_state.empty() ? nullptr : &in.initial_state,
                        in.initial_z.empty() ? nullptr : &in.initial_z, gate);
}

ForwardOutput gated_forward_of(const Problem& p, ForwardConfig cfg, const ProblemInputs& in, const Tensor& gate) {
  cfg.poison_outputs = true;
  return run_forward(p, cfg, in.q, in.k, in.v, in.initial_state.empty() ? nullptr : &in.initial_state, nullptr, &gate);
}

// The gate as the HDF5 contract holds it (fp32), and the reference's gate read from those values.
Tensor gate_tensor(const Problem& p, const testing::GateCase& g) {
  return Tensor::from_double(DType::f32, gate_shape(p, g.kind), g.values);
}
reference::Gate reference_gate(GateKind kind, const Tensor& gate) {
  return kind == GateKind::per_head ? reference::Gate::per_head(gate.to_double())
                                    : reference::Gate::per_token(gate.to_double());
}

bool host_backend() { return std::is_same<Kokkos::DefaultExecutionSpace, Kokkos::DefaultHostExecutionSpace>::value; }

TEST(StatePass, FusedTilesGiveTheForwardsFinalStateBitwise) {
  Problem packed = problem(1, 150, 2, 16, 24);
  packed.cu_seqlens = {0, 37, 40, 101, 150};  // ragged chunks, a sequence of 3 tokens
  const Problem problems[] = {problem(2, 75, 3, 16, 20), packed};
  std::vector<GemmPath> paths = {GemmPath::kokkos_kernels};
  if (host_backend()) paths.push_back(GemmPath::host_tile);
  std::uint64_t seed = 7100;
  for (const Problem& p : problems)
    for (GemmPath path : paths)
      for (DType dtype : {DType::f32, DType::bf16, DType::f64})
        for (bool with_state : {false, true}) {
          SCOPED_TRACE(std::string(gemm_path_name(path)) + " " + dtype_name(dtype) + (p.varlen() ? " packed" : "") +
                       (with_state ? " with initial state" : ""));
          ForwardConfig cfg;
          cfg.gemm = path;
          const ProblemInputs in = random_inputs(p, dtype, ++seed, with_state);
          const StatePassOutput s = state_of(p, cfg, in);
          EXPECT_EQ(s.kind, StatePassKind::fused_tiles);
          const ForwardOutput f = testing::run_inputs(p, cfg, in);
          EXPECT_TRUE(same_bits(s.final_state, f.final_state));
          EXPECT_TRUE(s.z_state.empty());
          const InputValues values(in);
          const reference::Result ref = reference::forward(p, values.inputs(), false);
          EXPECT_LE(relative_l2(s.final_state.to_double(), ref.final_state), stored_level(dtype, s.final_state.dtype));
        }
}

// Gated: the fused tiles' state update with each chunk's decays (chunk_gate.hpp) is
// the gated fused forward's final state, bit for bit, on every gate of
// gate_cases.hpp, plain and packed, with and without initial states; and it
// is the fp64 gated reference's, so a gate the pass ignored would fail here.
TEST(StatePass, GatedFusedTilesGiveTheGatedForwardsFinalStateBitwise) {
  Problem packed = problem(1, 150, 2, 16, 24);
  packed.cu_seqlens = {0, 37, 40, 101, 150};  // ragged chunks, a sequence of 3 tokens
  const Problem problems[] = {problem(2, 75, 3, 16, 20), packed};
  std::vector<GemmPath> paths = {GemmPath::kokkos_kernels};
  if (host_backend()) paths.push_back(GemmPath::host_tile);
  std::uint64_t seed = 7500;
  for (const Problem& p : problems)
    for (const testing::GateCase& g : testing::gate_cases(p, derive_seed(seed, p.varlen())))
      for (GemmPath path : paths)
        for (DType dtype : {DType::f32, DType::bf16, DType::f64})
          for (bool with_state : {false, true}) {
            SCOPED_TRACE(g.name + " " + gemm_path_name(path) + " " + dtype_name(dtype) + (p.varlen() ? " packed" : "") +
                         (with_state ? " with initial state" : ""));
            ForwardConfig cfg;
            cfg.gemm = path;
            cfg.gate = g.kind;
            const ProblemInputs in = random_inputs(p, dtype, ++seed, with_state);
            const Tensor gate = gate_tensor(p, g);
            const StatePassOutput s = state_of(p, cfg, in, &gate);
            EXPECT_EQ(s.kind, StatePassKind::fused_tiles);
            const ForwardOutput f = gated_forward_of(p, cfg, in, gate);
            EXPECT_TRUE(same_bits(s.final_state, f.final_state));
            const InputValues values(in);
            const reference::Result ref = reference::gated_chunked(p, values.inputs(), reference_gate(g.kind, gate));
            EXPECT_LE(relative_l2(s.final_state.to_double(), ref.final_state), stored_level(dtype, s.final_state.dtype));
          }
}

// The forward kind with a gate: the gated forward itself (materialized here), its final state bitwise.
TEST(StatePass, GatedOtherPathsRunTheGatedForward) {
  const Problem p = problem(2, 70, 2, 16, 16);
  std::uint64_t seed = 7600;
  for (const testing::GateCase& g : testing::gate_cases(p, 7650)) {
    SCOPED_TRACE(g.name);
    ForwardConfig cfg;
    cfg.variant = Variant::materialized;
    cfg.gate = g.kind;
    const ProblemInputs in = random_inputs(p, DType::f32, ++seed, true);
    const Tensor gate = gate_tensor(p, g);
    const StatePassOutput s = state_of(p, cfg, in, &gate);
    EXPECT_EQ(s.kind, StatePassKind::forward);
    EXPECT_TRUE(same_bits(s.final_state, gated_forward_of(p, cfg, in, gate).final_state));
    const InputValues values(in);
    const reference::Result ref = reference::gated_chunked(p, values.inputs(), reference_gate(g.kind, gate));
    EXPECT_LE(relative_l2(s.final_state.to_double(), ref.final_state), stored_level(DType::f32, DType::f32));
  }
}

// Whatever build runs the test: plain batches on tensor cores get the
// tensor-core kind, gated or not (the gated segment sums); packed ones the forward.
TEST(StatePass, PlainBatchesGetTheTensorCoreKindGatedOrNot) {
  const Problem plain = problem(2, 640, 2, 64, 64);
  Problem packed = plain;
  packed.B = 1;
  packed.cu_seqlens = {0, 300, 640};
  ForwardConfig level1;
  EXPECT_EQ(state_pass_kind_on(GemmPath::tensor_core, plain, level1), StatePassKind::tensor_core);
  EXPECT_EQ(state_pass_kind_on(GemmPath::tensor_core, packed, level1), StatePassKind::forward);
  for (GateKind kind : {GateKind::per_head, GateKind::per_token}) {
    SCOPED_TRACE(gate_dataset_name(kind));
    ForwardConfig gated;
    gated.gate = kind;
    EXPECT_EQ(state_pass_kind_on(GemmPath::tensor_core, plain, gated), StatePassKind::tensor_core);
    EXPECT_EQ(state_pass_kind_on(GemmPath::tensor_core, packed, gated), StatePassKind::forward);
    EXPECT_EQ(state_pass_kind_on(GemmPath::host_tile, plain, gated), StatePassKind::fused_tiles);
    EXPECT_EQ(state_pass_kind_on(GemmPath::kokkos_kernels, packed, gated), StatePassKind::fused_tiles);
    EXPECT_EQ(state_pass_kind_on(GemmPath::registers, plain, gated), StatePassKind::forward);
    // On this build's own choice, too (chunk 16: never tensor cores).
    EXPECT_NE(state_pass_kind(plain, gated, DType::bf16), StatePassKind::tensor_core);
  }
  ForwardConfig channel;  // GLA's gk: the tensor-core state pass does not run gk's prep, so the forward kind
  channel.gate = GateKind::per_channel;
  EXPECT_EQ(state_pass_kind_on(GemmPath::tensor_core, plain, channel), StatePassKind::forward);
  EXPECT_EQ(state_pass_kind_on(GemmPath::tensor_core, packed, channel), StatePassKind::forward);
  EXPECT_EQ(state_pass_kind_on(GemmPath::host_tile, plain, channel), StatePassKind::fused_tiles);
}

TEST(StatePass, OtherPathsRunTheForwardItself) {
  const Problem p = problem(2, 70, 2, 16, 16);
  std::uint64_t seed = 7200;
  ForwardConfig normalized;
  normalized.normalize = true;
  ForwardConfig materialized;
  materialized.variant = Variant::materialized;
  for (const ForwardConfig& cfg : {normalized, materialized}) {
    SCOPED_TRACE(cfg.normalize ? "normalize" : "materialized");
    const ProblemInputs in = random_inputs(p, DType::f32, ++seed, true, cfg.normalize, cfg.normalize);
    const StatePassOutput s = state_of(p, cfg, in);
    if (!(host_backend() == false && cfg.normalize)) EXPECT_EQ(s.kind, StatePassKind::forward);
    const ForwardOutput f = testing::run_inputs(p, cfg, in);
    if (s.kind == StatePassKind::forward) {
      EXPECT_TRUE(same_bits(s.final_state, f.final_state));
      EXPECT_TRUE(same_bits(s.z_state, f.z_state));
    }
  }
}

TEST(StatePass, CostsAreFractionsOfTheForward) {
  Problem p = problem(1, 1 << 20, 16, 128, 128);  // arithmetic only: the final state is negligible
  p.chunk = 64;
  ForwardConfig bf16_h;
  bf16_h.snapshots = SnapshotMode::bf16;
  ForwardConfig fp32_h;
  ForwardConfig no_h;
  no_h.snapshots = SnapshotMode::none;
  EXPECT_EQ(state_pass_cost(StatePassKind::forward, p, bf16_h, DType::bf16), 1.0);
  EXPECT_EQ(state_pass_cost(StatePassKind::fused_tiles, p, bf16_h, DType::bf16), 0.25);
  // Tensor cores: k and v against q, k, v, o and h, per token and head 512 bytes against 1536 (bf16 h),
  // 2048 (fp32 h) or 1024 (no h); times 0.78.
  EXPECT_NEAR(state_pass_cost(StatePassKind::tensor_core, p, bf16_h, DType::bf16), 0.78 / 3, 1e-3);
  EXPECT_NEAR(state_pass_cost(StatePassKind::tensor_core, p, fp32_h, DType::bf16), 0.78 / 4, 1e-3);
  EXPECT_NEAR(state_pass_cost(StatePassKind::tensor_core, p, no_h, DType::bf16), 0.78 / 2, 1e-3);
}

TEST(StatePass, RefusesWhatTheForwardRefuses) {
  const Problem p = problem(1, 32, 1, 16, 16);
  const ProblemInputs in = random_inputs(p, DType::f32, 7300, false);
  ForwardConfig cfg;
  cfg.gemm = GemmPath::tensor_core;  // fp32 inputs never run on tensor cores
  EXPECT_THROW(state_of(p, cfg, in), std::invalid_argument);
  cfg.gemm = GemmPath::automatic;
  EXPECT_THROW(run_state_pass(p, cfg, in.k, in.q, nullptr, &in.k), std::invalid_argument);  // z0 without normalize
  // The gate's checks are the forward's: missing, of the wrong shape, positive, or given without config.gate.
  const Tensor g_gamma = Tensor::from_double(DType::f32, {1}, {-0.25});
  const Tensor positive = Tensor::from_double(DType::f32, {1}, {0.25});
  const Tensor wrong_shape = Tensor::from_double(DType::f32, {2}, {-0.25, -0.5});
  EXPECT_THROW(state_of(p, cfg, in, &g_gamma), std::invalid_argument);
  cfg.gate = GateKind::per_head;
  EXPECT_THROW(state_of(p, cfg, in), std::invalid_argument);
  EXPECT_THROW(state_of(p, cfg, in, &positive), std::invalid_argument);
  EXPECT_THROW(state_of(p, cfg, in, &wrong_shape), std::invalid_argument);
  cfg.normalize = true;  // fla has no normalized gated mode
  EXPECT_THROW(state_of(p, cfg, in, &g_gamma), std::invalid_argument);
}

#if defined(KOKKOS_ENABLE_CUDA)
constexpr bool kHaveTensorCores = true;
#else
constexpr bool kHaveTensorCores = false;
#endif

// On tensor cores: the segment sums added in order, against the fp64
// reference and against the forward's own final state (which adds its
// segments differently: the fp32 level, not bitwise).
// The tensor-core state pass's problems (chunk 64): exact tiles, then heads
// padded on chip (tile_rules.hpp): DK 100 in the 128 tile with DV 60
// (element-wise copies), DK 192 in the 256 tile.
std::vector<Problem> tensor_core_problems() {
  std::vector<Problem> ps = {problem(2, 1000, 3, 128, 96), problem(1, 4100, 2, 64, 128), problem(2, 700, 2, 100, 60),
                             problem(1, 900, 2, 192, 80)};
  for (Problem& p : ps) p.chunk = 64;
  return ps;
}

TEST(StatePass, TensorCoresMatchTheReferenceOnGpu) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernels are not built";
  std::uint64_t seed = 7400;
  for (const Problem& p : tensor_core_problems())
    for (DType dtype : {DType::bf16, DType::f16, DType::f32})
      for (bool normalize : {false, true}) {
        // fp32 heads past DK 128 run as two halves of their keys, without normalization (tile_rules.hpp)
        if (dtype == DType::f32 && p.DK > 128 && normalize) continue;
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " DK " + std::to_string(p.DK) + " DV " + std::to_string(p.DV) +
                     (normalize ? " normalize" : ""));
        ForwardConfig cfg;
        cfg.normalize = normalize;
        const ProblemInputs in = random_inputs(p, dtype, ++seed, true, normalize, normalize);
        const StatePassOutput s = state_of(p, cfg, in);
        EXPECT_EQ(s.kind, StatePassKind::tensor_core);
        const InputValues values(in);
        const reference::Result ref = reference::forward(p, values.inputs(), normalize);
        EXPECT_LE(relative_l2(s.final_state.to_double(), ref.final_state), stored_level(dtype, DType::f32));
        const ForwardOutput f = testing::run_inputs(p, cfg, in);
        EXPECT_LE(relative_l2(s.final_state.to_double(), f.final_state.to_double()), stored_level(dtype, DType::f32));
        if (normalize) {
          EXPECT_LE(relative_l2(s.z_state.to_double(), ref.z_state), stored_level(dtype, DType::f32));
          EXPECT_LE(relative_l2(s.z_state.to_double(), f.z_state.to_double()), stored_level(dtype, DType::f32));
        }
      }
}

// Gated on tensor cores: each segment's own decayed state and its decay,
// composed as S = exp(G_j) S + sum_j, against the fp64 gated reference and
// the gated forward's final state (the fp32 level: the forward walks whole
// sequences). Weak decays and RetNet's gammas carry the state across the
// segments, so a decay the composition dropped would fail at every level
// (on the H200 choose_state_pass_segments cuts each row here into 11 to 65 segments).
TEST(StatePass, GatedTensorCoresMatchTheReferenceOnGpu) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernels are not built";
  std::uint64_t seed = 7500;
  for (const Problem& p : tensor_core_problems())
    for (const testing::GateCase& g : testing::gate_cases(p, seed + 50))
      for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
        SCOPED_TRACE(g.name + " " + dtype_name(dtype) + " DK " + std::to_string(p.DK) + " DV " + std::to_string(p.DV));
        ForwardConfig cfg;
        cfg.gate = g.kind;
        const ProblemInputs in = random_inputs(p, dtype, ++seed, true);
        const Tensor gate = gate_tensor(p, g);
        const StatePassOutput s = state_of(p, cfg, in, &gate);
        EXPECT_EQ(s.kind, StatePassKind::tensor_core);
        const InputValues values(in);
        const reference::Result ref = reference::gated_chunked(p, values.inputs(), reference_gate(g.kind, gate));
        EXPECT_LE(relative_l2(s.final_state.to_double(), ref.final_state), stored_level(dtype, DType::f32));
        const ForwardOutput f = gated_forward_of(p, cfg, in, gate);
        EXPECT_LE(relative_l2(s.final_state.to_double(), f.final_state.to_double()), stored_level(dtype, DType::f32));
      }
}

}  // namespace
}  // namespace linattn
