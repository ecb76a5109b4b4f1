// The one error type of linattn's file handling. Its message is a single line
// that names the file, the dataset when there is one, and what is wrong:
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
};

}  // namespace linattn
