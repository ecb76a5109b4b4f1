#include "io/hdf5_dataset.hpp"

#include "io/dataset_storage.hpp"
#include "io/file_error.hpp"
#include "io/hdf5_errors.hpp"
#include "io/hdf5_handles.hpp"
#include "io/hdf5_links.hpp"
#include "io/hdf5_types.hpp"

#include <algorithm>
#include <stdexcept>

namespace linattn::hdf5 {
namespace {

std::string with_detail(const std::string& what) {
  const std::string detail = last_error_detail();
  return detail.empty() ? what : what + " (HDF5: " + detail + ")";
}

// The kind of object at path (H5I_DATASET, H5I_GROUP, ...), H5I_BADID when
// there is none in this file.
H5I_type_t object_type(hid_t file, const std::string& path) {
  const LinkPath link = follow_links(file, path);
  if (!link.found || !link.leaves.empty()) return H5I_BADID;
  const hid_t id = H5Oopen(file, link.hard.c_str(), H5P_DEFAULT);
  if (id < 0) {
    last_error_detail();  // clear the stack: "not there" is an answer here, not an error
    return H5I_BADID;
  }
  const H5I_type_t type = H5Iget_type(id);
  H5Oclose(id);
  return type;
}


// Error context for an attribute: the file itself, or a dataset/group in it.
[[noreturn]] void attribute_error(const std::string& file_name, const std::string& object, const std::string& name,
                                  const std::string& what) {
  const std::string msg = "attribute '" + name + "': " + what;
  if (object == "/") throw FileError(file_name, msg);
  throw FileError(file_name, object, msg);
}

Attribute open_attribute(hid_t file, const std::string& file_name, const std::string& object,
                         const std::string& name) {
  const htri_t exists = H5Aexists_by_name(file, object.c_str(), name.c_str(), H5P_DEFAULT);
  if (exists < 0) attribute_error(file_name, object, name, with_detail("cannot be looked up"));
  if (exists == 0) return Attribute();
  Attribute attr(H5Aopen_by_name(file, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr.valid()) attribute_error(file_name, object, name, with_detail("cannot be opened"));
  Dataspace space(H5Aget_space(attr.get()));
  if (H5Sget_simple_extent_npoints(space.get()) != 1) attribute_error(file_name, object, name, "is not a single value");
  return attr;
}

void write_scalar_attribute(hid_t file, const std::string& file_name, const std::string& object,
                            const std::string& name, hid_t type, const void* value) {
  // Replacing an attribute means deleting it first (HDF5 does not overwrite).
  if (H5Aexists_by_name(file, object.c_str(), name.c_str(), H5P_DEFAULT) > 0)
    H5Adelete_by_name(file, object.c_str(), name.c_str(), H5P_DEFAULT);
  Dataspace space(H5Screate(H5S_SCALAR));
  Attribute attr(H5Acreate_by_name(file, object.c_str(), name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                                   H5P_DEFAULT));
  if (!attr.valid() || H5Awrite(attr.get(), type, value) < 0)
    attribute_error(file_name, object, name, with_detail("cannot be written"));
}

Datatype variable_string_type() {
  Datatype t(H5Tcopy(H5T_C_S1));
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  return t;
}

}  // namespace

Dataset open_dataset(hid_t file, const std::string& file_name, const std::string& path) {
  // Through hard links only: HDF5 would follow an external link into another file.
  const LinkPath link = follow_links(file, path);
  if (!link.found) throw FileError(file_name, path, "missing");
  if (!link.leaves.empty())
    throw FileError(file_name, path, "points outside the file: " + link.leaves +
                                         "; linattn follows no links into other files");
  if (!is_dataset(file, link.hard)) throw FileError(file_name, path, "is not a dataset");
  const PropertyList access = dataset_access(file);
  Dataset ds(H5Dopen2(file, link.hard.c_str(), access.get()));
  if (!ds.valid()) throw FileError(file_name, path, with_detail("cannot be opened"));
  check_storage(file, ds.get(), file_name, path);
  return ds;
}

void check_stored_bytes(hid_t file, const std::string& file_name, const std::string& path, std::int64_t needed) {
  const Dataset ds = open_dataset(file, file_name, path);
  PropertyList dcpl(H5Dget_create_plist(ds.get()));
  // Data in other files were checked when the dataset was opened (check_storage).
  if (!dcpl.valid() || H5Pget_layout(dcpl.get()) != H5D_CONTIGUOUS || H5Pget_external_count(dcpl.get()) > 0) return;
  const hsize_t stored = H5Dget_storage_size(ds.get());
  if (static_cast<std::int64_t>(stored) < needed)
    throw FileError(file_name, path, "stores " + std::to_string(stored) + " bytes, its shape needs " +
                                         std::to_string(needed) + " (truncated or corrupt file)");
  const haddr_t offset = H5Dget_offset(ds.get());
  hsize_t file_size = 0;
  if (offset != HADDR_UNDEF && H5Fget_filesize(file, &file_size) >= 0 &&
      (offset > file_size || file_size - offset < static_cast<hsize_t>(needed)))
    throw FileError(file_name, path, "its data would end at byte " + std::to_string(offset + needed) +
                                         " of a " + std::to_string(file_size) + "-byte file (truncated file)");
  last_error_detail();
}

namespace {

Dataspace block_space(hid_t dataset, const std::vector<hsize_t>& start, const std::vector<hsize_t>& count) {
  Dataspace space(H5Dget_space(dataset));
  if (!space.valid() ||
      H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0)
    return Dataspace();
  return space;
}

}  // namespace

void read_block(hid_t dataset, hid_t memory_type, const std::vector<hsize_t>& start, const std::vector<hsize_t>& count,
                void* data, const std::string& file_name, const std::string& path) {
  const Dataspace file_space = block_space(dataset, start, count);
  const Dataspace memory(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr));
  if (!file_space.valid() || !memory.valid() ||
      H5Dread(dataset, memory_type, memory.get(), file_space.get(), H5P_DEFAULT, data) < 0)
    throw FileError(file_name, path, with_detail("cannot be read (truncated or corrupt data)"));
}

void write_block(hid_t dataset, hid_t memory_type, const std::vector<hsize_t>& start,
                 const std::vector<hsize_t>& count, const void* data, const std::string& file_name,
                 const std::string& path) {
  const bool empty = std::find(count.begin(), count.end(), hsize_t(0)) != count.end();
  Dataspace file_space = empty ? Dataspace(H5Dget_space(dataset)) : block_space(dataset, start, count);
  Dataspace memory(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr));
  if (empty && file_space.valid() && memory.valid() &&
      (H5Sselect_none(file_space.get()) < 0 || H5Sselect_none(memory.get()) < 0))
    file_space = Dataspace();
  if (!file_space.valid() || !memory.valid() ||
      H5Dwrite(dataset, memory_type, memory.get(), file_space.get(), H5P_DEFAULT, data) < 0)
    throw FileError::preformatted(write_failure(file_name, path, "cannot be written"));
}

Tensor read_block_tensor(hid_t dataset, DType dtype, const std::vector<std::int64_t>& start,
                         const std::vector<std::int64_t>& count, const std::string& file_name, const std::string& path) {
  Tensor t = Tensor::uninitialized(dtype, count);
  if (t.numel() == 0) return t;
  const Datatype memory = datatype_of(dtype);
  read_block(dataset, memory.get(), std::vector<hsize_t>(start.begin(), start.end()),
             std::vector<hsize_t>(count.begin(), count.end()), t.bytes.data(), file_name, path);
  return t;
}

void write_block_tensor(hid_t dataset, const TensorSpan& t, const std::vector<std::int64_t>& start,
                        const std::string& file_name, const std::string& path) {
  if (t.numel() == 0) return;
  const Datatype memory = datatype_of(t.dtype);
  write_block(dataset, memory.get(), std::vector<hsize_t>(start.begin(), start.end()),
              std::vector<hsize_t>(t.shape.begin(), t.shape.end()), t.bytes, file_name, path);
}

Dataset create_dataset(hid_t file, const std::string& file_name, const std::string& path, DType dtype,
                       const std::vector<std::int64_t>& shape, const std::vector<hsize_t>& chunk, bool compress) {
  const std::vector<hsize_t> dims(shape.begin(), shape.end());
  const Dataspace space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  const Datatype type = datatype_of(dtype);
  PropertyList lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  PropertyList dcpl(H5Pcreate(H5P_DATASET_CREATE));
  if (!chunk.empty()) {
    H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
    if (compress) {
      if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0)
        throw FileError(file_name, path, "gzip compression is not available in this HDF5 library");
      H5Pset_deflate(dcpl.get(), 4);
    }
  }
  // Every element is written by a block write: no fill pass first.
  H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);
  if (chunk.empty()) H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY);  // its offset is known from the start
  // A chunk cache that holds a few chunks, so that a chunk two windows share
  // is completed in memory rather than read back.
  PropertyList dapl(H5Pcreate(H5P_DATASET_ACCESS));
  H5Pset_chunk_cache(dapl.get(), 521, std::size_t(2) << 20, 1.0);
  Dataset ds(H5Dcreate2(file, path.c_str(), type.get(), space.get(), lcpl.get(), dcpl.get(), dapl.get()));
  if (!ds.valid()) throw FileError(file_name, path, with_detail("cannot be created"));
  return ds;
}

std::int64_t data_offset(hid_t dataset) {
  const haddr_t at = H5Dget_offset(dataset);
  return at == HADDR_UNDEF ? -1 : static_cast<std::int64_t>(at);
}

bool link_exists(hid_t file, const std::string& path) { return follow_links(file, path).found; }

bool is_dataset(hid_t file, const std::string& path) { return object_type(file, path) == H5I_DATASET; }
bool is_group(hid_t file, const std::string& path) { return object_type(file, path) == H5I_GROUP; }

DatasetInfo dataset_info(hid_t file, const std::string& file_name, const std::string& path) {
  const Dataset ds = open_dataset(file, file_name, path);
  const Datatype type(H5Dget_type(ds.get()));
  DatasetInfo info{};
  try {
    info.dtype = dtype_of(type.get());
  } catch (const std::invalid_argument& e) {
    throw FileError(file_name, path, e.what());
  }
  const Dataspace space(H5Dget_space(ds.get()));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) throw FileError(file_name, path, with_detail("unreadable dataspace"));
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  info.shape.assign(dims.begin(), dims.end());
  return info;
}

Tensor read_tensor(hid_t file, const std::string& file_name, const std::string& path) {
  const DatasetInfo info = dataset_info(file, file_name, path);
  if (info.shape.empty()) throw FileError(file_name, path, "is a scalar, expected an array");
  Tensor t = Tensor::uninitialized(info.dtype, info.shape);
  if (t.numel() == 0) return t;
  const Dataset ds = open_dataset(file, file_name, path);
  const Datatype memory = datatype_of(info.dtype);
  if (H5Dread(ds.get(), memory.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.bytes.data()) < 0)
    throw FileError(file_name, path, with_detail("cannot be read (truncated or corrupt data)"));
  return t;
}

std::vector<std::int64_t> read_index_vector(hid_t file, const std::string& file_name, const std::string& path,
                                            std::int64_t max_length) {
  const Dataset ds = open_dataset(file, file_name, path);
  const Datatype type(H5Dget_type(ds.get()));
  if (H5Tget_class(type.get()) != H5T_INTEGER)
    throw FileError(file_name, path, "is not an integer dataset (expected int64 offsets)");
  const Dataspace space(H5Dget_space(ds.get()));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank != 1) throw FileError(file_name, path, "rank " + std::to_string(rank) + ", expected rank 1 [N + 1]");
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space.get(), &n, nullptr);
  if (max_length >= 0 && n > static_cast<hsize_t>(max_length))
    throw FileError(file_name, path, std::to_string(n) + " entries, more than the " + std::to_string(max_length) +
                                         " that T allows (every sequence holds a token)");
  std::vector<std::int64_t> values(static_cast<std::size_t>(n));
  if (n > 0 && H5Dread(ds.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
    throw FileError(file_name, path, with_detail("cannot be read (truncated or corrupt data)"));
  return values;
}

void write_index_vector(hid_t file, const std::string& file_name, const std::string& path,
                        const std::vector<std::int64_t>& values) {
  const hsize_t n = values.size();
  const Dataspace space(H5Screate_simple(1, &n, nullptr));
  PropertyList lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  const Dataset ds(H5Dcreate2(file, path.c_str(), H5T_STD_I64LE, space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!ds.valid()) throw FileError(file_name, path, with_detail("cannot be created"));
  if (n > 0 && H5Dwrite(ds.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
    throw FileError::preformatted(write_failure(file_name, path, "cannot be written"));
}

std::vector<hsize_t> chunk_dims(const std::vector<std::int64_t>& shape, std::size_t element_size,
                                std::size_t target_bytes) {
  std::vector<hsize_t> chunk(shape.begin(), shape.end());
  double bytes = static_cast<double>(element_size);
  for (hsize_t d : chunk) bytes *= static_cast<double>(d);
  for (std::size_t a = 0; a < chunk.size() && bytes > static_cast<double>(target_bytes); ++a) {
    const double rest = bytes / static_cast<double>(chunk[a]);  // bytes of one index along axis a
    chunk[a] = std::max<hsize_t>(1, static_cast<hsize_t>(static_cast<double>(target_bytes) / rest));
    bytes = rest * static_cast<double>(chunk[a]);
  }
  return chunk;
}

void write_tensor(hid_t file, const std::string& file_name, const std::string& path, const Tensor& t,
                  const WriteOptions& options) {
  const std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
  const Dataspace space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  const Datatype type = datatype_of(t.dtype);
  const std::size_t bytes = t.bytes.size();

  PropertyList lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  PropertyList dcpl(H5Pcreate(H5P_DATASET_CREATE));
  const bool nonempty = t.numel() > 0;
  if (nonempty && (options.compress || bytes > (std::size_t(1) << 20))) {
    const std::vector<hsize_t> chunk = chunk_dims(t.shape, dtype_size(t.dtype));
    H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
    if (options.compress) {
      if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0)
        throw FileError(file_name, path, "gzip compression is not available in this HDF5 library");
      H5Pset_deflate(dcpl.get(), 4);
    }
  }
  const Dataset ds(H5Dcreate2(file, path.c_str(), type.get(), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT));
  if (!ds.valid()) throw FileError(file_name, path, with_detail("cannot be created"));
  if (nonempty && H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.bytes.data()) < 0)
    throw FileError::preformatted(write_failure(file_name, path, "cannot be written"));
}

void write_attribute(hid_t file, const std::string& file_name, const std::string& object, const std::string& name,
                     const std::string& value) {
  write_attribute(file, file_name, object, name, value.c_str());
}

void write_attribute(hid_t file, const std::string& file_name, const std::string& object, const std::string& name,
                     const char* value) {
  const Datatype type = variable_string_type();
  write_scalar_attribute(file, file_name, object, name, type.get(), &value);
}

void write_attribute(hid_t file, const std::string& file_name, const std::string& object, const std::string& name,
                     double value) {
  write_scalar_attribute(file, file_name, object, name, H5T_NATIVE_DOUBLE, &value);
}

void write_attribute(hid_t file, const std::string& file_name, const std::string& object, const std::string& name,
                     std::int64_t value) {
  write_scalar_attribute(file, file_name, object, name, H5T_NATIVE_INT64, &value);
}

std::optional<std::string> read_string_attribute(hid_t file, const std::string& file_name, const std::string& object,
                                                 const std::string& name) {
  const Attribute attr = open_attribute(file, file_name, object, name);
  if (!attr.valid()) return std::nullopt;
  const Datatype type(H5Aget_type(attr.get()));
  if (H5Tget_class(type.get()) != H5T_STRING) attribute_error(file_name, object, name, "is not a string");
  if (H5Tis_variable_str(type.get()) > 0) {
    const Datatype memory = variable_string_type();
    char* value = nullptr;
    if (H5Aread(attr.get(), memory.get(), &value) < 0) attribute_error(file_name, object, name, with_detail("cannot be read"));
    std::string out = value ? value : "";
    H5free_memory(value);
    return out;
  }
  // Fixed-length string (h5py writes numpy bytes this way), possibly NUL- or space-padded.
  const std::size_t size = H5Tget_size(type.get());
  Datatype memory(H5Tcopy(H5T_C_S1));
  H5Tset_size(memory.get(), size);
  std::string out(size, '\0');
  if (H5Aread(attr.get(), memory.get(), out.data()) < 0) attribute_error(file_name, object, name, with_detail("cannot be read"));
  out.erase(std::find(out.begin(), out.end(), '\0'), out.end());
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::optional<double> read_number_attribute(hid_t file, const std::string& file_name, const std::string& object,
                                            const std::string& name) {
  const Attribute attr = open_attribute(file, file_name, object, name);
  if (!attr.valid()) return std::nullopt;
  const Datatype type(H5Aget_type(attr.get()));
  const H5T_class_t cls = H5Tget_class(type.get());
  if (cls != H5T_INTEGER && cls != H5T_FLOAT) attribute_error(file_name, object, name, "is not a number");
  double value = 0;
  if (H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &value) < 0) attribute_error(file_name, object, name, with_detail("cannot be read"));
  return value;
}

}  // namespace linattn::hdf5
