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
//
// With several writers (--writers), a case's output file is mapped into
// memory once created (mapped_output.hpp) and each window's runs are cut into
// pieces that a pool of threads copies into it at once (copy_pool.hpp); HDF5,
// still on the one writer thread, creates the file and writes its metadata.
//
// Context parallel's ranks share one output file (context_parallel_run.hpp):
// rank 0's stage creates it as usual (its contiguous datasets allocated at
// once, so their offsets are known: share) and finishes it after every rank
// wrote; every rank pwrites its windows at those offsets
// (raw_window_writes.hpp; mapped as above with several writers), the others'
// stages after open_raw, without HDF5.
#pragma once

#include "io/output_stream.hpp"
#include "pipeline/copy_pool.hpp"
#include "pipeline/host_buffers.hpp"
#include "pipeline/mapped_output.hpp"
#include "pipeline/progress_reporter.hpp"
#include "pipeline/raw_window_writes.hpp"
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
  int raw_fd = -1;        // open_raw: the .partial file another process created, written with pwrite
  RawOffsets raw;         // where its datasets' bytes lie (open_raw, share, or mapped)
  std::unique_ptr<MappedOutput> mapped;  // several writers: the file's datasets, mapped
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
  // writers > 1: output files are mapped and their windows copied by that many threads.
  WriteStage(SlotPool& outputs, ProgressReporter& progress, int writers = 1);
  ~WriteStage();  // finishes every queued job

  std::shared_ptr<CaseWrite> open(const std::string& path, const Problem& p, const OutputLayout& layout, bool durable);
  void write(const std::shared_ptr<CaseWrite>& c, const Window& w, const WindowLayout& l, int slot,
             std::int64_t bytes_moved);
  // done(error) runs once the file is committed ("") or failed.
  void finish(const std::shared_ptr<CaseWrite>& c, const RunRecord& record,
              std::function<void(const std::string&)> done);
  void abort(const std::shared_ptr<CaseWrite>& c);

  // Waits for open's job; the file's dataset offsets (all of them known only
  // when it is not compressed), or the error that failed the case ("" when
  // none). From then on the case's windows are written with pwrite at those
  // offsets too, as other processes write theirs: HDF5's own writes go
  // through a sieve buffer that could write back stale bytes around theirs.
  std::string share(const std::shared_ptr<CaseWrite>& c, RawOffsets& at);
  // A .partial output file that another process created with `at` (and will
  // finish): write() pwrites the windows there. finish_raw makes what this
  // stage wrote durable (fsync, unless not durable), closes it, then calls
  // done(error) on the writer thread; the file stays where it is either way.
  std::shared_ptr<CaseWrite> open_raw(const std::string& partial, const Problem& p, const OutputLayout& layout,
                                      const RawOffsets& at, bool durable);
  void finish_raw(const std::shared_ptr<CaseWrite>& c, std::function<void(const std::string&)> done);
  // Waits until every job queued so far is done, commits included.
  void drain();
  WriteTimes times() const { return {writing_.load(), committing_.load()}; }
  int writers() const { return copies_ ? copies_->size() : 1; }
  int mapped_files() const { return mapped_files_.load(); }  // files written through a mapping so far

 private:
  void fail(CaseWrite& c, const std::string& error);
  void map(CaseWrite& c, const std::string& partial);
  SlotPool& outputs_;
  ProgressReporter& progress_;
  std::atomic<double> writing_{0}, committing_{0};
  std::unique_ptr<CopyPool> copies_;  // several writers only
  std::atomic<int> mapped_files_{0};
  WorkQueue<std::function<void()>> jobs_{64}, commits_{64};
  std::thread writer_, committer_;
};

}  // namespace linattn::pipeline
