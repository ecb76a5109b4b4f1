// What the tensor-core backward's kernels read and write, and the work lists
// they walk (tensor_core_backward.hpp runs them).
#pragma once

#include "kernels/cuda/mma_primitives.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace linattn::cuda {

// One sequence of the batch (plain batches: one per batch row).
struct BackwardSequence {
  std::int64_t token0;  // its first token in the [B * T] rows
  int length;           // its tokens
  int h_chunk0;         // its first chunk in h and dh
  int seq;              // its row of dht and dh0
};

// One chunk of one sequence.
struct BackwardChunk {
  std::int64_t token0;  // its first token
  int length;           // its tokens, 1..64
  int h_chunk;          // its row in h and dh
};

struct TensorCoreBackwardArgs {
  const void* q;     // [tokens, H, DK], element E
  const void* k;     // [tokens, H, DK]
  const void* v;     // [tokens, H, DV]
  const void* d_o;   // [tokens, H, DV]
  const void* h;     // [chunks, H, DK, DV], SnapT: the forward's snapshots
  const float* dht;  // [N, H, DK, DV] or null (zero)
  void* dh;          // [chunks, H, dh_rows, dh_cols], E: scratch, the gradient of the state after each chunk
  void* dq;          // [tokens, H, DK], E
  void* dk;
  void* dv;          // [tokens, H, DV], E
  float* dh0;        // [N, H, DK, DV]
  int H, DK, DV;
  float scale;
  // The gated levels (README.md "Gated levels"; gate_gradient.hpp): fp32
  // log-decays, g [tokens, H] or g_gamma [H] (both null: level 1); dg
  // [tokens, H] out. Set by run_tensor_core_backward: log2_decay [tokens, H],
  // each chunk's cumulative sums b of g times log2(e), row_decay exp(b);
  // dg_part [dg_parts, tokens, H], each column block's share of
  // q . dq - k . dk; state_part [dg_parts, chunks, H], its share of
  // <S_{c+1}, dS_{c+1}>, the state after each chunk dotted with its gradient.
  const float* g;
  const float* g_gamma;
  float* dg;
  float* log2_decay;
  float* row_decay;
  float* dg_part;
  float* state_part;
  int dg_parts;
  // GLA's per-key-channel gate (issue 28; channel_gate_gradient.hpp): gk
  // [tokens, H, DK] fp32 (null: no such gate); dg is then dgk [tokens, H, DK].
  // Set by run_tensor_core_backward: the operands of channel_gate_prep.hpp
  // (qg, kg in E, channel_decay [chunks, H, DK] exp(b_L)), scores [tokens, H,
  // 64] fp32 (A, then overwritten by dA = scale tril(dO V^T)), dq_state and
  // dk_state [tokens, H, DK] fp32 (scale dO h^T and V dh^T before their decays),
  // state_rows [chunks, H, DK] fp32 (sum over DV of h[c] dh[c] per key row).
  const float* gk;
  const void* qg;
  const void* kg;
  const float* channel_decay;
  float* scores;
  float* dq_state;
  float* dk_state;
  float* state_rows;
  int num_chunks;
  std::int64_t num_tokens;  // rows of q, k, v: B T
  // Set by run_tensor_core_backward: dh's padded rows and columns (DK and DV
  // where the tiles hold the head exactly; zero past DK, DV), the work lists.
  int dh_rows, dh_cols;
  const BackwardSequence* seqs;
  const BackwardChunk* chunks;
};

// The sequences and chunks of a plain batch (B rows of T tokens) or a packed
// one (cu_seqlens, B = 1): h's chunk rows in order, sequences longest first
// for the reverse walks (their time is the longest walk's).
struct BackwardWork {
  std::vector<BackwardSequence> seqs;
  std::vector<BackwardChunk> chunks;
};
inline BackwardWork backward_work(int B, std::int64_t T, const std::vector<std::int64_t>* cu_seqlens) {
  BackwardWork w;
  constexpr int C = detail::kChunk;
  auto add = [&](std::int64_t token0, std::int64_t length, int seq) {
    const int h_chunk0 = static_cast<int>(w.chunks.size());
    w.seqs.push_back({token0, static_cast<int>(length), h_chunk0, seq});
    for (std::int64_t t = 0; t < length; t += C)
      w.chunks.push_back({token0 + t, static_cast<int>(std::min<std::int64_t>(C, length - t)), static_cast<int>(w.chunks.size())});
  };
  if (cu_seqlens) {
    for (std::size_t n = 0; n + 1 < cu_seqlens->size(); ++n)
      add((*cu_seqlens)[n], (*cu_seqlens)[n + 1] - (*cu_seqlens)[n], static_cast<int>(n));
  } else {
    for (int b = 0; b < B; ++b) add(b * T, T, b);
  }
  std::stable_sort(w.seqs.begin(), w.seqs.end(),
                   [](const BackwardSequence& x, const BackwardSequence& y) { return x.length > y.length; });
  return w;
}

}  // namespace linattn::cuda
