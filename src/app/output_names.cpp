#include "app/output_names.hpp"

#include <filesystem>
#include <system_error>

namespace linattn {

namespace fs = std::filesystem;

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec);
}

bool claim_output(std::set<std::string>& outputs, const std::string& path) {
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(path, ec);
  return outputs.insert(ec ? path : canonical.string()).second;
}

}  // namespace linattn
