// Text from files (group names, attribute values, HDF5's messages) made safe
// to print: one line of valid UTF-8 in which control characters and bytes
// that are not UTF-8 are written as \xNN (a newline or tab becomes a space).
#pragma once

#include <string>

namespace linattn {

std::string printable(const std::string& text);

}  // namespace linattn
