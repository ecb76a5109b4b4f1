// Datasets and attributes: whole tensors in and out of an open HDF5 file.
// Paths are relative to the file root ("case0/q", or "q" at the root). Errors
// are FileErrors naming the file and the dataset.
#pragma once

#include "core/tensor.hpp"
#include "core/tensor_span.hpp"
#include "io/hdf5_handles.hpp"

#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace linattn::hdf5 {

struct WriteOptions {
  bool compress = false;  // gzip level 4 (always with a chunked layout)
};

// True when every link on the path exists (so that HDF5 is never asked for a
// link below a missing group, which is an error rather than "no"); an
// external link exists too, though nothing behind it is followed (hdf5_links.hpp).
bool link_exists(hid_t file, const std::string& path);
// A dataset or group in this file (false behind an external link).
bool is_dataset(hid_t file, const std::string& path);
bool is_group(hid_t file, const std::string& path);

struct DatasetInfo {
  DType dtype;
  std::vector<std::int64_t> shape;
};

// Shape and element type, without reading the data. An unsupported datatype
// (integer, string, unknown float layout) is a FileError.
DatasetInfo dataset_info(hid_t file, const std::string& file_name, const std::string& path);

// Reads the whole dataset in its own element type, bit-exact.
Tensor read_tensor(hid_t file, const std::string& file_name, const std::string& path);

// Writes t as a new dataset (creating missing groups on the path). Datasets
// over 1 MiB, and every compressed one, use a chunked layout.
void write_tensor(hid_t file, const std::string& file_name, const std::string& path, const Tensor& t,
                  const WriteOptions& options);

// A rank-1 integer dataset (cu_seqlens) read as int64, and written as int64.
// Reading throws FileError for a float or other non-integer type, another
// rank, or an unreadable dataset.
// max_length (when >= 0) refuses a longer vector before reading it.
std::vector<std::int64_t> read_index_vector(hid_t file, const std::string& file_name, const std::string& path,
                                            std::int64_t max_length = -1);
void write_index_vector(hid_t file, const std::string& file_name, const std::string& path,
                        const std::vector<std::int64_t>& values);

// Throws FileError when a contiguous dataset stores fewer bytes than `needed`,
// or its data would lie past the end of the file (a truncated file). Chunked
// datasets are left to the reads, which fail on a damaged chunk (a missing
// one is refused when the dataset is opened).
void check_stored_bytes(hid_t file, const std::string& file_name, const std::string& path, std::int64_t needed);

// Opens a dataset for the block reads and writes below, through hard links
// only, and checks where its data are and that they were written
// (check_storage, dataset_storage.hpp). FileError when it is absent, not a
// dataset, behind an external link, or refused by check_storage. Every
// function here that reads a dataset opens it this way.
Dataset open_dataset(hid_t file, const std::string& file_name, const std::string& path);

// The block [start, start + count) of a dataset, from or into contiguous
// memory of `memory_type` (HDF5 converts when it differs from the file's).
void read_block(hid_t dataset, hid_t memory_type, const std::vector<hsize_t>& start, const std::vector<hsize_t>& count,
                void* data, const std::string& file_name, const std::string& path);
// A count of 0 in any dimension writes nothing.
void write_block(hid_t dataset, hid_t memory_type, const std::vector<hsize_t>& start,
                 const std::vector<hsize_t>& count, const void* data, const std::string& file_name,
                 const std::string& path);

// read_block into a new tensor of `dtype` and shape `count` (the window
// reads of `linattn backward`).
Tensor read_block_tensor(hid_t dataset, DType dtype, const std::vector<std::int64_t>& start,
                         const std::vector<std::int64_t>& count, const std::string& file_name, const std::string& path);
// write_block of a whole tensor at `start` (its shape is the block's).
void write_block_tensor(hid_t dataset, const TensorSpan& t, const std::vector<std::int64_t>& start,
                        const std::string& file_name, const std::string& path);

// Creates an empty dataset of `shape` with the given chunk dimensions (none:
// contiguous) and optional gzip, for block writes. A contiguous one is
// allocated in the file at once (no fill pass), so that data_offset names
// where its bytes go.
Dataset create_dataset(hid_t file, const std::string& file_name, const std::string& path, DType dtype,
                       const std::vector<std::int64_t>& shape, const std::vector<hsize_t>& chunk, bool compress);

// The file offset of a contiguous dataset's data (row-major, in the file's
// datatype), or -1 when it has none (chunked, or not allocated yet).
std::int64_t data_offset(hid_t dataset);

// Chunk dimensions for a dataset: whole trailing dimensions, leading ones cut
// so that a chunk holds about target_bytes.
std::vector<hsize_t> chunk_dims(const std::vector<std::int64_t>& shape, std::size_t element_size,
                                std::size_t target_bytes = std::size_t(1) << 20);

// Attributes on a file, group or dataset (`object` is the path of the object,
// "/" for the file). Strings are variable-length UTF-8 (h5py reads them as
// str), numbers are scalars.
void write_attribute(hid_t file, const std::string& file_name, const std::string& object, const std::string& name,
                     const std::string& value);
void write_attribute(hid_t file, const std::string& file_name, const std::string& object, const std::string& name,
                     const char* value);
void write_attribute(hid_t file, const std::string& file_name, const std::string& object, const std::string& name,
                     double value);
void write_attribute(hid_t file, const std::string& file_name, const std::string& object, const std::string& name,
                     std::int64_t value);

// std::nullopt when the attribute is absent; FileError when it has another type.
std::optional<std::string> read_string_attribute(hid_t file, const std::string& file_name, const std::string& object,
                                                 const std::string& name);
std::optional<double> read_number_attribute(hid_t file, const std::string& file_name, const std::string& object,
                                            const std::string& name);

}  // namespace linattn::hdf5
