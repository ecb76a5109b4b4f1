#include "io/file_error.hpp"

#include "core/printable.hpp"

namespace linattn {
namespace {

// Messages are one line of printable UTF-8 whatever the file or the library below said.
std::string one_line(const std::string& s) { return printable(s); }

}  // namespace

FileError::FileError(const std::string& file, const std::string& what)
    : std::runtime_error(one_line(file + ": " + what)) {}

FileError::FileError(const std::string& file, const std::string& dataset, const std::string& what)
    : std::runtime_error(one_line(file + ": dataset '" + dataset + "': " + what)) {}

FileError FileError::preformatted(const std::string& message) { return FileError(Whole{}, message); }

FileError::FileError(Whole, const std::string& message) : std::runtime_error(one_line(message)) {}

}  // namespace linattn
