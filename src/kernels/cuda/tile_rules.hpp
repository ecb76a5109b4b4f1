// How the tensor-core kernels lay a head's DK x DV state out in tiles on chip:
// the DK tile (DK zero-padded to 64, 128 or 256 in shared memory and
// registers, never in device memory) and the widest block of DV columns a
// DK tile allows. Plain integer arithmetic without CUDA, so that the CPU
// build tests every rule (tests/test_tile_rules.cpp).
#pragma once

#include <cstdint>

// The kernels ask these rules too (row_copy_bytes): host and device functions under nvcc.
#if defined(__CUDACC__)
#define LINATTN_TILE_RULE __host__ __device__ constexpr inline
#else
#define LINATTN_TILE_RULE constexpr inline
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
// with a 256-row tile that is 128 registers, so blocks of at most two groups
// of 4 warps (256 threads, 255 registers each). Its double-buffered Q and K
// tiles take 135 KB of shared memory: two groups (64 columns) fit beside them
// only when the block keeps one 16-bit copy of the state (one_state_tile:
// 16-bit o, snapshots in the input type or fp32), else one group (32).
// fp32 inputs keep fp32 tiles (twice the bytes, one fp32 copy of the state):
// blocks of 128 fit beside a 64-row DK tile (217 KiB of 227), of 64 beside a
// 128-row one once its groups keep their own scores instead of sharing them
// (217 KiB; shared, 234), and a 256-row tile's double-buffered Q and K alone
// (260 KiB) do not fit: 0, no block.
LINATTN_TILE_RULE int max_block_dv(int dkt, bool one_state_tile, bool fp32_inputs = false) {
  if (fp32_inputs) return dkt == 64 ? 128 : dkt == 128 ? 64 : 0;
  return dkt == 256 ? (one_state_tile ? 64 : 32) : 128;
}

// fp32 heads past the 128-row DK tile (whose fp32 tiles do not fit, above)
// run as two heads of DK / 2 keys each over the same values, their outputs
// summed: o = scale (Q S + tril(Q K^T) V) is a sum over the key channels, and
// h, the states and gk of a head of DK keys are, in memory, those of two
// heads of DK / 2 (fused_tensor_core.hpp, run_fp32_key_halves). The heads
// the kernels take whole give 1; 2 for an even DK in 130..256; 0 (none) for
// an odd one, which cannot be cut into two equal halves.
LINATTN_TILE_RULE int fp32_key_parts(int DK) { return DK <= 128 ? 1 : DK <= 256 && DK % 2 == 0 ? 2 : 0; }

// DV as the blocks see it: rounded up to whole groups of 32 columns (the
// columns past DV are zero on chip and never stored).
LINATTN_TILE_RULE int padded_dv(int DV) { return (DV + 31) / 32 * 32; }

// Blocks of bv columns over DV.
LINATTN_TILE_RULE int dv_blocks(int DV, int bv) { return (DV + bv - 1) / bv; }

// True when blocks of w columns cover DV with at most a third of their
// columns padding (or with no more than groups of 32 need anyway): a wider
// block reads each Q and K tile once for all its columns, which paid more than
// the padded columns cost (H200, 8,8192,16,96: blocks of 128 0.554 ms, of 64
// 0.960, of 32 1.097; 8,8192,16,60: 64 0.312 ms, 32 0.533).
LINATTN_TILE_RULE bool covers_dv(int DV, int w) {
  const int cols = dv_blocks(DV, w) * w;
  return cols == padded_dv(DV) || 2 * cols <= 3 * DV;
}

// The widest block (128, 64 or 32 columns, at most cap) that covers DV
// (covers_dv); widest_block_dv: within the DK tile's limit without a state
// tile, the block of the segment sums (which keep none) and of split
// sequences (which, with fp32 inputs, take their own limit instead).
LINATTN_TILE_RULE int widest_block_within(int DV, int cap) {
  if (cap >= 128 && covers_dv(DV, 128)) return 128;
  if (cap >= 64 && covers_dv(DV, 64)) return 64;
  return 32;
}
LINATTN_TILE_RULE int widest_block_dv(int DK, int DV) { return widest_block_within(DV, max_block_dv(dk_tile(DK), false)); }

// The steps of 16 (rows, columns or the k of a product) that a padded head's
// `size` rows or columns occupy in its tile: the tiles are zero past them, so
// the padded backward kernels skip the products of the steps past these
// (BENCHMARKS.md, "Every head size on tensor cores (backward)"). Negative
// sizes (a warp or group wholly past the head) have none.
LINATTN_TILE_RULE int live_steps(int size) { return size <= 0 ? 0 : (size + 15) / 16; }

// True when the tiles hold the head exactly (DK is its tile, bv divides DV):
// the kernels then run without bounds checks (the exact instantiation).
LINATTN_TILE_RULE bool exact_tiles(int DK, int DV, int bv) { return DK == dk_tile(DK) && DV % bv == 0; }

// The widest copy (16, 8, 4 or 2 bytes) at which every row of q, k (DK
// elements of elem_bytes) and of v, o, h (DV elements) starts on a whole copy:
// the padded kernels move their tiles in copies of this size (asynchronous
// ones for the loads), so 16-bit DK 60 moves in 8-byte pieces, not element by
// element. fp32 rows take at least 4-byte copies.
LINATTN_TILE_RULE int row_copy_bytes(int DK, int DV, int elem_bytes = 2) {
  const int a = DK * elem_bytes, b = DV * elem_bytes;
  if (a % 16 == 0 && b % 16 == 0) return 16;
  if (a % 8 == 0 && b % 8 == 0) return 8;
  if (a % 4 == 0 && b % 4 == 0) return 4;
  return 2;
}

// Block width: the widest of 128, 64, 32 that the DK tile allows, covers DV
// (covers_dv) and still gives about a block per SM; wider blocks read each Q
// and K tile once for more DV columns, and the kernel is bound by that L2
// traffic (measured with ncu).
LINATTN_TILE_RULE int choose_block_dv(int B, int H, int DK, int DV, int num_sms, bool one_state_tile,
                                      bool fp32_inputs = false) {
  const int cap = max_block_dv(dk_tile(DK), one_state_tile, fp32_inputs);
  auto fills = [&](int w) {
    return w <= cap && covers_dv(DV, w) && std::int64_t(B) * H * dv_blocks(DV, w) * 10 >= std::int64_t(num_sms) * 9;
  };
  if (fills(128)) return 128;
  if (fills(64)) return 64;
  return 32;
}

// ---- The backward's tiles (tensor_core_backward.hpp)

// The tile of one side of the whole-head chunk-gradient kernel (chunk_gradient.hpp):
// 64 or 128 rows, zero past the head's size on chip.
LINATTN_TILE_RULE int whole_head_tile(int D) { return D <= 64 ? 64 : 128; }

// True when the chunk-gradient kernel that holds a whole head in shared
// memory runs (chunk_gradient.hpp: 16-bit inputs, DK and DV up to 128, each
// zero-padded on chip to whole_head_tile); every other head, and every fp32
// one (whose fp32 tiles of a whole head would not fit), takes 64 x 64 tiles
// (chunk_gradient_tiled.hpp). One block per (chunk, head) reads each tile
// once, where the tiled kernels read dO and V once per DK block and Q and K
// once per DV block and compute the scores in each.
LINATTN_TILE_RULE bool whole_head_gradient(int DK, int DV, bool fp32_inputs = false) {
  return !fp32_inputs && DK >= 1 && DK <= 128 && DV >= 1 && DV <= 128;
}

// dh's rows and columns (the backward's scratch, the gradient of the state
// after each chunk): DK and DV rounded up to 16 (zero past DK and DV), so
// that its rows are whole 16-byte copies and the 16-column steps of the
// products need no checks; the chunk kernels zero-fill their tiles past them.
// Not the whole-head kernel's tiles: the reverse walks would then compute the
// padded columns too (H200, 8,8192,16,32: 185 us against 112 at 32 columns).
// The memory budget counts the same.
LINATTN_TILE_RULE int gradient_rows(int DK, int DV, bool fp32_inputs = false) {
  return (void)DV, (void)fp32_inputs, (DK + 15) / 16 * 16;
}
LINATTN_TILE_RULE int gradient_cols(int DK, int DV, bool fp32_inputs = false) {
  return (void)DK, (void)fp32_inputs, (DV + 15) / 16 * 16;
}

// DV block of the reverse walks (state_gradient.hpp) over `cols` columns of
// dh: registers cap it at 64 for a DK tile of 64 and at 32 above (each warp
// holds DK tile / 4 rows of dS and of the chunk's Q^T dO: 128 registers at
// 256 x 32); narrower while the walks would not give about two blocks per SM.
// A 256-row tile keeps 32 while its blocks still fill about one wave: each
// block reads the chunk's whole 64 x 256 Q tile, so half the blocks read half
// the bytes from L2 (H100, level-1 backward, blocks of 32 against 16:
// 2,8192,8,256,512 (256 blocks) 1.77 ms against 2.01, 4,8192,16,256 (512)
// 3.79 against 4.18, 2,4096,8,256 (128) 0.515 against 0.555; BENCHMARKS.md).
LINATTN_TILE_RULE int state_gradient_block(int DK, int cols, std::int64_t walks, int num_sms) {
  const int dkt = dk_tile(DK);
  if (dkt == 256) return cols % 32 == 0 && walks * (cols / 32) * 10 >= std::int64_t(num_sms) * 9 ? 32 : 16;
  int bv = dkt == 64 ? 64 : 32;
  while (bv > 16 && (cols % bv != 0 || walks * (cols / bv) < 2LL * num_sms)) bv /= 2;
  return bv;
}

}  // namespace linattn::cuda
