#include "io/dataset_storage.hpp"

#include "io/file_error.hpp"
#include "io/hdf5_errors.hpp"
#include "io/hdf5_file.hpp"
#include "io/hdf5_links.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <vector>

// H5Dget_num_chunks (1.10.5) and H5Pset_virtual_prefix (1.10.2).
#if !H5_VERSION_GE(1, 10, 5)
#error "linattn needs HDF5 1.10.5 or newer"
#endif

namespace linattn::hdf5 {

namespace fs = std::filesystem;

namespace {

std::atomic<bool> allowed_external{false};

// Names quoted in messages: a hostile file can hold any number of targets.
constexpr std::size_t kNamesShown = 3;

std::string listed(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size() && i < kNamesShown; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > kNamesShown) out += " and " + std::to_string(items.size() - kNamesShown) + " more";
  return out;
}

std::int64_t points_of(hid_t dataset) {
  const Dataspace space(H5Dget_space(dataset));
  return space.valid() ? static_cast<std::int64_t>(H5Sget_simple_extent_npoints(space.get())) : -1;
}

std::vector<hsize_t> dims_of(hid_t dataset) {
  const Dataspace space(H5Dget_space(dataset));
  const int rank = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

// The folder that a file's external targets are looked up in: the file's own.
fs::path folder_of(hid_t file) {
  const ssize_t n = H5Fget_name(file, nullptr, 0);
  std::string name(n > 0 ? static_cast<std::size_t>(n) + 1 : 1, '\0');
  if (n > 0) H5Fget_name(file, name.data(), name.size());
  return fs::absolute(fs::path(name.c_str())).parent_path();
}

std::vector<std::string> external_file_names(hid_t dcpl) {
  std::vector<std::string> names;
  const int count = H5Pget_external_count(dcpl);
  for (int i = 0; i < count; ++i) {
    char name[4096] = {};
    off_t offset = 0;
    hsize_t size = 0;
    H5Pget_external(dcpl, static_cast<unsigned>(i), sizeof name, name, &offset, &size);
    names.emplace_back(name);
  }
  return names;
}

// A virtual mapping's source file or dataset name (H5Pget_virtual_filename
// and H5Pget_virtual_dsetname share this form).
std::string virtual_name(ssize_t (*get)(hid_t, size_t, char*, size_t), hid_t dcpl, std::size_t i) {
  const ssize_t n = get(dcpl, i, nullptr, 0);
  if (n <= 0) return "";
  std::string name(static_cast<std::size_t>(n) + 1, '\0');
  get(dcpl, i, name.data(), name.size());
  return name.c_str();
}

std::size_t virtual_count(hid_t dcpl) {
  std::size_t count = 0;
  return H5Pget_virtual_count(dcpl, &count) < 0 ? 0 : count;
}

// Where the data of a dataset that reads other files are, for the refusal.
std::string describe_targets(hid_t dcpl) {
  std::vector<std::string> targets;
  if (H5Pget_external_count(dcpl) > 0) {
    for (const std::string& name : external_file_names(dcpl)) targets.push_back("'" + name + "'");
    return "its data are in " + listed(targets) + " (external raw storage)";
  }
  std::set<std::string> seen;
  for (std::size_t i = 0; i < virtual_count(dcpl); ++i) {
    const std::string file = virtual_name(H5Pget_virtual_filename, dcpl, i);
    const std::string target = (file == "." ? std::string("this file") : "'" + file + "'") + " (dataset '" +
                               virtual_name(H5Pget_virtual_dsetname, dcpl, i) + "')";
    if (seen.insert(target).second) targets.push_back(target);
  }
  return "a virtual dataset whose data are in " + (targets.empty() ? std::string("no source") : listed(targets));
}

// Why a dataset stored in its file holds no data for part of its extent
// (docs/HDF5.md, "Unwritten data"); "" when it holds all.
std::string unwritten(hid_t dataset, hid_t dcpl) {
  if (points_of(dataset) <= 0) return "";
  H5D_space_status_t status;
  if (H5Dget_space_status(dataset, &status) < 0) return "";  // the reads will fail with HDF5's reason
  if (status == H5D_SPACE_STATUS_NOT_ALLOCATED) return "no data written (its storage is not allocated)";
  if (H5Pget_layout(dcpl) != H5D_CHUNKED) return "";
  // Compressed chunks are legitimately smaller than their extent, so count
  // chunks rather than bytes: the extent needs prod ceil(dim / chunk) of them.
  const std::vector<hsize_t> dims = dims_of(dataset);
  std::vector<hsize_t> chunk(dims.size());
  if (dims.empty() || H5Pget_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()) != static_cast<int>(dims.size()))
    return "";
  hsize_t needed = 1;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (chunk[d] == 0) return "";
    if (__builtin_mul_overflow(needed, (dims[d] + chunk[d] - 1) / chunk[d], &needed)) return "";
  }
  const Dataspace space(H5Dget_space(dataset));  // H5S_ALL is refused here by HDF5 1.10
  hsize_t stored = 0;
  if (!space.valid() || H5Dget_num_chunks(dataset, space.get(), &stored) < 0) {
    last_error_detail();
    return "";
  }
  if (stored >= needed) return "";
  return "no data written in " + std::to_string(needed - stored) + " of its " + std::to_string(needed) +
         " chunks (they would read as fill values)";
}

[[noreturn]] void refuse_unwritten(const std::string& file_name, const std::string& path, const std::string& why) {
  throw FileError(file_name, path, why + "; a file with unwritten data is not an input");
}

// Components of a path, for "is `inner` inside `outer`".
bool inside(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i)
    if (i == inner.end() || *i != *o) return false;
  return true;
}

// A target named by the dataset (an external file, a virtual source file):
// a relative path without '..' that resolves, links followed, to a regular
// file inside `folder`. Returns that file.
fs::path checked_target(const std::string& name, const std::string& what, const fs::path& folder,
                        const std::string& file_name, const std::string& path) {
  const std::string named = what + " '" + name + "'";
  const std::string rule = "; --allow-external-data reads only files in the input's folder";
  const fs::path relative(name);
  if (name.empty()) throw FileError(file_name, path, what + " has an empty name");
  if (relative.is_absolute()) throw FileError(file_name, path, named + " is an absolute path" + rule);
  for (const fs::path& part : relative)
    if (part == "..") throw FileError(file_name, path, named + " climbs out of the folder ('..')" + rule);
  std::error_code ec;
  const fs::path target = fs::canonical(folder / relative, ec);
  if (ec) throw FileError(file_name, path, named + " is not in the input's folder " + folder.string() + ": " + ec.message());
  const fs::path real_folder = fs::canonical(folder, ec);
  if (ec || !inside(target, real_folder))
    throw FileError(file_name, path, named + " resolves to " + target.string() + ", outside the input's folder" + rule);
  if (!fs::is_regular_file(target, ec)) throw FileError(file_name, path, named + " is not a regular file");
  return target;
}

// External raw storage, allowed: each file must be in the folder and hold
// the bytes the dataset reads from it (HDF5 reads a short file's rest as zeros).
void check_external_files(hid_t dataset, hid_t dcpl, const fs::path& folder, const std::string& file_name,
                          const std::string& path) {
  const Datatype type(H5Dget_type(dataset));
  std::int64_t remaining = points_of(dataset) * static_cast<std::int64_t>(type.valid() ? H5Tget_size(type.get()) : 0);
  const int count = H5Pget_external_count(dcpl);
  for (int i = 0; i < count && remaining > 0; ++i) {
    char name[4096] = {};
    off_t offset = 0;
    hsize_t size = 0;
    if (H5Pget_external(dcpl, static_cast<unsigned>(i), sizeof name, name, &offset, &size) < 0)
      throw FileError(file_name, path, "its external storage cannot be read");
    const fs::path target = checked_target(name, "external file", folder, file_name, path);
    const std::int64_t part = size == H5F_UNLIMITED ? remaining : std::min<std::int64_t>(remaining, static_cast<std::int64_t>(size));
    std::error_code ec;
    const std::int64_t bytes = static_cast<std::int64_t>(fs::file_size(target, ec));
    if (ec || offset < 0 || bytes - part < offset)
      throw FileError(file_name, path, "external file '" + std::string(name) + "' holds " + std::to_string(bytes) +
                                           " bytes; the dataset reads " + std::to_string(part) + " from byte " +
                                           std::to_string(offset) + " of it");
    remaining -= part;
  }
}

// A virtual dataset, allowed: every mapping's source is a dataset in a file
// of the folder (or this file), holding its own data, written, and large
// enough for its selection; and the mappings together cover the extent
// (unmapped elements read as fill values).
void check_virtual_sources(hid_t file, hid_t dataset, hid_t dcpl, const fs::path& folder, const std::string& file_name,
                           const std::string& path) {
  const std::size_t count = virtual_count(dcpl);
  Dataspace covered;
  bool all = false;
  for (std::size_t i = 0; i < count; ++i) {
    const std::string source_file = virtual_name(H5Pget_virtual_filename, dcpl, i);
    const std::string source_name = virtual_name(H5Pget_virtual_dsetname, dcpl, i);
    const std::string source = "virtual source '" + source_file + "' (dataset '" + source_name + "')";
    if (source_file.find('%') != std::string::npos || source_name.find('%') != std::string::npos)
      throw FileError(file_name, path, source + " is a printf-style pattern; linattn reads fixed mappings only");
    const Dataspace vspace(H5Pget_virtual_vspace(dcpl, i)), srcspace(H5Pget_virtual_srcspace(dcpl, i));
    if (!vspace.valid() || !srcspace.valid()) throw FileError(file_name, path, "its virtual mappings cannot be read");
    if (H5Sget_select_type(vspace.get()) == H5S_SEL_HYPERSLABS && H5Sis_regular_hyperslab(vspace.get()) > 0) {
      const int rank = H5Sget_simple_extent_ndims(vspace.get());
      std::vector<hsize_t> start(rank), stride(rank), cnt(rank), block(rank);
      H5Sget_regular_hyperslab(vspace.get(), start.data(), stride.data(), cnt.data(), block.data());
      for (int d = 0; d < rank; ++d)
        if (cnt[d] == H5S_UNLIMITED || block[d] == H5S_UNLIMITED)
          throw FileError(file_name, path, source + " is an unlimited mapping; linattn reads fixed mappings only");
    }

    File opened;
    hid_t holder = file;
    if (source_file != ".") {
      opened = open_read_only(checked_target(source_file, "virtual source", folder, file_name, path).string());
      holder = opened.get();
    }
    const LinkPath link = follow_links(holder, source_name);
    if (!link.found) throw FileError(file_name, path, source + ": no such dataset");
    if (!link.leaves.empty()) throw FileError(file_name, path, source + " points outside its file: " + link.leaves);
    const Dataset src(H5Dopen2(holder, link.hard.c_str(), H5P_DEFAULT));
    if (!src.valid()) throw FileError(file_name, path, source + " is not a dataset");
    const PropertyList src_dcpl(H5Dget_create_plist(src.get()));
    if (!src_dcpl.valid() || reads_other_files(src.get()))
      throw FileError(file_name, path, source + " does not hold its own data (linattn follows one level)");
    const std::string missing = unwritten(src.get(), src_dcpl.get());
    if (!missing.empty()) refuse_unwritten(file_name, path, source + ": " + missing);
    // The selection must lie inside the source: beyond it HDF5 reads fill
    // values. A mapping of the whole source stores no extent of its own: the
    // source must then hold as many elements as the mapping places.
    if (H5Sget_select_type(srcspace.get()) == H5S_SEL_ALL) {
      if (points_of(src.get()) != static_cast<std::int64_t>(H5Sget_select_npoints(vspace.get())))
        throw FileError(file_name, path, source + ": it holds " + std::to_string(points_of(src.get())) +
                                             " elements, the mapping places " +
                                             std::to_string(H5Sget_select_npoints(vspace.get())));
    } else {
      const std::vector<hsize_t> dims = dims_of(src.get());
      std::vector<hsize_t> lo(dims.size()), hi(dims.size());
      bool inside_source = H5Sget_simple_extent_ndims(srcspace.get()) == static_cast<int>(dims.size()) &&
                           (H5Sget_select_npoints(srcspace.get()) == 0 ||
                            H5Sget_select_bounds(srcspace.get(), lo.data(), hi.data()) >= 0);
      for (std::size_t d = 0; inside_source && d < dims.size(); ++d) inside_source = hi[d] < dims[d];
      if (!inside_source) throw FileError(file_name, path, source + ": its selection reaches outside the source");
    }

    if (H5Sget_select_type(vspace.get()) == H5S_SEL_ALL) all = true;
    else if (!covered.valid()) covered = Dataspace(H5Scopy(vspace.get()));
    else covered = Dataspace(H5Scombine_select(covered.get(), H5S_SELECT_OR, vspace.get()));
  }
  last_error_detail();
  const std::int64_t needed = points_of(dataset);
  const std::int64_t mapped = all ? needed : covered.valid() ? static_cast<std::int64_t>(H5Sget_select_npoints(covered.get())) : 0;
  if (mapped < needed)
    refuse_unwritten(file_name, path, "no data written for " + std::to_string(needed - mapped) + " of its " +
                                          std::to_string(needed) + " elements (its virtual mappings leave them out)");
}

}  // namespace

void set_external_data_allowed(bool allowed) {
  allowed_external = allowed;
  // HDF5 takes these variables before the access list's prefixes: the
  // targets must come from the file's folder alone.
  if (allowed) {
    ::unsetenv("HDF5_EXTFILE_PREFIX");
    ::unsetenv("HDF5_VDS_PREFIX");
  }
}

bool external_data_allowed() { return allowed_external; }

PropertyList dataset_access(hid_t file) {
  PropertyList dapl(H5Pcreate(H5P_DATASET_ACCESS));
  if (dapl.valid()) H5Pset_chunk_cache(dapl.get(), 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT);
  if (external_data_allowed() && dapl.valid()) {
    const std::string folder = folder_of(file).string();
    H5Pset_efile_prefix(dapl.get(), folder.c_str());
    H5Pset_virtual_prefix(dapl.get(), folder.c_str());
  }
  return dapl;
}

bool reads_other_files(hid_t dataset) {
  const PropertyList dcpl(H5Dget_create_plist(dataset));
  return dcpl.valid() && (H5Pget_external_count(dcpl.get()) > 0 || H5Pget_layout(dcpl.get()) == H5D_VIRTUAL);
}

void check_storage(hid_t file, hid_t dataset, const std::string& file_name, const std::string& path) {
  const PropertyList dcpl(H5Dget_create_plist(dataset));
  if (!dcpl.valid()) throw FileError(file_name, path, "its storage cannot be inspected (corrupt file?)");
  if (reads_other_files(dataset)) {
    if (!external_data_allowed())
      throw FileError(file_name, path, "points outside the file: " + describe_targets(dcpl.get()) +
                                           "; linattn reads only data stored in the input file itself "
                                           "(--allow-external-data reads such data from the input's folder)");
    const fs::path folder = folder_of(file);
    if (H5Pget_external_count(dcpl.get()) > 0) check_external_files(dataset, dcpl.get(), folder, file_name, path);
    else check_virtual_sources(file, dataset, dcpl.get(), folder, file_name, path);
    return;
  }
  const std::string missing = unwritten(dataset, dcpl.get());
  if (!missing.empty()) refuse_unwritten(file_name, path, missing);
}

}  // namespace linattn::hdf5
