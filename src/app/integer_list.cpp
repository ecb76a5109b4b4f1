#include "app/integer_list.hpp"

#include <sstream>
#include <stdexcept>

namespace linattn {

std::vector<std::int64_t> parse_integer_list(const std::string& text, const std::string& expected) {
  std::vector<std::int64_t> values;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size()) throw std::invalid_argument("'" + text + "' is not " + expected);
    values.push_back(v);
  }
  return values;
}

}  // namespace linattn
