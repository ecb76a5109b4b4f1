// `linattn verify` on a gradient output (OUTDIR/<stem>.grad.h5 of `linattn
// backward`): recompute the fp64 reference backward (reference/backward.hpp)
// from the input case and the gradient input the file names, and compare dq,
// dk, dv and dh0 with the levels of core/accuracy_levels.hpp.
#pragma once

#include <iosfwd>
#include <string>

namespace linattn {

// Prints the header, a table of relative L2 errors against their levels and
// "verify: ok" or "verify: FAILED ..." to `out`; returns 0 when every tensor
// is within its level, else 1. input and grad replace the files the output
// names when not empty. Throws FileError when a file cannot be read or does
// not fit (shapes, dtypes, sequences).
int verify_grad_output(const std::string& path, const std::string& input, const std::string& grad, std::ostream& out);

}  // namespace linattn
