// A register-blocked tile GEMM for host execution spaces, the host
// implementation behind team_gemm: C = alpha op(A) op(B) + beta C on the
// kernels' small row-major tiles (rows contiguous, any row stride).
//
// Why: KokkosBatched's Unblocked TeamGemm walks the tiles with run-time
// strides and does not vectorize (~2.7 GFLOP/s on one core). Here an MR x NR
// block of C lives in local accumulators while k runs; each k step loads NR
// contiguous values of a packed B panel and broadcasts MR values of A, which
// the compiler turns into packed FMAs on whatever vector ISA it targets.
// Accumulation is in T (fp32 for fp32 tiles, fp64 for fp64), as on the
// portable path.
#pragma once

namespace linattn {
namespace host_gemm {

// Bytes of one SIMD register as the compiler targets it here (with
// -march=native; a baseline x86-64 build has SSE2 only).
#if defined(__AVX512F__)
constexpr int kVectorBytes = 64;
#elif defined(__AVX__)
constexpr int kVectorBytes = 32;
#else
constexpr int kVectorBytes = 16;  // SSE2, NEON
#endif

// Register block: MR rows x NR columns of C, 2 vectors per row, 12 vector
// accumulators in all (x86 has 16 vector registers without AVX-512, 32 with).
constexpr int kMR = 6;
template <class T>
constexpr int kNR = 2 * kVectorBytes / static_cast<int>(sizeof(T));
// Depth of a packed B panel: KC x NR values on the stack (at most 32 KB).
constexpr int kKC = 256;

// Which part of the product the caller needs (the causal mask of the
// intra-chunk scores). Results are the same as with `full`; only work on
// elements that are zero or discarded is skipped.
enum class Triangle {
  full,
  lower_a,  // A(i, k) = 0 for k > i: row i of C only needs k <= i
  lower_c,  // only C(i, j) with j <= i is wanted; the rest is left unwritten (masked afterwards)
};

// A row-major matrix with row stride ld, read as op(X): element (r, c) of op(X).
template <bool Transposed, class T>
struct Operand {
  const T* data;
  int ld;
  T operator()(int r, int c) const { return Transposed ? data[c * ld + r] : data[r * ld + c]; }
};

// panel[k][j] = op(B)(k0 + k, j0 + j) for k < kc, j < nr; columns nr..NR-1 are
// zero so that the micro-kernel always runs full width.
template <int NR, bool TransB, class T>
inline void pack_b_panel(T* panel, Operand<TransB, T> B, int k0, int kc, int j0, int nr) {
  for (int k = 0; k < kc; ++k) {
    T* row = panel + k * NR;
    for (int j = 0; j < nr; ++j) row[j] = B(k0 + k, j0 + j);
    for (int j = nr; j < NR; ++j) row[j] = T(0);
  }
}

// C(i0 + r, j0 + j) for r < MR, j < nr, from one k block (k0..k0+kc) of
// op(A) against the packed B panel. The accumulators are locals so that they
// stay in registers; MR is a template argument for the same reason (the
// caller dispatches the ragged last rows to a smaller MR). The first k block
// applies beta (never reading C when beta is zero, so garbage or NaN in C
// does not leak); later blocks add.
template <int MR, int NR, bool TransA, class T>
inline void row_block(Operand<TransA, T> A, const T* panel, T* C, int ldc, int i0, int j0, int nr, int k0, int kc,
                      T alpha, T beta) {
  T acc[MR][NR] = {};
  for (int k = 0; k < kc; ++k) {
    const T* b = panel + k * NR;
    for (int r = 0; r < MR; ++r) {
      const T a = A(i0 + r, k0 + k);
#pragma omp simd
      for (int j = 0; j < NR; ++j) acc[r][j] += a * b[j];
    }
  }
  for (int r = 0; r < MR; ++r) {
    T* c = C + (i0 + r) * ldc + j0;
    if (k0 > 0)
      for (int j = 0; j < nr; ++j) c[j] += alpha * acc[r][j];
    else if (beta == T(0))
      for (int j = 0; j < nr; ++j) c[j] = alpha * acc[r][j];
    else
      for (int j = 0; j < nr; ++j) c[j] = alpha * acc[r][j] + beta * c[j];
  }
}

// The ragged last rows: mr < kMR rows with a register block of exactly mr rows.
template <int MR, int NR, bool TransA, class T>
inline void row_block_ragged(int mr, Operand<TransA, T> A, const T* panel, T* C, int ldc, int i0, int j0, int nr,
                             int k0, int kc, T alpha, T beta) {
  if constexpr (MR > 0) {
    if (mr == MR)
      row_block<MR, NR>(A, panel, C, ldc, i0, j0, nr, k0, kc, alpha, beta);
    else
      row_block_ragged<MR - 1, NR>(mr, A, panel, C, ldc, i0, j0, nr, k0, kc, alpha, beta);
  }
}

// C(i, j) = alpha sum_k op(A)(i, k) op(B)(k, j) + beta C(i, j) for rows
// row_begin <= i < row_end (a multiple of kMR apart from the end of C) and
// 0 <= j < N; K is the inner dimension. The caller splits the rows among the
// threads of a team.
template <bool TransA, bool TransB, class T>
void gemm_rows(Triangle tri, int row_begin, int row_end, int N, int K, T alpha, const T* A, int lda, const T* B,
               int ldb, T beta, T* C, int ldc) {
  constexpr int NR = kNR<T>;
  const Operand<TransA, T> opA{A, lda};
  const Operand<TransB, T> opB{B, ldb};
  alignas(64) T panel[kKC * NR];
  // With K == 0 the product is empty: C = beta C, done by one zero-depth k block.
  const int k_blocks = K > 0 ? (K + kKC - 1) / kKC : 1;
  for (int j0 = 0; j0 < N; j0 += NR) {
    const int nr = N - j0 < NR ? N - j0 : NR;
    // lower_c: rows above j0 want nothing from this panel.
    const int first_row = tri == Triangle::lower_c && j0 > row_begin ? row_begin + (j0 - row_begin) / kMR * kMR
                                                                     : row_begin;
    for (int kb = 0; kb < k_blocks; ++kb) {
      const int k0 = kb * kKC, kc = K - k0 < kKC ? K - k0 : kKC;
      pack_b_panel<NR>(panel, opB, k0, kc, j0, nr);
      for (int i0 = first_row; i0 < row_end; i0 += kMR) {
        const int mr = row_end - i0 < kMR ? row_end - i0 : kMR;
        // lower_a: A(i, k) is zero for k > i, so rows i0..i0+mr-1 stop at k = i0 + mr.
        int depth = kc;
        if (tri == Triangle::lower_a) {
          const int k_end = i0 + mr < K ? i0 + mr : K;
          depth = k_end - k0 < 0 ? 0 : (k_end - k0 < kc ? k_end - k0 : kc);
          if (depth == 0 && k0 > 0) continue;  // nothing to add; the first block already applied beta
        }
        if (mr == kMR)
          row_block<kMR, NR>(opA, panel, C, ldc, i0, j0, nr, k0, depth, alpha, beta);
        else
          row_block_ragged<kMR - 1, NR>(mr, opA, panel, C, ldc, i0, j0, nr, k0, depth, alpha, beta);
      }
    }
  }
}

}  // namespace host_gemm
}  // namespace linattn
