#include "io/hdf5_errors.hpp"

#include <hdf5.h>

#include <mutex>

namespace linattn::hdf5 {

void silence_errors() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

namespace {

herr_t take_first(unsigned n, const H5E_error2_t* err, void* out) {
  if (n == 0 && err && err->desc) *static_cast<std::string*>(out) = err->desc;
  return 0;
}

}  // namespace

std::string last_error_detail() {
  std::string detail;
  // Upward: entry 0 is where the error was detected, the most specific message.
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, take_first, &detail);
  H5Eclear2(H5E_DEFAULT);
  return detail;
}

}  // namespace linattn::hdf5
