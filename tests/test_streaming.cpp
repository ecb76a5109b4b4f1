// A case streamed in windows gives the bits of the whole case: run_batch (the
// code path of `linattn run`) with a memory budget so small that every case
// is cut into several windows, its outputs read back and compared byte for
// byte with run_forward on the whole tensors (the unbudgeted run). Every
// variant, plain and packed batches (windows cutting sequences in the
// middle), normalization with an initial key sum, an initial state, and a
// ragged last window. The pipeline's outputs are poisoned (NaN) before each
// window's kernels, so an element a window did not write cannot match.
#include "app/batch_run.hpp"
#include "core/random_tensor.hpp"
#include "io/input_file.hpp"
#include "io/output_file.hpp"
#include "temp_dir.hpp"

#include <Kokkos_Core.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <sstream>
#include <tuple>

namespace linattn {
namespace {

using testing::TempDir;

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.bytes == b.bytes;
}

// Index of the first element whose bits differ (for the failure message).
std::string first_difference(const Tensor& a, const Tensor& b) {
  if (a.shape != b.shape) return "shapes " + shape_string(a.shape) + " and " + shape_string(b.shape);
  for (std::int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(a.bytes.data() + i * dtype_size(a.dtype), b.bytes.data() + i * dtype_size(b.dtype),
                    dtype_size(a.dtype)) != 0)
      return "element " + std::to_string(i) + ": " + std::to_string(a.get(i)) + " vs " + std::to_string(b.get(i));
  return "none";
}

struct Streamed {
  CaseResult result;
  OutputData output;
  std::string report;  // what run_batch printed
};

Streamed stream_case(const TempDir& dir, const std::string& name, const CaseData& data, std::int64_t chunk,
                     const ForwardConfig& forward, std::int64_t budget, std::int64_t device_window_parts = 0,
                     int writers = 1) {
  const std::string input = dir / (name + ".h5");
  write_input_file(input, {{"", data}});
  RunOptions opt;
  opt.inputs = {input};
  opt.outdir = dir / ("out-" + name);
  opt.forward = forward;
  opt.forward.poison_outputs = true;
  opt.chunk = chunk;
  opt.scale = 0.5;
  opt.memory_budget = budget;
  opt.device_window_parts = device_window_parts;
  opt.writers = writers;
  opt.durable = false;
  std::ostringstream progress, errors;
  const std::vector<CaseResult> results = run_batch(opt, progress, errors);
  EXPECT_EQ(results.size(), 1u);
  Streamed s;
  s.result = results.at(0);
  s.report = progress.str() + errors.str();
  EXPECT_TRUE(s.result.ok) << s.result.error << errors.str();
  if (s.result.ok) s.output = read_output_file(output_path(opt.outdir, input, ""));
  return s;
}

void expect_same_as_whole(const CaseData& data, const Streamed& s, std::int64_t chunk, const ForwardConfig& forward) {
  const std::vector<std::int64_t>* s0 = data.initial_state.empty() ? nullptr : &data.initial_state.shape;
  const Problem p = problem_from_shapes(data.q.shape, data.k.shape, data.v.shape, chunk, 0.5, s0, data.cu_seqlens);
  ForwardConfig whole = forward;
  whole.segments = 1;
  whole.poison_outputs = true;
  whole.gate = data.gate;
  const ForwardOutput ref = run_forward(p, whole, data.q, data.k, data.v, data.initial_state.empty() ? nullptr : &data.initial_state,
                                        data.initial_z.empty() ? nullptr : &data.initial_z,
                                        data.gate == GateKind::none ? nullptr : &data.log_decay);
  EXPECT_TRUE(same_bits(s.output.o, ref.o)) << "o differs at " << first_difference(s.output.o, ref.o);
  EXPECT_TRUE(same_bits(s.output.h, ref.h)) << "h differs at " << first_difference(s.output.h, ref.h);
  EXPECT_TRUE(same_bits(s.output.final_state, ref.final_state))
      << "final_state differs at " << first_difference(s.output.final_state, ref.final_state);
  EXPECT_TRUE(same_bits(s.output.z_state, ref.z_state))
      << "z_state differs at " << first_difference(s.output.z_state, ref.z_state);
}

CaseData case_data(const Problem& p, DType dtype, std::uint64_t seed, bool initial, bool normalize) {
  const ProblemInputs in = random_inputs(p, dtype, seed, initial, normalize, normalize && initial);
  return CaseData{in.q, in.k, in.v, in.initial_state, p.cu_seqlens, in.initial_z};
}

// A budget of 8 shares of 48 KiB (src/pipeline/memory_budget.hpp: 3 input +
// 3 output slots, one share for the libraries, and one for the kernels'
// buffers on host backends).
constexpr std::int64_t kTinyBudget = 8 * 48 * 1024;

class StreamingMatchesWhole : public ::testing::TestWithParam<std::tuple<Variant, bool>> {};

TEST_P(StreamingMatchesWhole, PlainBatch) {
  const auto [variant, normalize] = GetParam();
  TempDir dir("streaming-plain");
  Problem p;
  p.B = 2; p.T = 300; p.H = 2; p.DK = 16; p.DV = 24; p.chunk = 16;  // 300 = 18 chunks + 12: a ragged end
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (bool initial : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (initial ? ", initial state" : ""));
      const CaseData data = case_data(p, dtype, 7 + initial, initial, normalize);
      ForwardConfig cfg;
      cfg.variant = variant;
      cfg.normalize = normalize;
      cfg.snapshots = initial ? SnapshotMode::bf16 : SnapshotMode::accumulation;
      const Streamed s = stream_case(dir, std::string("p") + dtype_name(dtype) + (initial ? "i" : ""), data, 16, cfg,
                                     kTinyBudget);
      ASSERT_TRUE(s.result.ok);
      EXPECT_GE(s.result.windows, 4) << "the budget should cut the case into several windows";
      expect_same_as_whole(data, s, 16, cfg);
    }
  }
}

TEST_P(StreamingMatchesWhole, PackedBatchCutInsideSequences) {
  const auto [variant, normalize] = GetParam();
  TempDir dir("streaming-packed");
  Problem p;
  p.B = 1; p.H = 2; p.DK = 16; p.DV = 16; p.chunk = 16;
  p.cu_seqlens = {0, 1, 64, 128, 193, 233, 250, 380, 500};  // lengths 1, 63, 64, 65, 40, 17, 130, 120
  p.T = p.cu_seqlens.back();
  for (bool initial : {false, true}) {
    SCOPED_TRACE(initial ? "initial state and z per sequence" : "no initial state");
    const CaseData data = case_data(p, DType::f32, 11 + initial, initial, normalize);
    ForwardConfig cfg;
    cfg.variant = variant;
    cfg.normalize = normalize;
    cfg.output_fp32 = true;
    const Streamed s = stream_case(dir, initial ? "packed-i" : "packed", data, 16, cfg, kTinyBudget);
    ASSERT_TRUE(s.result.ok);
    EXPECT_GE(s.result.windows, 4);
    expect_same_as_whole(data, s, 16, cfg);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryVariant, StreamingMatchesWhole,
                         ::testing::Combine(::testing::Values(Variant::fused, Variant::materialized, Variant::recompute,
                                                              Variant::recurrent),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<Variant, bool>>& info) {
                           return std::string(variant_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_normalize" : "");
                         });

// The shape the tensor-core kernel takes (fused, 16-bit inputs, chunk 64,
// DK 64): on CUDA builds the windows run on it, and must give the whole
// case's bits too; host builds run the same check on their own kernels.
TEST(Streaming, TensorCoreShapeMatchesWhole) {
  TempDir dir("streaming-tensor-core");
  Problem p;
  p.B = 2; p.T = 9 * 64 + 17; p.H = 2; p.DK = 64; p.DV = 64; p.chunk = 64;  // a ragged last chunk
  auto expect_streamed_bits = [&](const std::string& name, const CaseData& data, const ForwardConfig& cfg,
                                  std::int64_t budget = 8 * 320 * 1024) {
    const Streamed s = stream_case(dir, name, data, 64, cfg, budget);
    ASSERT_TRUE(s.result.ok);
    EXPECT_GE(s.result.windows, 3) << "the budget should cut the case into several windows";
#if defined(KOKKOS_ENABLE_CUDA)
    EXPECT_EQ(s.result.tile_path, "tensorcore");
#endif
    expect_same_as_whole(data, s, 64, cfg);
  };
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (bool initial : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (initial ? ", initial state" : ""));
      ForwardConfig cfg;
      cfg.snapshots = initial ? SnapshotMode::bf16 : SnapshotMode::accumulation;
      expect_streamed_bits(std::string("tc") + dtype_name(dtype) + (initial ? "i" : ""),
                           case_data(p, dtype, 23 + initial, initial, false), cfg);
    }
  }
  // GLA's gk there too (on CUDA builds the tensor-core forward with its
  // per-chunk prepared operands): windows of whole chunks give the same bits.
  for (DType dtype : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(std::string("gk ") + dtype_name(dtype));
    CaseData data = case_data(p, dtype, 29, true, false);
    data.gate = GateKind::per_channel;
    data.log_decay = random_tensor(DType::f32, gate_shape(p, GateKind::per_channel), 97, -0.7, 0.0);
    ForwardConfig cfg;
    cfg.snapshots = SnapshotMode::bf16;
    // fp32 tokens and gk rows take twice the 16-bit case's budget for as many windows
    expect_streamed_bits(std::string("tcgk") + dtype_name(dtype), data, cfg,
                         (dtype == DType::f32 ? 16 : 8) * 320 * 1024);
  }
}

// A plain batch (a ragged last window) and a packed one of lengths 1, 63, 64,
// 65, 40, 17, 130, 120, both cut by kTinyBudget into several windows.
std::vector<Problem> plain_and_packed() {
  Problem plain;
  plain.B = 2; plain.T = 300; plain.H = 2; plain.DK = 16; plain.DV = 24; plain.chunk = 16;
  Problem packed = plain;
  packed.B = 1;
  packed.cu_seqlens = {0, 1, 64, 128, 193, 233, 250, 380, 500};
  packed.T = packed.cu_seqlens.back();
  return {plain, packed};
}

// Gated cases (g_gamma, g, gk) streamed in windows: the decays restart at every
// chunk and the carried state needs nothing new, so the windows give the
// whole case's bits; the record names the gate, and the level-1 result of the
// same inputs differs (the gate was read, not ignored).
TEST(Streaming, GatedCasesMatchWhole) {
  TempDir dir("streaming-gated");
  int n = 0;
  for (const Problem& p : plain_and_packed())
    for (GateKind gate : {GateKind::per_head, GateKind::per_token, GateKind::per_channel})
      for (Variant variant : {Variant::fused, Variant::materialized, Variant::recompute, Variant::recurrent}) {
        const DType dtype = p.varlen() ? DType::f32 : DType::bf16;
        SCOPED_TRACE(std::string(p.varlen() ? "packed " : "plain ") + gate_dataset_name(gate) + " " +
                     variant_name(variant));
        CaseData data = case_data(p, dtype, 40 + n, n % 2 == 0, false);
        data.gate = gate;
        data.log_decay = random_tensor(DType::f32, gate_shape(p, gate), 90 + n, -0.7, 0.0);
        ForwardConfig cfg;
        cfg.variant = variant;
        const Streamed s = stream_case(dir, "gated" + std::to_string(n++), data, 16, cfg, kTinyBudget);
        ASSERT_TRUE(s.result.ok);
        EXPECT_GE(s.result.windows, 4);
        EXPECT_EQ(s.output.record.gate, gate_dataset_name(gate));
        expect_same_as_whole(data, s, 16, cfg);
        const std::vector<std::int64_t>* s0 = data.initial_state.empty() ? nullptr : &data.initial_state.shape;
        const Problem whole = problem_from_shapes(data.q.shape, data.k.shape, data.v.shape, 16, 0.5, s0, data.cu_seqlens);
        const ForwardOutput ungated = run_forward(whole, cfg, data.q, data.k, data.v, s0 ? &data.initial_state : nullptr);
        EXPECT_FALSE(same_bits(s.output.o, ungated.o)) << "the gate made no difference";
      }
}

// A packed case's windows gathered into device windows of up to 3 of them
// (pipeline/window_groups.hpp; on host backends only when asked, as here):
// uploaded part by part, computed in one launch, downloaded part by part, with
// the whole case's bits. Initial states and key sums of sequences that start
// in any part, the state carried between device windows, every gate.
TEST(Streaming, DeviceWindowsMatchWhole) {
  TempDir dir("streaming-device-windows");
  Problem p;
  p.B = 1; p.H = 2; p.DK = 16; p.DV = 24; p.chunk = 16;
  p.cu_seqlens = {0, 1, 64, 128, 193, 233, 250, 380, 500, 530, 700, 703};
  p.T = p.cu_seqlens.back();
  int n = 0;
  for (GateKind gate : {GateKind::none, GateKind::per_head, GateKind::per_token, GateKind::per_channel})
    for (DType dtype : {DType::f32, DType::bf16}) {
      const bool normalize = gate == GateKind::none && dtype == DType::f32;
      SCOPED_TRACE(std::string(gate_dataset_name(gate)) + " " + dtype_name(dtype) + (normalize ? " normalized" : ""));
      CaseData data = case_data(p, dtype, 60 + n, true, normalize);
      data.gate = gate;
      if (gate != GateKind::none) data.log_decay = random_tensor(DType::f32, gate_shape(p, gate), 70 + n, -0.7, 0.0);
      ForwardConfig cfg;
      cfg.normalize = normalize;
      cfg.snapshots = n % 2 ? SnapshotMode::bf16 : SnapshotMode::accumulation;
      const Streamed s = stream_case(dir, "dw" + std::to_string(n++), data, 16, cfg, kTinyBudget, 3);
      ASSERT_TRUE(s.result.ok);
      EXPECT_GE(s.result.windows, 4);
      EXPECT_LT(s.result.device_windows, s.result.windows) << "no windows were gathered";
      EXPECT_GT(s.result.device_windows, 1) << "one device window carries no state to the next";
      expect_same_as_whole(data, s, 16, cfg);
    }
}

// Several writers (pipeline/mapped_output.hpp): each output file mapped and
// every window's runs copied in by threads at once, in pieces, instead of
// HDF5's one writer: the whole case's bits, plain (a ragged last window) and
// packed, normalized with key sums, snapshots or none, both output types.
TEST(Streaming, MappedWritersMatchWhole) {
  TempDir dir("streaming-writers");
  int n = 0;
  for (const Problem& p : plain_and_packed())
    for (int writers : {2, 3}) {
      const bool normalize = writers == 3;
      SCOPED_TRACE(std::string(p.varlen() ? "packed, " : "plain, ") + std::to_string(writers) + " writers" +
                   (normalize ? ", normalized" : ""));
      const CaseData data = case_data(p, n % 2 ? DType::bf16 : DType::f32, 80 + n, true, normalize);
      ForwardConfig cfg;
      cfg.normalize = normalize;
      cfg.snapshots = n == 1 ? SnapshotMode::none : n == 2 ? SnapshotMode::bf16 : SnapshotMode::accumulation;
      cfg.output_fp32 = n == 3;
      const Streamed s = stream_case(dir, "w" + std::to_string(n++), data, 16, cfg, kTinyBudget, 0, writers);
      ASSERT_TRUE(s.result.ok);
      EXPECT_GE(s.result.windows, 4);
      EXPECT_NE(s.report.find("(" + std::to_string(writers) + " threads, 1 file mapped)"), std::string::npos)
          << s.report;
      expect_same_as_whole(data, s, 16, cfg);
    }
}

// A budget too small for one chunk of every sequence fails the case with the
// sizes, before anything is written.
TEST(Streaming, BudgetBelowOneChunkIsAClearError) {
  TempDir dir("streaming-small");
  Problem p;
  p.B = 4; p.T = 64; p.H = 4; p.DK = 64; p.DV = 64; p.chunk = 16;
  const CaseData data = case_data(p, DType::f32, 3, false, false);
  const std::string input = dir / "big.h5";
  write_input_file(input, {{"", data}});
  RunOptions opt;
  opt.inputs = {input};
  opt.outdir = dir / "out";
  opt.chunk = 16;
  opt.memory_budget = 7 * 4096 * 2;
  std::ostringstream progress, errors;
  const std::vector<CaseResult> results = run_batch(opt, progress, errors);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].ok);
  EXPECT_NE(results[0].error.find("the memory budget is too small for this case"), std::string::npos) << results[0].error;
  EXPECT_FALSE(std::filesystem::exists(output_path(opt.outdir, input, "")));
  EXPECT_FALSE(std::filesystem::exists(output_path(opt.outdir, input, "") + ".partial"));
}

}  // namespace
}  // namespace linattn
