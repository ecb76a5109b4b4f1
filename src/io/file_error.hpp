// The one error type of linattn's file handling. Its message is a single line
// of valid UTF-8 (bytes from a file or a path that are not printable are
// written as \xNN, so that no raw bytes reach a terminal) that names the file,
// the dataset when there is one, and what is wrong:
//   data.h5: dataset 'case1/q': rank 3 [2, 64, 32], expected rank 4 [B, T, H, DK]
#pragma once

#include <stdexcept>
#include <string>

namespace linattn {

class FileError : public std::runtime_error {
 public:
  // "FILE: WHAT"
  FileError(const std::string& file, const std::string& what);
  // "FILE: dataset 'DATASET': WHAT"
  FileError(const std::string& file, const std::string& dataset, const std::string& what);
  // A message already made by a FileError (in the reader process), passed on as it is.
  static FileError preformatted(const std::string& message);

 private:
  struct Whole {};
  FileError(Whole, const std::string& message);
};

}  // namespace linattn
