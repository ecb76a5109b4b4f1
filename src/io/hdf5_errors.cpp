#include "io/hdf5_errors.hpp"

#include <hdf5.h>

#include <cstdlib>
#include <cstring>
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

namespace {

// "errno = N" in a file driver's message (H5FDsec2.c formats its read and write failures so).
herr_t find_errno(unsigned, const H5E_error2_t* err, void* out) {
  int& found = *static_cast<int*>(out);
  if (found != 0 || !err || !err->desc) return 0;
  const char* at = std::strstr(err->desc, "errno = ");
  if (at) found = std::atoi(at + std::strlen("errno = "));
  return 0;
}

}  // namespace

int stack_os_error() {
  int found = 0;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, find_errno, &found);
  return found > 0 ? found : 0;
}

std::string write_failure(const std::string& file, const std::string& dataset, const std::string& fallback) {
  const int err = stack_os_error();
  const std::string detail = last_error_detail();
  if (err != 0)
    return std::string(std::strerror(err)) + " while writing " + (dataset.empty() ? "" : "dataset '" + dataset + "' of ") +
           file;
  const std::string where = file + ": " + (dataset.empty() ? "" : "dataset '" + dataset + "': ");
  return where + (detail.empty() ? fallback : fallback + " (HDF5: " + detail + ")");
}

}  // namespace linattn::hdf5
