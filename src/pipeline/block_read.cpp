#include "pipeline/block_read.hpp"

#include "io/hdf5_dataset.hpp"
#include "io/hdf5_file.hpp"
#include "io/hdf5_types.hpp"
#include "io/input_file.hpp"

#include <algorithm>
#include <stdexcept>

namespace linattn::pipeline {

std::int64_t BlockRead::bytes() const {
  std::int64_t n = static_cast<std::int64_t>(dtype_size(dtype));
  for (std::int64_t c : count) n *= c;
  return n;
}

hid_t OpenDatasets::dataset(const std::string& file, const std::string& path) {
  const auto key = std::make_pair(file, path);
  auto found = datasets_.find(key);
  if (found != datasets_.end()) return found->second.get();
  auto f = files_.find(file);
  if (f == files_.end()) f = files_.emplace(file, hdf5::open_read_only(file)).first;
  return datasets_.emplace(key, hdf5::open_dataset(f->second.get(), file, path)).first->second.get();
}

void OpenDatasets::clear() {
  datasets_.clear();  // before their files
  files_.clear();
}

std::int64_t read_counting_nonfinite(hid_t dataset, hid_t memory_type, DType dtype,
                                     const std::vector<hsize_t>& start, const std::vector<hsize_t>& count,
                                     unsigned char* dst, const std::string& file, const std::string& path) {
  std::int64_t token_elements = 1;
  for (std::size_t d = 2; d < count.size(); ++d) token_elements *= static_cast<std::int64_t>(count[d]);
  const std::int64_t token_bytes = token_elements * static_cast<std::int64_t>(dtype_size(dtype));
  const hsize_t step =
      static_cast<hsize_t>(std::max<std::int64_t>(1, kCachedBlockBytes / std::max<std::int64_t>(1, token_bytes)));
  std::int64_t nonfinite = 0;
  std::vector<hsize_t> piece_start = start, piece_count = count;
  piece_count[0] = 1;
  for (hsize_t row = 0; row < count[0]; ++row)
    for (hsize_t t = 0; t < count[1]; t += step) {
      piece_start[0] = start[0] + row;
      piece_start[1] = start[1] + t;
      piece_count[1] = std::min(step, count[1] - t);
      unsigned char* piece = dst + static_cast<std::int64_t>(row * count[1] + t) * token_bytes;
      hdf5::read_block(dataset, memory_type, piece_start, piece_count, piece, file, path);
      nonfinite += nonfinite_count(piece, dtype, static_cast<std::int64_t>(piece_count[1]) * token_elements);
    }
  return nonfinite;
}

void read_finite_block(hid_t dataset, hid_t memory_type, DType dtype, const std::vector<hsize_t>& start,
                       const std::vector<hsize_t>& count, unsigned char* dst, const std::string& file,
                       const std::string& path, const std::string& window) {
  if (read_counting_nonfinite(dataset, memory_type, dtype, start, count, dst, file, path) == 0) return;
  check_finite(dst, dtype, std::vector<std::int64_t>(count.begin(), count.end()),
               std::vector<std::int64_t>(start.begin(), start.end()), file, path, window);
}

void read_blocks(const std::vector<BlockRead>& blocks, unsigned char* region, std::int64_t region_bytes,
                 OpenDatasets& open) {
  for (const BlockRead& b : blocks) {
    const std::int64_t bytes = b.bytes();
    if (b.offset < 0 || bytes < 0 || b.offset > region_bytes || bytes > region_bytes - b.offset)
      throw std::runtime_error("a block read outside the shared input region");
    unsigned char* dst = region + b.offset;
    const hdf5::Datatype type = hdf5::datatype_of(b.dtype);
    const std::vector<hsize_t> start(b.start.begin(), b.start.end()), count(b.count.begin(), b.count.end());
    if (b.check == BlockCheck::finite && count.size() >= 2) {
      read_finite_block(open.dataset(b.file, b.path), type.get(), b.dtype, start, count, dst, b.file, b.path, b.window);
      continue;
    }
    hdf5::read_block(open.dataset(b.file, b.path), type.get(), start, count, dst, b.file, b.path);
    if (b.check == BlockCheck::finite) check_finite(dst, b.dtype, b.count, b.start, b.file, b.path, b.window);
    else if (b.check == BlockCheck::log_decays)
      check_log_decays(dst, b.dtype, b.count, b.start, b.file, b.path, b.window);
  }
}

}  // namespace linattn::pipeline
