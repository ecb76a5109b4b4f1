#include "pipeline/reader_group.hpp"

#include <algorithm>
#include <stdexcept>

namespace linattn::pipeline {

ReaderGroup::ReaderGroup(std::string exe, int slots, int readers, std::int64_t slot_bytes)
    : exe_(std::move(exe)), slot_count_(slots), reader_count_(readers) {
  if (readers < 1 || readers > slots) throw std::logic_error("a reader group needs 1 to slots readers");
  start(slot_bytes);
}

void ReaderGroup::start(std::int64_t slot_bytes) {
  slots_ = std::make_unique<SlotRegion>(slot_count_, slot_bytes, true);
  for (int i = 0; i < reader_count_; ++i)
    readers_.push_back(std::make_unique<ReaderProcess>(exe_, slots_->region().fd(), slots_->region().bytes()));
}

void ReaderGroup::ensure_slot_bytes(std::int64_t slot_bytes) {
  if (slots_->pool().slot_bytes() >= slot_bytes) return;
  stop();
  replaced_busy_ = busy_seconds();
  readers_.clear();
  slots_.reset();  // unmapped before the larger one is made: the peak is the new one alone
  start(slot_bytes);
}

std::vector<ReaderProcess*> ReaderGroup::processes() const {
  std::vector<ReaderProcess*> p;
  for (const auto& r : readers_) p.push_back(r.get());
  return p;
}

double ReaderGroup::busy_seconds() const {
  double s = replaced_busy_;
  for (const auto& r : readers_) s += r->busy_seconds();
  return s;
}

std::int64_t ReaderGroup::stop() {
  for (auto& r : readers_) {
    r->stop();
    peak_rss_ = std::max(peak_rss_, r->peak_rss_bytes());
  }
  return peak_rss_;
}

}  // namespace linattn::pipeline
