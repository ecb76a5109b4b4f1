// exp over a row, for the host loops of the per-channel gate (chunk_gate.hpp).
// The host spends most of a gk chunk in exp (one per key channel and token,
// three times over) when each is a call into libm; these loops vectorize.
//
// fp32: within about 1 ulp of the true exp for x <= 88 (a Cody-Waite
// reduction and a degree-6 polynomial); results below FLT_MIN (x below about
// -87.3) are at most 1.2e-38 off, and x <= -88 gives 0. The gates call it
// only with x <= 0 (differences of cumulative log-decays).
// fp64: std::exp, element by element: fp64 runs stay the reference-grade path.
#pragma once

namespace linattn {

// x[i] = exp(x[i]).
void exp_in_place(float* x, int n);
void exp_in_place(double* x, int n);

// y[i] *= exp(a[i] - b[i]), or exp(a[i]) where b is null.
void scale_by_exp(float* y, const float* a, const float* b, int n);
void scale_by_exp(double* y, const double* a, const double* b, int n);

}  // namespace linattn
