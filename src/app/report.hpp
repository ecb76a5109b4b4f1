// What `linattn run` prints: a progress line per case and a summary table.
#pragma once

#include "app/batch_run.hpp"

#include <iosfwd>
#include <string>
#include <vector>

namespace linattn {

// "[2/3]": the case's place in the batch, as progress lines start.
std::string case_counter(std::size_t index, std::size_t total);

// "B=1 T=300 H=2 DK=32 DV=32"
std::string shape_summary(const Problem& p);

// "  read external data (q, cu_seqlens)" for a case that read datasets from
// other files (--allow-external-data); "" for none.
std::string external_data_note(const std::vector<std::string>& datasets);

// "0.125", "0.1768", "1": the scale as result lines show it.
std::string scale_text(double scale);

// "[2/3] inputs/example.h5:case1  B=1 T=300 ... bf16  fused/registers  scale 0.1768  kernel 12.3 ms  4.5 GB/s
//  wall 0.05 s  1 window  -> outputs/example.case1.h5"
std::string progress_line(std::size_t index, std::size_t total, const CaseResult& r, Variant variant);
// "[2/3] inputs/example.h5:case1  FAILED: <error>"
std::string failure_line(std::size_t index, std::size_t total, const CaseResult& r);

// "[2/3] inputs/example.h5:case1  skipped: OUT exists (--skip-existing)"
std::string skipped_line(std::size_t index, std::size_t total, const CaseResult& r);

// The table of all cases and a closing count line ("cases: 3 ok, 0 failed").
void print_summary(std::ostream& out, const std::vector<CaseResult>& results, Variant variant);

}  // namespace linattn
