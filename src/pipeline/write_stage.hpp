// The write stage: one thread that owns every HDF5 call of the batch process
// (Debian's libhdf5 is not thread-safe; the reader process has its own copy
// of the library, so reading and writing still run at the same time). The
// compute thread queues jobs: open a case's output file, write a window from
// an output slot (the slot is released once written), finish or abort.
// A case whose writes failed records the error and skips its later jobs.
#pragma once

#include "pipeline/progress_reporter.hpp"
#include "io/output_stream.hpp"
#include "pipeline/host_buffers.hpp"
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
  std::unique_ptr<OutputStream> stream;
  int cleanup_token = -1;
  std::atomic<bool> failed{false};
  std::string error;  // set by the writer thread before `failed`
};

class WriteStage {
 public:
  WriteStage(SlotPool& outputs, ProgressReporter& progress);
  ~WriteStage();  // finishes every queued job

  std::shared_ptr<CaseWrite> open(const std::string& path, const Problem& p, const OutputLayout& layout);
  void write(const std::shared_ptr<CaseWrite>& c, const Window& w, const WindowLayout& l, int slot,
             std::int64_t bytes_moved);
  // done(error) runs on the writer thread once the file is committed ("") or failed.
  void finish(const std::shared_ptr<CaseWrite>& c, const RunRecord& record, bool durable,
              std::function<void(const std::string&)> done);
  void abort(const std::shared_ptr<CaseWrite>& c);

 private:
  void fail(CaseWrite& c, const std::string& error);
  SlotPool& outputs_;
  ProgressReporter& progress_;
  WorkQueue<std::function<void()>> jobs_{64};
  std::thread thread_;
};

}  // namespace linattn::pipeline
