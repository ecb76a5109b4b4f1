// A batch's reader processes and the input slots they read into
// (docs/ARCHITECTURE.md, "The pipeline"): one memfd region shared with the
// readers, page-locked under CUDA so that the kernels' uploads copy straight
// from it, cut into equal slots. `run` (app/batch_run.cpp) and `backward`
// (app/backward_batch.cpp) each hold one for their whole batch.
#pragma once

#include "pipeline/host_buffers.hpp"
#include "pipeline/read_stage.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace linattn::pipeline {

class ReaderGroup {
 public:
  // exe: the program each reader runs (read_stage.hpp); `readers` at most `slots`.
  ReaderGroup(std::string exe, int slots, int readers, std::int64_t slot_bytes);

  // Slots of at least slot_bytes: when they are smaller, a new region (the
  // readers are restarted on it). Only between cases: nothing may be in flight.
  void ensure_slot_bytes(std::int64_t slot_bytes);

  SlotPool& slots() { return slots_->pool(); }
  std::int64_t slot_bytes() const { return slots_->pool().slot_bytes(); }
  bool pinned() const { return slots_->region().pinned(); }

  std::size_t size() const { return readers_.size(); }
  ReaderProcess& reader(std::size_t i) { return *readers_[i % readers_.size()]; }
  std::vector<ReaderProcess*> processes() const;

  // Seconds the readers spent reading, replaced ones included.
  double busy_seconds() const;
  // Stops the readers (a later request starts a fresh one); returns the
  // largest peak RSS of any reader so far.
  std::int64_t stop();

 private:
  void start(std::int64_t slot_bytes);
  std::string exe_;
  int slot_count_, reader_count_;
  std::unique_ptr<SlotRegion> slots_;
  std::vector<std::unique_ptr<ReaderProcess>> readers_;
  double replaced_busy_ = 0;  // of the readers of earlier regions
  std::int64_t peak_rss_ = 0;
};

}  // namespace linattn::pipeline
