#include "pipeline/write_stage.hpp"

#include "io/file_error.hpp"
#include "pipeline/signal_cleanup.hpp"

#include <filesystem>

namespace linattn::pipeline {

WriteStage::WriteStage(SlotPool& outputs, ProgressReporter& progress) : outputs_(outputs), progress_(progress) {
  thread_ = std::thread([this] {
    while (auto job = jobs_.pop()) (*job)();
  });
}

WriteStage::~WriteStage() {
  jobs_.close();
  thread_.join();
}

void WriteStage::fail(CaseWrite& c, const std::string& error) {
  if (c.failed.load()) return;
  c.error = error;
  c.failed.store(true);
  c.stream.reset();  // removes the .partial file
  unregister_partial(c.cleanup_token);
  c.cleanup_token = -1;
}

std::shared_ptr<CaseWrite> WriteStage::open(const std::string& path, const Problem& p, const OutputLayout& layout) {
  auto c = std::make_shared<CaseWrite>();
  c->path = path;
  c->problem = p;
  c->layout = layout;
  jobs_.push([this, c] {
    try {
      c->cleanup_token = register_partial(c->path + ".partial");
      c->stream = std::make_unique<OutputStream>(c->path, c->problem, c->layout);
    } catch (const std::exception& e) {
      fail(*c, e.what());
    }
  });
  return c;
}

void WriteStage::write(const std::shared_ptr<CaseWrite>& c, const Window& w, const WindowLayout& l, int slot,
                       std::int64_t bytes_moved) {
  jobs_.push([this, c, w, l, slot, bytes_moved] {
    if (!c->failed.load()) {
      try {
        const unsigned char* base = outputs_.data(slot);
        c->stream->write_o(w.t0, w.t1, base + l.o);
        c->stream->write_h(w.chunk0, w.chunks, base + l.h);
        c->stream->write_final(l.finished_row0, l.finished_rows, base + l.final_state, base + l.final_z);
        progress_.advance(w.tokens(), bytes_moved);
      } catch (const std::exception& e) {
        fail(*c, e.what());
      }
    }
    outputs_.release(slot);
  });
}

void WriteStage::finish(const std::shared_ptr<CaseWrite>& c, const RunRecord& record, bool durable,
                        std::function<void(const std::string&)> done) {
  jobs_.push([this, c, record, durable, done] {
    if (!c->failed.load()) {
      try {
        c->stream->finish(record, durable);
        c->stream.reset();
        unregister_partial(c->cleanup_token);
        c->cleanup_token = -1;
      } catch (const std::exception& e) {
        fail(*c, e.what());
      }
    }
    done(c->failed.load() ? c->error : "");
  });
}

void WriteStage::abort(const std::shared_ptr<CaseWrite>& c) {
  jobs_.push([this, c] { fail(*c, "aborted"); });
}

}  // namespace linattn::pipeline
