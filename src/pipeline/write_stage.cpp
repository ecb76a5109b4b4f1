#include "pipeline/write_stage.hpp"

#include "io/file_error.hpp"
#include "pipeline/signal_cleanup.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>

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

}  // namespace

WriteStage::WriteStage(SlotPool& outputs, ProgressReporter& progress, int writers)
    : outputs_(outputs), progress_(progress) {
  if (writers > 1) copies_ = std::make_unique<CopyPool>(writers);
  writer_ = std::thread([this] {
    while (auto job = jobs_.pop()) (*job)();
    commits_.close();
  });
  committer_ = std::thread([this] {
    while (auto job = commits_.pop()) (*job)();
  });
}

WriteStage::~WriteStage() {
  jobs_.close();
  writer_.join();
  committer_.join();
}

void WriteStage::fail(CaseWrite& c, const std::string& error) {
  if (c.failed.load()) return;
  c.error = error;
  c.failed.store(true);
  close_fd(c.writeback_fd);
  close_fd(c.raw_fd);
  c.mapped.reset();
  c.stream.reset();  // removes the .partial file (a raw case's is not this process's to remove)
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
  jobs_.push([this, c] {
    if (!creation_begins()) {  // interrupted: the process is exiting
      fail(*c, "interrupted");
      return;
    }
    try {
      c->cleanup_token = register_partial(c->path + ".partial");
      c->stream = std::make_unique<OutputStream>(c->path, c->problem, c->layout);
      if (c->durable) c->writeback_fd = ::open(c->stream->partial_path().c_str(), O_RDONLY | O_CLOEXEC);
      c->raw = c->stream->raw_offsets();
      if (copies_ && c->raw.complete(c->layout.snapshots, c->layout.normalize)) map(*c, c->stream->partial_path());
    } catch (const std::exception& e) {
      fail(*c, e.what());
    }
    creation_ends();
  });
  return c;
}

void WriteStage::write(const std::shared_ptr<CaseWrite>& c, const Window& w, const WindowLayout& l, int slot,
                       std::int64_t bytes_moved) {
  jobs_.push([this, c, w, l, slot, bytes_moved] {
    const auto start = std::chrono::steady_clock::now();
    if (!c->failed.load()) {
      try {
        const unsigned char* base = outputs_.data(slot);
        if (c->mapped) {
          copy_runs(*c->mapped, *copies_, window_runs(c->problem, c->layout, c->raw, w, l), base);
        } else if (c->raw_fd >= 0) {
          for (const RawRun& run : window_runs(c->problem, c->layout, c->raw, w, l))
            write_run(c->raw_fd, run, base, c->path);
        } else {
          c->stream->write_o(w.t0, w.t1, base + l.o);
          c->stream->write_h(w.chunk0, w.chunks, base + l.h);
          c->stream->write_final(l.finished_row0, l.finished_rows, base + l.final_state, base + l.final_z);
        }
        // Start the disk on what is written (best effort; the fsync at the end is what counts).
        const int fd = c->mapped ? c->mapped->fd() : c->raw_fd >= 0 ? c->raw_fd : c->writeback_fd;
        if (c->durable && fd >= 0) ::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
        progress_.advance(window_tokens(c->problem, w), bytes_moved);
      } catch (const std::exception& e) {
        fail(*c, e.what());
      }
    }
    outputs_.release(slot);
    add_seconds(writing_, start);
  });
}

void WriteStage::finish(const std::shared_ptr<CaseWrite>& c, const RunRecord& record,
                        std::function<void(const std::string&)> done) {
  jobs_.push([this, c, record, done] {
    close_fd(c->raw_fd);  // its pages are the file's: publish's fsync makes them durable
    c->mapped.reset();
    if (!c->failed.load()) {
      try {
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

std::string WriteStage::share(const std::shared_ptr<CaseWrite>& c, RawOffsets& at) {
  std::promise<std::string> known;
  jobs_.push([this, c, &known, &at] {
    if (!c->failed.load()) {
      at = c->raw;
      if (at.complete(c->layout.snapshots, c->layout.normalize) && !c->mapped) {
        c->raw_fd = ::open(c->stream->partial_path().c_str(), O_WRONLY | O_CLOEXEC);
        if (c->raw_fd < 0)
          fail(*c, FileError(c->stream->partial_path(), std::string("cannot open for writing: ") + std::strerror(errno)).what());
      }
    }
    known.set_value(c->failed.load() ? c->error : "");
  });
  return known.get_future().get();
}

std::shared_ptr<CaseWrite> WriteStage::open_raw(const std::string& partial, const Problem& p,
                                                const OutputLayout& layout, const RawOffsets& at, bool durable) {
  auto c = std::make_shared<CaseWrite>();
  c->path = partial;
  c->problem = p;
  c->layout = layout;
  c->durable = durable;
  c->raw = at;
  jobs_.push([this, c] {
    if (copies_) {
      map(*c, c->path);
      return;
    }
    c->raw_fd = ::open(c->path.c_str(), O_WRONLY | O_CLOEXEC);
    if (c->raw_fd < 0) fail(*c, FileError(c->path, std::string("cannot open for writing: ") + std::strerror(errno)).what());
  });
  return c;
}

void WriteStage::finish_raw(const std::shared_ptr<CaseWrite>& c, std::function<void(const std::string&)> done) {
  jobs_.push([this, c, done] {
    const auto start = std::chrono::steady_clock::now();
    const int fd = c->mapped ? c->mapped->fd() : c->raw_fd;
    if (!c->failed.load() && c->durable && ::fsync(fd) != 0)
      fail(*c, FileError(c->path, std::string("fsync failed: ") + std::strerror(errno)).what());
    close_fd(c->raw_fd);
    c->mapped.reset();
    add_seconds(committing_, start);
    done(c->failed.load() ? c->error : "");
  });
}

void WriteStage::map(CaseWrite& c, const std::string& partial) {
  try {
    c.mapped = std::make_unique<MappedOutput>(partial, raw_end(c.problem, c.layout, c.raw), c.path);
    mapped_files_++;
  } catch (const std::exception& e) {
    fail(c, e.what());
  }
}

void WriteStage::drain() {
  std::promise<void> done;
  jobs_.push([this, &done] { commits_.push([&done] { done.set_value(); }); });
  done.get_future().wait();
}

void WriteStage::abort(const std::shared_ptr<CaseWrite>& c) {
  jobs_.push([this, c] { fail(*c, "aborted"); });
}

}  // namespace linattn::pipeline
