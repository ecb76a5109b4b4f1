// The write stage: one thread that owns every HDF5 call of the batch process
// (Debian's libhdf5 is not thread-safe; the reader process has its own copy
// of the library, so reading and writing still run at the same time). The
// compute thread queues jobs: open a case's output file, write a window from
// an output slot (the slot is released once written), finish or abort.
// A case whose writes failed records the error and skips its later jobs.
//
// The window writes themselves need no HDF5 where the output's datasets are
// contiguous (no --compress): their bytes go to offsets fixed when the file
// was created (raw_window_writes.hpp), so a pool of raw writers pwrites them,
// each window cut into pieces that several threads share, while the HDF5
// thread creates the next file or closes the last. One HDF5 writer was the
// bound of `run` (BENCHMARKS.md, "End to end"). The HDF5 thread closes a
// file only once its raw writes are done.
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
#include <condition_variable>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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
  std::string error;  // set before `failed`, under `mutex`
  std::int64_t error_offset = -1;  // a raw write's failure: where in the file

  // Raw writes (decided when the case is queued): the .partial file opened
  // for pwrite and the datasets' offsets, set by the open job.
  bool raw = false;
  int raw_fd = -1;
  RawOffsets offsets;
  std::mutex mutex;
  std::condition_variable changed;
  bool opened = false;  // the open job ran (failed or not)
  int pending = 0;      // raw window writes queued and not done
  std::function<void()> held_back;  // finish's or abort's HDF5 job, queued when pending reaches 0
  bool cleaned = false;  // fail() closed and removed what was made (HDF5 thread)
};

// Seconds each thread spent working (not waiting), for the run's report.
struct WriteTimes {
  double writing = 0, committing = 0;
};

class WriteStage {
 public:
  // raw_writers: threads writing contiguous outputs' windows (0: every
  // window through HDF5 on its one thread, as compressed outputs always are).
  WriteStage(SlotPool& outputs, ProgressReporter& progress, int raw_writers = 0);
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
  // writing: seconds of the HDF5 thread's window writes, or of the raw
  // writers' together (several at once: it can exceed the wall time).
  WriteTimes times() const { return {writing_.load(), committing_.load()}; }
  int raw_writers() const { return static_cast<int>(raw_threads_.size()); }

 private:
  // Records the first error (any thread); a raw write's (file_offset >= 0)
  // replaces a raw one farther into the file.
  static void note_failure(CaseWrite& c, const std::string& error, std::int64_t file_offset = -1);
  // Whether a raw piece at file_offset is left unwritten: the case failed, and not farther into the file.
  static bool skip_after_failure(CaseWrite& c, std::int64_t file_offset);
  // note_failure, then closes and removes what the case made (HDF5 thread, no raw writes pending).
  void fail(CaseWrite& c, const std::string& error);
  void write_raw(const std::shared_ptr<CaseWrite>& c, const Window& w, const WindowLayout& l, int slot,
                 std::int64_t bytes_moved);
  // Queues an HDF5 job of the case now, or holds it until its raw writes are done.
  void after_raw_writes(const std::shared_ptr<CaseWrite>& c, std::function<void()> job);
  void wait_for_raw_writes();  // of every case
  SlotPool& outputs_;
  ProgressReporter& progress_;
  std::atomic<double> writing_{0}, committing_{0};
  WorkQueue<std::function<void()>> jobs_{64}, commits_{64};
  // Unbounded: raw writers queue pieces too, and one that waited for room
  // could wait for itself. The output slots bound it (each window holds one).
  WorkQueue<std::function<void()>> raw_jobs_{std::numeric_limits<std::size_t>::max()};
  std::mutex raw_mutex_;
  std::condition_variable raw_idle_;
  int raw_in_flight_ = 0;  // windows queued to the raw writers and not done
  std::thread writer_, committer_;
  std::vector<std::thread> raw_threads_;
};

}  // namespace linattn::pipeline
