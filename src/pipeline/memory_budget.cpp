#include "pipeline/memory_budget.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cctype>
#include <cmath>
#include <fstream>
#include <stdexcept>

namespace linattn::pipeline {

std::int64_t parse_memory_size(const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() >= 2 && unit.compare(unit.size() - 2, 2, "IB") == 0) unit.resize(unit.size() - 2);
  else if (unit.size() >= 2 && unit.back() == 'B') unit.pop_back();
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "K") scale = 1024.0;
  else if (unit == "M") scale = 1024.0 * 1024;
  else if (unit == "G") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T") scale = 1024.0 * 1024 * 1024 * 1024;
  const double bytes = value * scale;
  if (used == 0 || scale == 0 || !std::isfinite(bytes) || bytes > 9e18)
    throw std::invalid_argument("memory size '" + text + "' is not a size such as 512M, 8G or 1.5G");
  if (bytes < 1024.0 * 1024) throw std::invalid_argument("memory size '" + text + "' is below 1 MiB");
  return static_cast<std::int64_t>(bytes);
}

std::int64_t default_memory_budget() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), size = ::sysconf(_SC_PAGESIZE);
  const std::int64_t physical = pages > 0 && size > 0 ? std::int64_t(pages) * size : std::int64_t(8) << 30;
  return std::max<std::int64_t>(physical / 4, std::int64_t(64) << 20);
}

BudgetSplit split_budget(std::int64_t budget, bool host_backend, std::int64_t window_cap) {
  BudgetSplit s;
  const int reserve_shares = 1;
  const int shares = s.input_slots + s.output_slots + reserve_shares + (host_backend ? 1 : 0);
  s.slot_bytes = std::min(budget / shares, window_cap);
  s.slot_bytes -= s.slot_bytes % 4096;
  s.device_extra = host_backend ? s.slot_bytes : 0;  // device memory: set by the caller from free device memory
  s.reserve_bytes = reserve_shares * s.slot_bytes;
  return s;
}

std::string resident_memory() {
  std::ifstream status("/proc/self/status");
  std::string line, out;
  const std::pair<const char*, const char*> kinds[] = {{"RssAnon:", "anon"}, {"RssFile:", "files"}, {"RssShmem:", "shared"}};
  while (std::getline(status, line))
    for (const auto& [key, name] : kinds)
      if (line.rfind(key, 0) == 0)
        out += std::string(out.empty() ? "" : ", ") + name + " " + std::to_string(std::atoll(line.c_str() + std::char_traits<char>::length(key)) / 1024) + " MiB";
  return out;
}

void save_memory_map_if_asked() {
  const char* path = std::getenv("LINATTN_MEMORY_MAP");
  if (!path || !*path) return;
  std::ifstream map("/proc/self/smaps");
  std::ofstream out(path);
  out << map.rdbuf();
}

}  // namespace linattn::pipeline
