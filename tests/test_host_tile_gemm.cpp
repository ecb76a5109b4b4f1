// The host tile GEMM (src/kernels/host_tile_gemm.hpp) against an fp64 product,
// element by element, with the bound of the arithmetic rather than a guessed
// tolerance: |C - C_exact| <= gamma_n (|alpha| sum_k |a_ik b_kj| + |beta c_ij|),
// gamma_n = n u / (1 - n u), n = K plus the few roundings of alpha, beta and
// the per-k-block updates. Covers the three transposition cases the kernels
// use, ragged rows and columns, K beyond one packed panel, beta zero over a
// NaN-poisoned C, a row range split as a two-thread team splits it, and the
// causal hints.
#include "core/random_tensor.hpp"
#include "kernels/host_tile_gemm.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace linattn {
namespace {

using host_gemm::Triangle;

template <class T>
std::vector<T> random_matrix(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  const Tensor t = random_tensor(sizeof(T) == 4 ? DType::f32 : DType::f64, {rows, cols}, seed);
  return std::vector<T>(t.data<T>(), t.data<T>() + rows * cols);
}

struct Case {
  bool ta, tb;
  int M, N, K;
  Triangle tri;
};

std::string describe(const Case& c) {
  return std::string(c.ta ? "T" : "N") + (c.tb ? "T" : "N") + " M=" + std::to_string(c.M) + " N=" +
         std::to_string(c.N) + " K=" + std::to_string(c.K) + " tri=" + std::to_string(static_cast<int>(c.tri));
}

template <bool TA, bool TB, class T>
void call(Triangle tri, int r0, int r1, int N, int K, T alpha, const std::vector<T>& A, int lda,
          const std::vector<T>& B, int ldb, T beta, std::vector<T>& C, int ldc) {
  host_gemm::gemm_rows<TA, TB>(tri, r0, r1, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
}

// C = alpha op(A) op(B) + beta C through gemm_rows, in two row ranges (the
// split of a two-thread team: the first ends on a multiple of kMR).
template <class T>
void run_case(const Case& c, T alpha, T beta, std::uint64_t seed) {
  SCOPED_TRACE(describe(c) + (sizeof(T) == 4 ? " fp32" : " fp64") + " beta=" + std::to_string(beta));
  // op(A) is M x K, op(B) is K x N; stored row-major with padded row strides.
  const int a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K, lda = a_cols + 3;
  const int b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N, ldb = b_cols + 1;
  const int ldc = c.N + 2;
  std::vector<T> A = random_matrix<T>(a_rows, lda, seed), B = random_matrix<T>(b_rows, ldb, seed + 1);
  std::vector<T> C = random_matrix<T>(c.M, ldc, seed + 2);
  auto a = [&](int i, int k) { return c.ta ? A[k * lda + i] : A[i * lda + k]; };
  auto b = [&](int k, int j) { return c.tb ? B[j * ldb + k] : B[k * ldb + j]; };
  if (c.tri == Triangle::lower_a)  // the hint promises zeros above the diagonal
    for (int i = 0; i < c.M; ++i)
      for (int k = i + 1; k < c.K; ++k) (c.ta ? A[k * lda + i] : A[i * lda + k]) = T(0);
  const std::vector<T> C0 = C;
  if (beta == T(0))
    for (T& x : C) x = std::numeric_limits<T>::quiet_NaN();  // must never be read

  const int split = (c.M / 2) / host_gemm::kMR * host_gemm::kMR;
  for (auto [r0, r1] : {std::pair<int, int>{0, split}, std::pair<int, int>{split, c.M}}) {
    if (r0 >= r1) continue;
    if (!c.ta && !c.tb) call<false, false>(c.tri, r0, r1, c.N, c.K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (!c.ta && c.tb) call<false, true>(c.tri, r0, r1, c.N, c.K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (c.ta && !c.tb) call<true, false>(c.tri, r0, r1, c.N, c.K, alpha, A, lda, B, ldb, beta, C, ldc);
  }

  const double u = std::numeric_limits<T>::epsilon() / 2;
  const double n = c.K + 4 + c.K / host_gemm::kKC;
  const double gamma = n * u / (1 - n * u);
  int checked = 0, failures = 0;
  for (int i = 0; i < c.M; ++i) {
    for (int j = 0; j < c.N; ++j) {
      if (c.tri == Triangle::lower_c && j > i) continue;  // left unwritten by contract
      double exact = 0, magnitude = 0;
      for (int k = 0; k < c.K; ++k) {
        exact += double(a(i, k)) * double(b(k, j));
        magnitude += std::fabs(double(a(i, k)) * double(b(k, j)));
      }
      exact = double(alpha) * exact + double(beta) * double(C0[i * ldc + j]);
      const double bound = gamma * (std::fabs(double(alpha)) * magnitude + std::fabs(double(beta) * C0[i * ldc + j]));
      const double got = C[i * ldc + j];
      ++checked;
      if (!(std::fabs(got - exact) <= bound) && ++failures <= 5)
        ADD_FAILURE() << "C(" << i << ", " << j << ") = " << got << ", exact " << exact << ", bound " << bound;
    }
  }
  EXPECT_GT(checked, 0);
  // Padding columns past N stay untouched.
  for (int i = 0; i < c.M; ++i)
    for (int j = c.N; j < ldc; ++j) {
      const T before = beta == T(0) ? std::numeric_limits<T>::quiet_NaN() : C0[i * ldc + j];
      EXPECT_TRUE(std::isnan(before) ? std::isnan(C[i * ldc + j]) : C[i * ldc + j] == before) << i << ", " << j;
    }
}

const Case kCases[] = {
    {false, false, 64, 64, 64, Triangle::full},    // Q S, A V at chunk 64, D 64
    {false, true, 64, 64, 64, Triangle::full},     // Q K^T
    {true, false, 64, 64, 64, Triangle::full},     // K^T V
    {false, false, 13, 37, 5, Triangle::full},     // ragged everywhere
    {false, true, 1, 3, 2, Triangle::full},        // fewer rows than one register block
    {true, false, 24, 40, 70, Triangle::full},     // DK x W state update with a ragged chunk
    {false, false, 20, 33, 300, Triangle::full},   // K beyond one packed panel (kKC)
    {false, true, 17, 9, 520, Triangle::full},     // three packed panels, transposed B
    {true, false, 40, 21, 290, Triangle::full},    // transposed A across panels
    {false, false, 64, 48, 64, Triangle::lower_a}, // tril(A) V
    {false, false, 29, 40, 29, Triangle::lower_a}, // ragged triangle
    {false, true, 64, 64, 32, Triangle::lower_c},  // Q K^T, upper part masked afterwards
    {false, true, 23, 23, 11, Triangle::lower_c},
};

TEST(HostTileGemm, MatchesFp64WithinTheArithmeticBound) {
  std::uint64_t seed = 700;
  for (const Case& c : kCases) {
    for (double beta : {0.0, 1.0, -0.75}) {
      run_case<float>(c, 0.5f, static_cast<float>(beta), seed += 3);
      run_case<double>(c, 0.5, beta, seed += 3);
    }
  }
}

}  // namespace
}  // namespace linattn
