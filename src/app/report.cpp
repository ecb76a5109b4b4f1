#include "app/report.hpp"

#include "app/text_table.hpp"
#include "core/printable.hpp"

#include <cstdio>
#include <ostream>

namespace linattn {

std::string case_counter(std::size_t index, std::size_t total) {
  return "[" + std::to_string(index) + "/" + std::to_string(total) + "]";
}

std::string shape_summary(const Problem& p) {
  return "B=" + std::to_string(p.B) + " T=" + std::to_string(p.T) + " H=" + std::to_string(p.H) +
         " DK=" + std::to_string(p.DK) + " DV=" + std::to_string(p.DV);
}

std::string external_data_note(const std::vector<std::string>& datasets) {
  if (datasets.empty()) return "";
  std::string names;
  for (const std::string& d : datasets) names += (names.empty() ? "" : ", ") + d;
  return "  read external data (" + names + ")";
}

std::string scale_text(double scale) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", scale);
  return text;
}

std::string progress_line(std::size_t index, std::size_t total, const CaseResult& r, Variant variant) {
  return case_counter(index, total) + " " + printable(r.label()) + "  " + shape_summary(*r.problem) + " " +
         dtype_name(r.dtype) + (r.gate == GateKind::none ? "" : std::string(" gate ") + gate_dataset_name(r.gate)) +
         "  " + variant_name(variant) + (r.tile_path.empty() ? "" : "/" + r.tile_path) +
         "  scale " + scale_text(r.problem->scale) + "  kernel " + fixed(r.kernel_seconds * 1e3, 3) + " ms  " +
         fixed(r.gigabytes_per_second(), 2) + " GB/s  wall " + fixed(r.wall_seconds, 2) + " s  " +
         (r.segment_chunks.empty() ? std::to_string(r.windows) + (r.windows == 1 ? " window" : " windows") +
                                         (r.device_windows > 0 && r.device_windows < r.windows
                                              ? " in " + std::to_string(r.device_windows) +
                                                    (r.device_windows == 1 ? " launch" : " launches")
                                              : "")
                                   : "chunks " + r.segment_chunks + " by rank") +
         external_data_note(r.external_data) + "  -> " + printable(r.output);
}

std::string failure_line(std::size_t index, std::size_t total, const CaseResult& r) {
  return case_counter(index, total) + " " + printable(r.label()) + "  FAILED: " + printable(r.error);
}

std::string skipped_line(std::size_t index, std::size_t total, const CaseResult& r) {
  return case_counter(index, total) + " " + printable(r.label()) + "  skipped: " + printable(r.output) +
         " exists (--skip-existing)";
}

void print_summary(std::ostream& out, const std::vector<CaseResult>& results, Variant variant) {
  TextTable table{{"case", "shape", "dtype", "variant", "ms", "GB/s", "status"},
                  {false, false, false, false, true, true, false},
                  {}};
  std::size_t ok = 0, skipped = 0;
  for (const CaseResult& r : results) {
    ok += r.ok;
    skipped += r.skipped;
    table.rows.push_back({printable(r.label()), r.problem ? shape_summary(*r.problem) : "-",
                          r.problem ? dtype_name(r.dtype) : "-", variant_name(variant),
                          r.ok ? fixed(r.kernel_seconds * 1e3, 3) : "-",
                          r.ok ? fixed(r.gigabytes_per_second(), 2) : "-", r.skipped ? "skipped" : r.ok ? "ok" : "FAILED"});
  }
  out << table.str() << "cases: " << ok << " ok, " << results.size() - ok << " failed";
  if (skipped > 0) out << " (" << skipped << " of the ok skipped: output exists)";
  out << std::endl;
}

}  // namespace linattn
