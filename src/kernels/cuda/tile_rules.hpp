// How the tensor-core kernels lay a head's DK x DV state out in tiles on chip:
// the DK tile (DK zero-padded to 64, 128 or 256 in shared memory and
// registers, never in device memory) and the widest block of DV columns a
// DK tile allows. Plain integer arithmetic without CUDA, so that the CPU
// build tests every rule (tests/test_tile_rules.cpp).
#pragma once

#include <cstdint>

// The kernels ask these rules too (rows_in_16_bytes): host and device functions under nvcc.
#if defined(__CUDACC__)
#define LINATTN_TILE_RULE __host__ __device__ inline
#else
#define LINATTN_TILE_RULE inline
#endif

namespace linattn::cuda {

// The head sizes the tensor-core forward runs (docs/ARCHITECTURE.md, "Head sizes on tensor cores").
constexpr int kMaxTensorCoreDK = 256, kMaxTensorCoreDV = 512;

// The DK tile of a head of DK keys: the smallest of 64, 128 and 256 that holds
// it (0 past 256). Rows past DK are zero in every tile, so their state stays
// zero and adds nothing to Q S or Q K^T.
LINATTN_TILE_RULE int dk_tile(int DK) { return DK < 1 ? 0 : DK <= 64 ? 64 : DK <= 128 ? 128 : DK <= 256 ? 256 : 0; }

// The widest block of DV columns a DK tile allows. Each warp holds DK tile / 4
// state rows of its 32 columns twice over (the state and the chunk's K^T V):
// with a 256-row tile that is 128 registers, so one group of 4 warps (32
// columns) per block, where the launch bounds leave 255 registers a thread;
// and the double-buffered 256-wide Q and K tiles alone take 135 KB of shared memory.
LINATTN_TILE_RULE int max_block_dv(int dkt) { return dkt == 256 ? 32 : 128; }

// DV as the blocks see it: rounded up to whole groups of 32 columns (the
// columns past DV are zero on chip and never stored).
LINATTN_TILE_RULE int padded_dv(int DV) { return (DV + 31) / 32 * 32; }

// The widest block (128, 64 or 32 columns, at most max_block_dv) whose
// blocks cover DV without more padding than groups of 32 need.
LINATTN_TILE_RULE int widest_block_dv(int DK, int DV) {
  const int cap = max_block_dv(dk_tile(DK)), dv = padded_dv(DV);
  if (cap >= 128 && dv % 128 == 0) return 128;
  if (cap >= 64 && dv % 64 == 0) return 64;
  return 32;
}

// Blocks of bv columns over DV.
LINATTN_TILE_RULE int dv_blocks(int DV, int bv) { return (DV + bv - 1) / bv; }

// True when the tiles hold the head exactly (DK is its tile, bv divides DV):
// the kernels then run without bounds checks (the exact instantiation).
LINATTN_TILE_RULE bool exact_tiles(int DK, int DV, int bv) { return DK == dk_tile(DK) && DV % bv == 0; }

// True when every row of q, k (DK elements) and v, o, h (DV elements) starts
// on 16 bytes of 16-bit elements: the kernels' 16-byte copies apply; otherwise
// padded tiles are loaded and stored element by element.
LINATTN_TILE_RULE bool rows_in_16_bytes(int DK, int DV) { return DK % 8 == 0 && DV % 8 == 0; }

// Block width: the widest of 128, 64, 32 that the DK tile allows, covers DV
// without more padding than groups of 32 need and still gives
// about a block per SM; wider blocks read each Q and K tile once for more DV
// columns, and the kernel is bound by that L2 traffic (measured with ncu).
LINATTN_TILE_RULE int choose_block_dv(int B, int H, int DK, int DV, int num_sms) {
  const int cap = max_block_dv(dk_tile(DK)), dv = padded_dv(DV);
  auto fills = [&](int w) { return w <= cap && dv % w == 0 && std::int64_t(B) * H * (dv / w) * 10 >= std::int64_t(num_sms) * 9; };
  if (fills(128)) return 128;
  if (fills(64)) return 64;
  return 32;
}

}  // namespace linattn::cuda
