// The streamed backward's reads, done ahead (docs/ARCHITECTURE.md, "The
// streamed backward"): reader processes (read_stage.hpp) read each window's
// blocks into a slot of the shared input region while the kernels run on the
// window before, as run's pipeline reads its windows. Read i goes to slot
// i mod slots and reader i mod readers, at most one read per slot ahead of the
// window being taken: a read goes into a slot once the window that had it is
// released, so the kernels read their window where the reader put it. A
// reader that crashed or hung fails the case with
// ReaderLost (its cause typed), a bad file with FileError.
#pragma once

#include "pipeline/backward_window_reads.hpp"
#include "pipeline/host_buffers.hpp"
#include "pipeline/read_stage.hpp"

#include <cstddef>
#include <vector>

namespace linattn::pipeline {

class BackwardInputs {
 public:
  BackwardInputs(const std::vector<ReaderProcess*>& readers, SlotPool& slots, bool allow_external_data);

  // The reads of one case, in the order next() hands them out, each until
  // `deadline` (--case-timeout). Sends the first ones.
  void start(const BackwardSources& src, std::vector<BackwardWindowRead> reads, Clock::time_point deadline);
  // The next read's tensors, in its slot (waits for it); the one taken before must have been released.
  BackwardWindowData next();
  // The window last taken is done with its slot: sends the read that reuses it.
  void release();
  // After the case, or after it failed: collects what is still outstanding
  // and closes the files the readers opened. Never throws.
  void finish();

  double waited_seconds() const { return waited_; }  // in next(), for the reads

 private:
  void send_ahead();
  std::vector<ReaderProcess*> readers_;
  SlotPool& slots_;
  bool allow_external_data_;
  const BackwardSources* src_ = nullptr;
  std::vector<BackwardWindowRead> reads_;
  Clock::time_point deadline_;
  std::size_t sent_ = 0, taken_ = 0, released_ = 0;
  double waited_ = 0;
};

}  // namespace linattn::pipeline
