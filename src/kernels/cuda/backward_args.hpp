// What the tensor-core backward's kernels read and write, and the work lists
// they walk (tensor_core_backward.hpp runs them).
#pragma once

#include <cstdint>

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
  // Set by run_tensor_core_backward: dh's padded rows and columns (DK and DV
  // where the tiles hold the head exactly; zero past DK, DV), the work lists.
  int dh_rows, dh_cols;
  const BackwardSequence* seqs;
  const BackwardChunk* chunks;
};

}  // namespace linattn::cuda
