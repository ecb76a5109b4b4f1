#include "io/file_error.hpp"

#include <algorithm>

namespace linattn {
namespace {

// Messages are one line whatever the library below said.
std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

}  // namespace

FileError::FileError(const std::string& file, const std::string& what)
    : std::runtime_error(one_line(file + ": " + what)) {}

FileError::FileError(const std::string& file, const std::string& dataset, const std::string& what)
    : std::runtime_error(one_line(file + ": dataset '" + dataset + "': " + what)) {}

}  // namespace linattn
