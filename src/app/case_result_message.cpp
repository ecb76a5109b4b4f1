#include "app/case_result_message.hpp"

#include "pipeline/read_protocol.hpp"

#include <cstring>

namespace linattn {
namespace {

using pipeline::MessageReader;
using pipeline::MessageWriter;

std::int64_t bits_of(double x) {
  std::int64_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

double double_of(std::int64_t b) {
  double x = 0;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

}  // namespace

std::string encode_results(const std::vector<CaseResult>& results, const std::vector<std::size_t>& indices) {
  MessageWriter w;
  w.i64(static_cast<std::int64_t>(indices.size()));
  for (std::size_t i : indices) {
    const CaseResult& r = results[i];
    w.i64(static_cast<std::int64_t>(i)).str(r.input).str(r.group).str(r.output).str(r.error).str(r.tile_path);
    w.i64(r.ok).i64(r.skipped).i64(static_cast<std::int64_t>(r.dtype)).i64(r.windows).i64(r.device_windows);
    w.i64(bits_of(r.kernel_seconds)).i64(bits_of(r.min_bytes)).i64(bits_of(r.wall_seconds));
    w.i64(static_cast<std::int64_t>(r.external_data.size()));
    for (const std::string& name : r.external_data) w.str(name);
    w.i64(r.problem.has_value());
    if (r.problem) {
      const Problem& p = *r.problem;
      w.i64s({p.B, p.T, p.H, p.DK, p.DV, p.chunk}).i64(bits_of(p.scale));
    }
  }
  return w.bytes();
}

void decode_results(const std::string& bytes, std::vector<CaseResult>& results) {
  MessageReader m(bytes);
  const std::int64_t count = m.i64();
  for (std::int64_t n = 0; n < count; ++n) {
    const std::size_t i = static_cast<std::size_t>(m.i64());
    if (results.size() <= i) results.resize(i + 1);
    CaseResult& r = results[i];
    r.input = m.str();
    r.group = m.str();
    r.output = m.str();
    r.error = m.str();
    r.tile_path = m.str();
    r.ok = m.i64() != 0;
    r.skipped = m.i64() != 0;
    r.dtype = static_cast<DType>(m.i64());
    r.windows = m.i64();
    r.device_windows = m.i64();
    r.kernel_seconds = double_of(m.i64());
    r.min_bytes = double_of(m.i64());
    r.wall_seconds = double_of(m.i64());
    r.external_data.clear();
    for (std::int64_t e = m.i64(); e > 0; --e) r.external_data.push_back(m.str());
    r.problem.reset();
    if (m.i64() != 0) {
      const std::vector<std::int64_t> s = m.i64s();
      Problem p;
      p.B = s.at(0);
      p.T = s.at(1);
      p.H = s.at(2);
      p.DK = s.at(3);
      p.DV = s.at(4);
      p.chunk = s.at(5);
      p.scale = double_of(m.i64());
      r.problem = p;
    }
  }
}

}  // namespace linattn
