// verify's progress while it computes the fp64 reference, its long part on a
// large case: the line `run` shows (pipeline/progress_reporter.hpp) on
// stderr, a bar on a terminal, else a line at most every 10 s.
#pragma once

#include "app/reference_by_head.hpp"
#include "core/dtype.hpp"
#include "core/printable.hpp"
#include "pipeline/progress_reporter.hpp"
#include "pipeline/window_plan.hpp"

#include <unistd.h>

#include <cstdint>
#include <iostream>
#include <string>

namespace linattn {

// compute(done) runs the reference, calling done after each piece; the bar
// counts the tokens of every row and the input bytes (`elements` of
// `input` each) the pieces read.
template <class Compute>
auto with_progress(const std::string& output, const Problem& p, DType input, std::int64_t elements,
                   Compute compute) {
  ProgressReporter progress(std::cout, std::cerr, ::isatty(2) != 0);
  struct End {  // the bar is cleared however compute ends
    ProgressReporter& progress;
    ~End() { progress.end_case(); }
  } end{progress};
  const auto size = static_cast<std::int64_t>(dtype_size(input));
  progress.start_case("verify " + printable(output), case_tokens(p), elements * size);
  return compute(PieceDone([&](std::int64_t tokens, std::int64_t read) { progress.advance(tokens, read * size); }));
}

}  // namespace linattn
