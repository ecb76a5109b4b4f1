// The write stage: one thread that owns every HDF5 call of the batch process
// (Debian's libhdf5 is not thread-safe; the reader process has its own copy
// of the library, so reading and writing still run at the same time). The
// compute thread queues jobs: open a case's output file, write a window from
// an output slot (the slot is released once written), finish or abort.
// A case whose writes failed records the error and skips its later jobs.
//
// Making a file durable (fsync, rename, fsync of the directory) needs no
// HDF5, and waits on the disk: a second thread does it, so that the writer
// goes on with the next case meanwhile. With durable outputs the writer also
// starts the disk's writeback after every window (sync_file_range), so that
// the final fsync finds little left to do.
#pragma once

#include "io/output_stream.hpp"
#include "pipeline/host_buffers.hpp"
#include "pipeline/progress_reporter.hpp"
#include "pipeline/window_plan.hpp"
#include "pipeline/work_queue.hpp"

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace linattn::pipeline {

struct CaseWrite {
  std::string path;
  Problem problem;
  OutputLayout layout;
  bool durable = true;
  std::unique_ptr<OutputStream> stream;
  int writeback_fd = -1;  // the .partial file, for sync_file_range
  int cleanup_token = -1;
  std::atomic<bool> failed{false};
  std::string error;  // set before `failed`
};

// Seconds each thread spent working (not waiting), for the run's report.
struct WriteTimes {
  double writing = 0, committing = 0;
};

class WriteStage {
 public:
  WriteStage(SlotPool& outputs, ProgressReporter& progress);
  ~WriteStage();  // finishes every queued job

  std::shared_ptr<CaseWrite> open(const std::string& path, const Problem& p, const OutputLayout& layout, bool durable);
  void write(const std::shared_ptr<CaseWrite>& c, const Window& w, const WindowLayout& l, int slot,
             std::int64_t bytes_moved);
  // done(error) runs once the file is committed ("") or failed.
  void finish(const std::shared_ptr<CaseWrite>& c, const RunRecord& record,
              std::function<void(const std::string&)> done);
  void abort(const std::shared_ptr<CaseWrite>& c);
  // Waits until every job queued so far is done, commits included.
  void drain();
  WriteTimes times() const { return {writing_.load(), committing_.load()}; }

 private:
  void fail(CaseWrite& c, const std::string& error);
  SlotPool& outputs_;
  ProgressReporter& progress_;
  std::atomic<double> writing_{0}, committing_{0};
  WorkQueue<std::function<void()>> jobs_{64}, commits_{64};
  std::thread writer_, committer_;
};

}  // namespace linattn::pipeline
