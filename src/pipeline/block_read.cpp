#include "pipeline/block_read.hpp"

#include "io/hdf5_dataset.hpp"
#include "io/hdf5_file.hpp"
#include "io/hdf5_types.hpp"
#include "io/input_file.hpp"

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

void read_blocks(const std::vector<BlockRead>& blocks, unsigned char* region, std::int64_t region_bytes,
                 OpenDatasets& open) {
  for (const BlockRead& b : blocks) {
    const std::int64_t bytes = b.bytes();
    if (b.offset < 0 || bytes < 0 || b.offset > region_bytes || bytes > region_bytes - b.offset)
      throw std::runtime_error("a block read outside the shared input region");
    unsigned char* dst = region + b.offset;
    const hdf5::Datatype type = hdf5::datatype_of(b.dtype);
    const std::vector<hsize_t> start(b.start.begin(), b.start.end()), count(b.count.begin(), b.count.end());
    hdf5::read_block(open.dataset(b.file, b.path), type.get(), start, count, dst, b.file, b.path);
    if (b.check == BlockCheck::finite) check_finite(dst, b.dtype, b.count, b.start, b.file, b.path, b.window);
    else if (b.check == BlockCheck::log_decays)
      check_log_decays(dst, b.dtype, b.count, b.start, b.file, b.path, b.window);
  }
}

}  // namespace linattn::pipeline
