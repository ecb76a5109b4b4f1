#include "io/hdf5_links.hpp"

#include "io/hdf5_errors.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace linattn::hdf5 {
namespace {

// The names along a path ("." and empty names, as in "a//b", name no link).
std::vector<std::string> names_of(const std::string& path) {
  std::vector<std::string> names;
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t end = std::min(path.find('/', start), path.size());
    const std::string name = path.substr(start, end - start);
    if (!name.empty() && name != ".") names.push_back(name);
    start = end + 1;
  }
  return names;
}

std::string absolute_path(const std::vector<std::string>& names) {
  std::string path;
  for (const std::string& n : names) path += "/" + n;
  return path.empty() ? "/" : path;
}

// A link's value (a soft link's target path, an external link's packed
// file and object names); empty when it cannot be read.
std::string link_value(hid_t file, const std::string& link, std::size_t size) {
  std::string value(size, '\0');
  if (size == 0 || H5Lget_val(file, link.c_str(), value.data(), size, H5P_DEFAULT) < 0) return "";
  return value;
}

std::string describe_external(hid_t file, const std::string& link, std::size_t size) {
  const std::string named = "'" + link.substr(1) + "' is an external link";
  std::string value = link_value(file, link, size);
  const char* target_file = nullptr;
  const char* target_object = nullptr;
  unsigned flags = 0;
  if (value.empty() || H5Lunpack_elink_val(value.data(), size, &flags, &target_file, &target_object) < 0 ||
      !target_file || !target_object)
    return named;
  return named + " to '" + target_file + "' (object '" + target_object + "')";
}

}  // namespace

LinkPath follow_links(hid_t file, const std::string& path) {
  LinkPath out;
  std::vector<std::string> todo = names_of(path);
  std::vector<std::string> hard;  // the names walked so far, each a hard link in the group before it
  std::size_t next = 0;
  int soft_links = 0;
  while (next < todo.size()) {
    std::vector<std::string> here_names = hard;
    here_names.push_back(todo[next]);
    const std::string here = absolute_path(here_names);
    // Every name before `here` is a hard link: asking about it makes HDF5
    // traverse hard links only.
    H5L_info_t info;
    if (H5Lget_info(file, here.c_str(), &info, H5P_DEFAULT) < 0) {
      last_error_detail();  // clear the stack: "not there" is an answer here
      return out;
    }
    if (info.type == H5L_TYPE_HARD) {
      hard.push_back(todo[next++]);
      continue;
    }
    if (info.type == H5L_TYPE_SOFT) {
      // A path inside this file: walk it instead, then the rest of the names.
      const std::string target = link_value(file, here, info.u.val_size);
      if (target.empty() || ++soft_links > 16) return out;  // unreadable, or a chain HDF5 would refuse too
      const std::string target_path(target.c_str());  // the value ends with its NUL
      std::vector<std::string> resolved = target_path[0] == '/' ? std::vector<std::string>{} : hard;
      for (std::string& n : names_of(target_path)) resolved.push_back(std::move(n));
      resolved.insert(resolved.end(), todo.begin() + static_cast<std::ptrdiff_t>(next) + 1, todo.end());
      todo = std::move(resolved);
      hard.clear();
      next = 0;
      continue;
    }
    out.found = true;
    out.leaves = info.type == H5L_TYPE_EXTERNAL
                     ? describe_external(file, here, info.u.val_size)
                     : "'" + here.substr(1) + "' is a user-defined link (type " + std::to_string(info.type) + ")";
    return out;
  }
  out.found = true;
  out.hard = absolute_path(hard);
  return out;
}

}  // namespace linattn::hdf5
