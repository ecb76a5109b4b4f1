#include "pipeline/write_stage.hpp"

#include "io/file_error.hpp"
#include "pipeline/raw_window_writes.hpp"
#include "pipeline/signal_cleanup.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <limits>

namespace linattn::pipeline {
namespace {

void add_seconds(std::atomic<double>& total, std::chrono::steady_clock::time_point since) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  double old = total.load();
  while (!total.compare_exchange_weak(old, old + s)) {
  }
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Pieces of a window that threads share: big enough that a pwrite costs
// little beside its bytes, small enough that a 64 MiB window spreads.
constexpr std::int64_t kRawPieceBytes = std::int64_t(8) << 20;

// Every dataset the stream writes holds elements: an empty one has no offset in the file.
bool datasets_have_elements(const Problem& p, const OutputLayout& layout) {
  auto elements = [](const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    return n;
  };
  return elements(p.o_shape()) > 0 && (!layout.snapshots || elements(p.h_shape()) > 0) &&
         elements(p.state_shape()) > 0 && (!layout.normalize || elements(p.z_shape()) > 0);
}

}  // namespace

WriteStage::WriteStage(SlotPool& outputs, ProgressReporter& progress, int raw_writers)
    : outputs_(outputs), progress_(progress) {
  writer_ = std::thread([this] {
    while (auto job = jobs_.pop()) (*job)();
    commits_.close();
  });
  committer_ = std::thread([this] {
    while (auto job = commits_.pop()) (*job)();
  });
  for (int i = 0; i < raw_writers; ++i)
    raw_threads_.emplace_back([this] {
      while (auto job = raw_jobs_.pop()) (*job)();
    });
}

WriteStage::~WriteStage() {
  wait_for_raw_writes();  // they queue the last HDF5 jobs (the closes they held back)
  jobs_.close();
  writer_.join();
  committer_.join();
  raw_jobs_.close();
  for (std::thread& t : raw_threads_) t.join();
}

void WriteStage::note_failure(CaseWrite& c, const std::string& error, std::int64_t file_offset) {
  std::lock_guard<std::mutex> lock(c.mutex);
  // Pieces fail in any order: of the raw failures the one nearest the file's
  // start is reported, the dataset the HDF5 path (in file order) would name.
  const bool nearer = file_offset >= 0 && c.error_offset >= 0 && file_offset < c.error_offset;
  if (c.failed.load() && !nearer) return;
  c.error = error;
  c.error_offset = file_offset;
  c.failed.store(true);
}

bool WriteStage::skip_after_failure(CaseWrite& c, std::int64_t file_offset) {
  if (!c.failed.load()) return false;
  std::lock_guard<std::mutex> lock(c.mutex);
  // A piece before a raw failure is still written: if it fails too, it names
  // the dataset, whatever order the pieces ran in.
  return c.error_offset < 0 || file_offset >= c.error_offset;
}

void WriteStage::fail(CaseWrite& c, const std::string& error) {
  note_failure(c, error);
  if (c.cleaned) return;
  c.cleaned = true;
  close_fd(c.writeback_fd);
  close_fd(c.raw_fd);
  c.stream.reset();  // removes the .partial file
  unregister_partial(c.cleanup_token);
  c.cleanup_token = -1;
}

std::shared_ptr<CaseWrite> WriteStage::open(const std::string& path, const Problem& p, const OutputLayout& layout,
                                            bool durable) {
  auto c = std::make_shared<CaseWrite>();
  c->path = path;
  c->problem = p;
  c->layout = layout;
  c->durable = durable;
  c->raw = !raw_threads_.empty() && !layout.compress && datasets_have_elements(p, layout);
  jobs_.push([this, c] {
    if (!creation_begins()) {  // interrupted: the process is exiting
      fail(*c, "interrupted");
    } else {
      try {
        c->cleanup_token = register_partial(c->path + ".partial");
        c->stream = std::make_unique<OutputStream>(c->path, c->problem, c->layout);
        if (c->durable) c->writeback_fd = ::open(c->stream->partial_path().c_str(), O_RDONLY | O_CLOEXEC);
        if (c->raw) {
          c->offsets = c->stream->raw_offsets();
          if (!c->offsets.complete(c->layout.snapshots, c->layout.normalize))
            throw FileError(c->path, "HDF5 gave no file offset for a contiguous dataset (raw writes need one)");
          c->raw_fd = ::open(c->stream->partial_path().c_str(), O_WRONLY | O_CLOEXEC);
          if (c->raw_fd < 0) throw FileError(c->stream->partial_path(), "cannot be opened for writing");
        }
      } catch (const std::exception& e) {
        fail(*c, e.what());
      }
      creation_ends();
    }
    std::lock_guard<std::mutex> lock(c->mutex);
    c->opened = true;
    c->changed.notify_all();
  });
  return c;
}

void WriteStage::write(const std::shared_ptr<CaseWrite>& c, const Window& w, const WindowLayout& l, int slot,
                       std::int64_t bytes_moved) {
  if (c->raw) {
    write_raw(c, w, l, slot, bytes_moved);
    return;
  }
  jobs_.push([this, c, w, l, slot, bytes_moved] {
    const auto start = std::chrono::steady_clock::now();
    if (!c->failed.load()) {
      try {
        const unsigned char* base = outputs_.data(slot);
        c->stream->write_o(w.t0, w.t1, base + l.o);
        c->stream->write_h(w.chunk0, w.chunks, base + l.h);
        c->stream->write_final(l.finished_row0, l.finished_rows, base + l.final_state, base + l.final_z);
        // Start the disk on what is written (best effort; the fsync at the end is what counts).
        if (c->writeback_fd >= 0) ::sync_file_range(c->writeback_fd, 0, 0, SYNC_FILE_RANGE_WRITE);
        progress_.advance(window_tokens(c->problem, w), bytes_moved);
      } catch (const std::exception& e) {
        fail(*c, e.what());
      }
    }
    outputs_.release(slot);
    add_seconds(writing_, start);
  });
}

// A window written by the raw writers: the first to take it waits for the
// case's file (the open job on the HDF5 thread, which never waits for raw
// writes), cuts the window into pieces and shares them; the last piece done
// releases the slot, and the case's last window queues the close it held back.
void WriteStage::write_raw(const std::shared_ptr<CaseWrite>& c, const Window& w, const WindowLayout& l, int slot,
                           std::int64_t bytes_moved) {
  {
    std::lock_guard<std::mutex> lock(c->mutex);
    ++c->pending;
  }
  {
    std::lock_guard<std::mutex> lock(raw_mutex_);
    ++raw_in_flight_;
  }
  struct WindowWrite {
    std::shared_ptr<CaseWrite> c;
    Window w;
    WindowLayout l;
    int slot = 0;
    std::int64_t bytes_moved = 0;
    std::atomic<int> left{0};
  };
  auto job = std::make_shared<WindowWrite>();
  job->c = c;
  job->w = w;
  job->l = l;
  job->slot = slot;
  job->bytes_moved = bytes_moved;
  auto window_done = [this](WindowWrite& j) {
    CaseWrite& cw = *j.c;
    if (!cw.failed.load()) {
      // Start the disk on what is written (best effort; the fsync at the end is what counts).
      if (cw.writeback_fd >= 0) ::sync_file_range(cw.writeback_fd, 0, 0, SYNC_FILE_RANGE_WRITE);
      progress_.advance(window_tokens(cw.problem, j.w), j.bytes_moved);
    }
    outputs_.release(j.slot);
    std::function<void()> held;
    {
      std::lock_guard<std::mutex> lock(cw.mutex);
      if (--cw.pending == 0) {
        held = std::move(cw.held_back);
        cw.held_back = nullptr;
      }
    }
    if (held) jobs_.push(std::move(held));
    std::lock_guard<std::mutex> lock(raw_mutex_);
    --raw_in_flight_;
    raw_idle_.notify_all();
  };
  raw_jobs_.push([this, job, window_done] {
    CaseWrite& cw = *job->c;
    {
      std::unique_lock<std::mutex> lock(cw.mutex);
      cw.changed.wait(lock, [&] { return cw.opened; });
    }
    std::vector<RawRun> pieces;
    if (!cw.failed.load())
      pieces = cut_runs(window_runs(cw.problem, cw.layout, cw.offsets, job->w, job->l), kRawPieceBytes);
    if (pieces.empty()) {
      window_done(*job);
      return;
    }
    job->left.store(static_cast<int>(pieces.size()));
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      auto piece = [this, job, window_done, run = pieces[i]] {
        const auto start = std::chrono::steady_clock::now();
        CaseWrite& c2 = *job->c;
        if (!skip_after_failure(c2, run.file_offset)) {
          try {
            write_run(c2.raw_fd, run, outputs_.data(job->slot), c2.path);
          } catch (const std::exception& e) {
            note_failure(c2, e.what(), run.file_offset);
          }
        }
        add_seconds(writing_, start);
        if (job->left.fetch_sub(1) == 1) window_done(*job);
      };
      if (i + 1 == pieces.size()) piece();  // this thread takes the last piece itself
      else raw_jobs_.push(std::move(piece));
    }
  });
}

void WriteStage::after_raw_writes(const std::shared_ptr<CaseWrite>& c, std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(c->mutex);
    if (c->pending > 0) {  // the case's last raw window queues it (window_done)
      c->held_back = std::move(job);
      return;
    }
  }
  jobs_.push(std::move(job));
}

void WriteStage::finish(const std::shared_ptr<CaseWrite>& c, const RunRecord& record,
                        std::function<void(const std::string&)> done) {
  after_raw_writes(c, [this, c, record, done] {
    if (c->failed.load()) fail(*c, c->error);  // a raw write failed: the cleanup is HDF5's, here
    if (!c->failed.load()) {
      try {
        close_fd(c->raw_fd);
        c->stream->close(record);
      } catch (const std::exception& e) {
        fail(*c, e.what());
      }
    }
    commits_.push([this, c, done] {
      const auto start = std::chrono::steady_clock::now();
      if (!c->failed.load()) {
        try {
          c->stream->publish(c->durable);
          c->stream.reset();
          unregister_partial(c->cleanup_token);
          c->cleanup_token = -1;
        } catch (const std::exception& e) {
          fail(*c, e.what());
        }
      }
      close_fd(c->writeback_fd);
      add_seconds(committing_, start);
      done(c->failed.load() ? c->error : "");
    });
  });
}

void WriteStage::wait_for_raw_writes() {
  std::unique_lock<std::mutex> lock(raw_mutex_);
  raw_idle_.wait(lock, [&] { return raw_in_flight_ == 0; });
}

void WriteStage::drain() {
  wait_for_raw_writes();  // so that the closes they held back are queued before the marker
  std::promise<void> done;
  jobs_.push([this, &done] { commits_.push([&done] { done.set_value(); }); });
  done.get_future().wait();
}

void WriteStage::abort(const std::shared_ptr<CaseWrite>& c) {
  after_raw_writes(c, [this, c] { fail(*c, "aborted"); });
}

}  // namespace linattn::pipeline
