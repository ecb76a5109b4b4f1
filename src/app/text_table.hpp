// Plain-text tables for the terminal: columns padded to their widest cell,
// numbers right-aligned.
#pragma once

#include <string>
#include <vector>

namespace linattn {

struct TextTable {
  std::vector<std::string> header;
  std::vector<bool> right_aligned;  // per column; missing entries mean left-aligned
  std::vector<std::vector<std::string>> rows;

  std::string str() const;  // header and rows, one line each, newline-terminated
};

// printf-style "%.*f".
std::string fixed(double x, int digits);
// printf-style "%.*e".
std::string scientific(double x, int digits);

}  // namespace linattn
