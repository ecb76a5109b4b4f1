#include "app/text_table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace linattn {

std::string TextTable::str() const {
  std::vector<std::size_t> width(header.size(), 0);
  auto widen = [&](const std::vector<std::string>& row) {
    for (std::size_t c = 0; c < row.size() && c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  };
  widen(header);
  for (const auto& row : rows) widen(row);

  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (std::size_t c = 0; c < row.size() && c < width.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      const bool right = c < right_aligned.size() && right_aligned[c];
      line += (c ? "  " : "") + (right ? pad + row[c] : row[c] + pad);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + '\n';
  };
  emit(header);
  for (const auto& row : rows) emit(row);
  return out;
}

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

std::string scientific(double x, int digits) {
  if (std::isnan(x)) return "-";  // not measured (e.g. bench --accuracy-tokens 0)
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*e", digits, x);
  return buf;
}

}  // namespace linattn
