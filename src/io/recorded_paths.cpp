#include "io/recorded_paths.hpp"

#include "io/file_error.hpp"

#include <filesystem>
#include <system_error>

namespace linattn {
namespace {

namespace fs = std::filesystem;

fs::path folder_of(const std::string& file) {
  const fs::path parent = fs::path(file).parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

bool is_there(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec);
}

}  // namespace

RecordedPath record_path(const std::string& file, const std::string& output) {
  // Canonical on both sides, so that a folder reached through a symbolic link
  // gives the ".." the kernel will follow from the output's real folder.
  const fs::path absolute = fs::weakly_canonical(fs::absolute(file));
  const fs::path folder = fs::weakly_canonical(fs::absolute(folder_of(output)));
  return {absolute.string(), absolute.lexically_relative(folder).string()};
}

std::string resolve_recorded_path(const std::string& output, const RecordedPath& recorded,
                                  const std::string& attribute) {
  std::string found;
  if (!recorded.relative.empty()) {
    const fs::path joined = folder_of(output) / recorded.relative;
    if (is_there(joined)) {
      // Nothing moved: the absolute path is the same file and reads better.
      const fs::path normal = joined.lexically_normal();
      found = is_there(recorded.absolute) && same_file(recorded.absolute, joined) ? recorded.absolute
              : same_file(normal, joined)                                      ? normal.string()
                                                                                : joined.string();
    }
  }
  if (found.empty() && !recorded.absolute.empty() && is_there(recorded.absolute)) found = recorded.absolute;
  if (found.empty()) {
    if (recorded.relative.empty())
      throw FileError(output, "the file its attribute '" + attribute + "' names, " + recorded.absolute +
                                  ", does not exist (relative paths in outputs made before linattn recorded '" +
                                  attribute + "_relative' are from the folder the output was made in)");
    throw FileError(output, "the file its attributes '" + attribute + "_relative' and '" + attribute + "' name, " +
                                (folder_of(output) / recorded.relative).string() + " (from the output's folder) or " +
                                recorded.absolute + ", does not exist");
  }
  if (same_file(found, output))
    throw FileError(output, "its attribute '" + attribute + "' names " + found +
                                ", which is this output file itself, not the file it was made from (give the "
                                "input with --input)");
  return found;
}

void refuse_output_as_input(const std::string& output, const std::string& file, const std::string& what) {
  if (same_file(file, output))
    throw FileError(output, what + " " + file + " is this output file itself, not the file it was made from");
}

void check_recorded_gate(const std::string& output, const std::string& recorded_gate, const std::string& input,
                         const std::string& group, GateKind input_gate) {
  if (recorded_gate == gate_dataset_name(input_gate)) return;
  throw FileError(input, std::string("case '") + (group.empty() ? "/" : group) + "' holds gate '" +
                             gate_dataset_name(input_gate) + "', but " + output + " was made with gate '" +
                             recorded_gate + "' (wrong --input, or the input changed?)");
}

}  // namespace linattn
