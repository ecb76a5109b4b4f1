// The checks `run` and `backward` make of a case's output name before it runs.
#pragma once

#include <set>
#include <string>

namespace linattn {

// Whether a and b name one existing file.
bool same_file(const std::string& a, const std::string& b);

// Records `path` among the outputs of a batch (by its canonical path); false
// when an earlier case of the batch already writes it.
bool claim_output(std::set<std::string>& outputs, const std::string& path);

}  // namespace linattn
