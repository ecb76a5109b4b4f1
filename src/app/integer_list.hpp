// "1,63,64" -> {1, 63, 64}: the comma-separated integers of the CLI's shape and
// length options, parsed in one place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace linattn {

// Throws std::invalid_argument "'TEXT' is not EXPECTED" when an item is not a whole integer.
std::vector<std::int64_t> parse_integer_list(const std::string& text, const std::string& expected);

}  // namespace linattn
