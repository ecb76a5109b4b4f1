#include "pipeline/backward_window_plan.hpp"

#include "kernels/cuda/tile_rules.hpp"

#include <algorithm>
#include <string>

namespace linattn {
namespace {

// Bytes per token of one row, per chunk of one row and per sequence.
struct BackwardUnits {
  std::int64_t token = 0, chunk = 0, sequence = 0;
};

BackwardUnits units(const Problem& p, const BackwardStorage& s) {
  const std::int64_t in = static_cast<std::int64_t>(dtype_size(s.input));
  const std::int64_t out = static_cast<std::int64_t>(dtype_size(s.output));
  const std::int64_t acc = static_cast<std::int64_t>(dtype_size(s.accumulation));
  const std::int64_t state = p.H * p.DK * p.DV;
  BackwardUnits u;
  // q, k, v, do read and dq, dk, dv written, each on the host and in the kernels' buffers.
  u.token = 2 * p.H * ((2 * p.DK + 2 * p.DV) * in + (2 * p.DK + p.DV) * out);
  if (s.recompute_h) u.token += p.H * p.DV * acc;  // the recomputing forward's o
  // g read and dg written (gk and dgk: per key channel), on the host and the device
  if (s.gate != GateKind::none) u.token += 2 * 2 * p.H * (s.gate == GateKind::per_channel ? p.DK : 1) * acc;
  // h: read and uploaded, or recomputed in the kernels' buffers.
  u.chunk = s.recompute_h ? state * acc : 2 * state * static_cast<std::int64_t>(dtype_size(s.snapshot));
  // The tensor-core backward's scratch dh (the state gradient after each chunk, in the input
  // type, padded to its tiles: kernels/cuda/tile_rules.hpp), counted on every path.
  const int DK = static_cast<int>(p.DK), DV = static_cast<int>(p.DV);
  const bool fp32 = s.input == DType::f32;
  u.chunk += p.H * std::max<std::int64_t>(p.DK, cuda::gradient_rows(DK, DV, fp32)) *
             std::max<std::int64_t>(p.DV, cuda::gradient_cols(DK, DV, fp32)) * in;
  // GLA's gk on the tensor-core backward (kernels/cuda/tensor_core_backward.hpp), counted on
  // every path: the forward's decayed queries and keys (input type) and scores (64 fp32 a
  // token), the fp32 dO h^T and V dh^T per token; exp(b_L) and sum_v h dh per chunk (fp32).
  if (s.gate == GateKind::per_channel) {
    u.token += p.H * (2 * p.DK * in + 4 * (64 + 2 * p.DK));
    u.chunk += p.H * 2 * p.DK * 4;
  }
  // dht (read, converted, uploaded) and dh0 (computed, downloaded); with
  // recompute_h the start states likewise and the forward's final states.
  u.sequence = (s.recompute_h ? 9 : 5) * state * acc;
  return u;
}

std::int64_t bytes_of(const BackwardUnits& u, std::int64_t rows, std::int64_t tokens, std::int64_t chunks,
                      std::int64_t sequences) {
  return rows * (tokens * u.token + chunks * u.chunk) + sequences * u.sequence;
}

std::string mib(std::int64_t bytes) {
  if (bytes < (std::int64_t(1) << 20)) return std::to_string((bytes + 1023) >> 10) + " KiB";
  return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB";
}

[[noreturn]] void too_small(std::int64_t need, std::int64_t budget) {
  throw BudgetError("the memory budget is too small for this case's backward: one chunk of every sequence needs " +
                    mib(need) + ", a window may take " + mib(budget) + " (a third of the memory budget; raise --memory-budget)");
}

std::vector<Window> plan_plain(const Problem& p, const BackwardUnits& u, std::int64_t budget) {
  const std::int64_t NT = p.num_chunks();
  auto cost = [&](std::int64_t chunks) { return bytes_of(u, p.B, std::min(p.T, chunks * p.chunk), chunks, p.B); };
  if (cost(1) > budget) too_small(cost(1), budget);
  // cost grows linearly in whole chunks: the most that fit, by division.
  const std::int64_t per_chunk = p.B * (p.chunk * u.token + u.chunk);
  const std::int64_t chunks = std::clamp<std::int64_t>((budget - p.B * u.sequence) / per_chunk, 1, NT);
  return plain_windows(p, chunks);
}

std::vector<Window> plan_packed(const Problem& p, const BackwardUnits& u, std::int64_t budget) {
  const std::int64_t N = p.num_sequences();
  std::vector<Window> windows;
  Window w;  // the open window; empty while w.chunks == 0
  std::int64_t global_chunk = 0;
  for (std::int64_t n = 0; n < N; ++n) {
    const std::int64_t start = p.cu_seqlens[n], end = p.cu_seqlens[n + 1];
    for (std::int64_t t = start; t < end; t += p.chunk, ++global_chunk) {
      const std::int64_t t_next = std::min(end, t + p.chunk);
      // Close the open window when this chunk would not fit in it.
      if (w.chunks > 0 && bytes_of(u, 1, t_next - w.t0, w.chunks + 1, n + 1 - w.seq_begin) > budget) {
        windows.push_back(w);
        w = Window{};
      }
      if (w.chunks == 0) {
        w.t0 = t;
        w.seq_begin = n;
        w.continues = t > start;
        w.chunk0 = global_chunk;
      }
      w.seq_end = n + 1;
      w.t1 = t_next;
      w.chunks += 1;
      w.carries = t_next < end;
      const std::int64_t need = bytes_of(u, 1, w.tokens(), w.chunks, w.sequences());
      if (need > budget) too_small(need, budget);  // a chunk alone
    }
  }
  windows.push_back(w);
  return windows;
}

}  // namespace

std::int64_t backward_window_bytes(const Problem& p, const BackwardStorage& s, const Window& w) {
  const BackwardUnits u = units(p, s);
  return p.varlen() ? bytes_of(u, 1, w.tokens(), w.chunks, w.sequences()) : bytes_of(u, p.B, w.tokens(), w.chunks, p.B);
}

std::int64_t backward_window_limit(const Problem& p, const BackwardStorage& s, std::int64_t budget) {
  const BackwardUnits u = units(p, s);
  // A window of one chunk: of every row (plain), or of one sequence (packed).
  const std::int64_t one_chunk = p.varlen() ? bytes_of(u, 1, p.chunk, 1, 1) : bytes_of(u, p.B, std::min(p.T, p.chunk), 1, p.B);
  return std::min(budget / 3, std::max(kBackwardWindowCap, one_chunk));
}

std::int64_t backward_read_slot_bytes(std::int64_t window_limit) {
  const std::int64_t bytes = window_limit / 2 + 16 * 64;  // at most 8 blocks, each aligned to 64 bytes
  return (bytes + 4095) / 4096 * 4096;
}

std::vector<Window> plan_backward_windows(const Problem& p, const BackwardStorage& s, std::int64_t budget) {
  const Window whole = whole_case_window(p);
  if (backward_window_bytes(p, s, whole) <= budget) return {whole};
  const BackwardUnits u = units(p, s);
  return p.varlen() ? plan_packed(p, u, budget) : plan_plain(p, u, budget);
}

}  // namespace linattn
