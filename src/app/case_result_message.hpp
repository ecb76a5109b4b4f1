// Case results as bytes, for the messages between the ranks of a batch shared
// by MPI (docs/PARALLEL.md): rank 0 sends every rank the list of cases, and
// each rank sends rank 0 the results of the cases it ran. A case's problem
// travels as its shape (B, T, H, DK, DV, chunk, scale) without its cu_seqlens,
// which the summary does not print.
#pragma once

#include "app/batch_run.hpp"

#include <string>
#include <vector>

namespace linattn {

// The cases results[i] for i in `indices`, each with its index.
std::string encode_results(const std::vector<CaseResult>& results, const std::vector<std::size_t>& indices);
// Stores each encoded case at its index of `results` (grown when needed).
void decode_results(const std::string& bytes, std::vector<CaseResult>& results);

}  // namespace linattn
