#include "pipeline/backward_inputs.hpp"

#include <stdexcept>
#include <string>

namespace linattn::pipeline {

BackwardInputs::BackwardInputs(const std::vector<ReaderProcess*>& readers, SlotPool& slots, bool allow_external_data)
    : readers_(readers), slots_(slots), allow_external_data_(allow_external_data) {
  if (readers_.empty() || static_cast<int>(readers_.size()) > slots_.size())
    throw std::logic_error("the backward's reads need 1 to slots reader processes");
}

void BackwardInputs::start(const BackwardSources& src, std::vector<BackwardWindowRead> reads,
                           Clock::time_point deadline) {
  for (const BackwardWindowRead& r : reads)
    if (r.bytes > slots_.slot_bytes())
      throw std::logic_error("a backward window reads " + std::to_string(r.bytes) + " bytes into a slot of " +
                             std::to_string(slots_.slot_bytes()));
  src_ = &src;
  reads_ = std::move(reads);
  deadline_ = deadline;
  sent_ = taken_ = released_ = 0;
  send_ahead();
}

void BackwardInputs::send_ahead() {
  const std::size_t slots = static_cast<std::size_t>(slots_.size());
  while (sent_ < reads_.size() && sent_ < released_ + slots) {
    BlockReads request;
    request.allow_external_data = allow_external_data_;
    request.blocks = reads_[sent_].blocks;
    const std::int64_t base = slots_.offset(static_cast<int>(sent_ % slots));
    for (BlockRead& b : request.blocks) b.offset += base;
    readers_[sent_ % readers_.size()]->send_read(request);
    ++sent_;
  }
}

BackwardWindowData BackwardInputs::next() {
  if (taken_ >= reads_.size()) throw std::logic_error("no backward window read left");
  if (released_ != taken_) throw std::logic_error("a backward window taken before the last one was released");
  const Clock::time_point asked = Clock::now();
  readers_[taken_ % readers_.size()]->wait_read(deadline_);
  waited_ += std::chrono::duration<double>(Clock::now() - asked).count();
  const int slot = static_cast<int>(taken_ % static_cast<std::size_t>(slots_.size()));
  BackwardWindowData d = unpack(reads_[taken_], *src_, slots_.data(slot));
  ++taken_;
  return d;
}

void BackwardInputs::release() {
  if (released_ >= taken_) throw std::logic_error("no backward window to release");
  ++released_;
  send_ahead();
}

void BackwardInputs::finish() {
  for (ReaderProcess* r : readers_) {
    try {
      r->drain(deadline_);
      r->close_case(deadline_);
    } catch (const std::exception&) {
      r->stop();  // a reader in an unknown state: the next read starts a fresh one
    }
  }
  reads_.clear();
  sent_ = taken_ = released_ = 0;
}

}  // namespace linattn::pipeline
