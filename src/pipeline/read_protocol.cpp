#include "pipeline/read_protocol.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace linattn::pipeline {

MessageWriter& MessageWriter::i64(std::int64_t v) {
  bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
  return *this;
}

MessageWriter& MessageWriter::str(const std::string& s) {
  i64(static_cast<std::int64_t>(s.size()));
  bytes_ += s;
  return *this;
}

MessageWriter& MessageWriter::i64s(const std::vector<std::int64_t>& v) {
  i64(static_cast<std::int64_t>(v.size()));
  bytes_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(std::int64_t));
  return *this;
}

void MessageReader::need(std::size_t n) const {
  if (n > bytes_.size() - pos_) throw std::runtime_error("malformed message from the reader process");
}

std::int64_t MessageReader::i64() {
  need(sizeof(std::int64_t));
  std::int64_t v;
  std::memcpy(&v, bytes_.data() + pos_, sizeof v);
  pos_ += sizeof v;
  return v;
}

std::string MessageReader::str() {
  const std::int64_t n = i64();
  if (n < 0) throw std::runtime_error("malformed message from the reader process");
  need(static_cast<std::size_t>(n));
  std::string s = bytes_.substr(pos_, static_cast<std::size_t>(n));
  pos_ += static_cast<std::size_t>(n);
  return s;
}

std::vector<std::int64_t> MessageReader::i64s() {
  const std::int64_t n = i64();
  if (n < 0 || static_cast<std::uint64_t>(n) > (bytes_.size() - pos_) / sizeof(std::int64_t))
    throw std::runtime_error("malformed message from the reader process");
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  std::memcpy(v.data(), bytes_.data() + pos_, v.size() * sizeof(std::int64_t));
  pos_ += v.size() * sizeof(std::int64_t);
  return v;
}

namespace {

void write_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t sent = ::send(fd, data, n, MSG_NOSIGNAL);  // no SIGPIPE when the peer is gone
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) throw ChannelClosed(std::string("the other process is gone: ") + std::strerror(errno));
    data += sent;
    n -= static_cast<std::size_t>(sent);
  }
}

void read_all(int fd, char* data, std::size_t n, Clock::time_point deadline) {
  while (n > 0) {
    if (deadline != Clock::time_point::max()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) throw ChannelTimeout("deadline passed");
      pollfd p{fd, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) continue;  // re-check the deadline
    }
    const ssize_t got = ::read(fd, data, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw ChannelClosed(got == 0 ? "end of stream" : std::strerror(errno));
    data += got;
    n -= static_cast<std::size_t>(got);
  }
}

}  // namespace

void send_message(int fd, MessageKind kind, const std::string& payload) {
  char header[12];
  const std::uint32_t k = static_cast<std::uint32_t>(kind);
  const std::uint64_t n = payload.size();
  std::memcpy(header, &k, 4);
  std::memcpy(header + 4, &n, 8);
  write_all(fd, header, sizeof header);
  write_all(fd, payload.data(), payload.size());
}

MessageKind receive_message(int fd, std::string& payload, Clock::time_point deadline) {
  char header[12];
  read_all(fd, header, sizeof header, deadline);
  std::uint32_t k;
  std::uint64_t n;
  std::memcpy(&k, header, 4);
  std::memcpy(&n, header + 4, 8);
  if (n > (std::uint64_t(1) << 32)) throw ChannelClosed("malformed message length");
  payload.resize(static_cast<std::size_t>(n));
  read_all(fd, payload.data(), payload.size(), deadline);
  return static_cast<MessageKind>(k);
}

namespace {

// The fields of a WindowRead in wire order: encode and decode walk the same list.
constexpr std::int64_t WindowRead::*kWindowReadFields[] = {
    &WindowRead::t0,       &WindowRead::t1,       &WindowRead::state_row0,   &WindowRead::state_rows,
    &WindowRead::z_row0,   &WindowRead::z_rows,   &WindowRead::q_offset,     &WindowRead::k_offset,
    &WindowRead::v_offset, &WindowRead::state_offset, &WindowRead::z_offset, &WindowRead::accumulation_dtype,
    &WindowRead::gate,     &WindowRead::gate_offset};

}  // namespace

std::string encode(const WindowRead& r) {
  MessageWriter w;
  for (auto field : kWindowReadFields) w.i64(r.*field);
  return w.bytes();
}

WindowRead decode_window_read(const std::string& payload) {
  MessageReader m(payload);
  WindowRead r;
  for (auto field : kWindowReadFields) r.*field = m.i64();
  return r;
}

std::string encode(const BlockReads& r) {
  MessageWriter w;
  w.i64(r.allow_external_data).i64(static_cast<std::int64_t>(r.blocks.size()));
  for (const BlockRead& b : r.blocks)
    w.str(b.file).str(b.path).i64s(b.start).i64s(b.count).i64(static_cast<std::int64_t>(b.dtype))
        .i64(static_cast<std::int64_t>(b.check)).str(b.window).i64(b.offset);
  return w.bytes();
}

BlockReads decode_block_reads(const std::string& payload) {
  MessageReader m(payload);
  BlockReads r;
  r.allow_external_data = m.i64() != 0;
  const std::int64_t n = m.i64();
  if (n < 0 || n > 1024) throw std::runtime_error("a malformed block read request");
  for (std::int64_t i = 0; i < n; ++i) {
    BlockRead b;
    b.file = m.str();
    b.path = m.str();
    b.start = m.i64s();
    b.count = m.i64s();
    const std::int64_t dtype = m.i64(), check = m.i64();
    if (dtype < 0 || dtype > static_cast<std::int64_t>(DType::f64) || check < 0 || check > 2 ||
        b.start.size() != b.count.size())
      throw std::runtime_error("a malformed block read request");
    b.dtype = static_cast<DType>(dtype);
    b.check = static_cast<BlockCheck>(check);
    b.window = m.str();
    b.offset = m.i64();
    r.blocks.push_back(std::move(b));
  }
  return r;
}

std::string encode(const CaseSchema& s) {
  MessageWriter w;
  for (const hdf5::DatasetInfo* info : {&s.q, &s.k, &s.v}) w.i64(static_cast<std::int64_t>(info->dtype)).i64s(info->shape);
  w.i64(s.has_initial_state).i64(s.has_initial_z).i64s(s.cu_seqlens);
  w.i64(static_cast<std::int64_t>(s.gate));
  w.i64(static_cast<std::int64_t>(s.external_data.size()));
  for (const std::string& name : s.external_data) w.str(name);
  return w.bytes();
}

CaseSchema decode_case_schema(const std::string& payload) {
  MessageReader m(payload);
  CaseSchema s;
  for (hdf5::DatasetInfo* info : {&s.q, &s.k, &s.v}) {
    const std::int64_t dtype = m.i64();
    if (dtype < 0 || dtype > static_cast<std::int64_t>(DType::f64))
      throw std::runtime_error("malformed message from the reader process");
    info->dtype = static_cast<DType>(dtype);
    info->shape = m.i64s();
    if (info->shape.size() != 4) throw std::runtime_error("malformed message from the reader process");
  }
  s.has_initial_state = m.i64() != 0;
  s.has_initial_z = m.i64() != 0;
  s.cu_seqlens = m.i64s();
  const std::int64_t gate = m.i64();
  if (gate < 0 || gate > static_cast<std::int64_t>(GateKind::per_channel))
    throw std::runtime_error("malformed message from the reader process");
  s.gate = static_cast<GateKind>(gate);
  const std::int64_t external = m.i64();
  if (external < 0 || external > 16) throw std::runtime_error("malformed message from the reader process");
  for (std::int64_t i = 0; i < external; ++i) s.external_data.push_back(m.str());
  return s;
}

namespace {

// An enum's value from a message, refused outside [0, last].
template <class Enum>
Enum enum_value(MessageReader& m, Enum last) {
  const std::int64_t v = m.i64();
  if (v < 0 || v > static_cast<std::int64_t>(last)) throw std::runtime_error("malformed message from the reader process");
  return static_cast<Enum>(v);
}

}  // namespace

std::string encode(const BackwardCase& c) {
  MessageWriter w;
  std::int64_t scale_bits;
  std::memcpy(&scale_bits, &c.p.scale, sizeof scale_bits);
  w.i64(c.p.B).i64(c.p.T).i64(c.p.H).i64(c.p.DK).i64(c.p.DV).i64(c.p.chunk).i64(scale_bits).i64s(c.p.cu_seqlens);
  w.i64(static_cast<std::int64_t>(c.dtype)).i64(static_cast<std::int64_t>(c.h_dtype));
  w.i64(static_cast<std::int64_t>(c.gate)).i64(c.has_initial_state).i64(static_cast<std::int64_t>(c.initial_dtype));
  w.str(c.input_file).str(c.input_group).str(c.grad_group).i64(c.has_dht);
  w.i64(static_cast<std::int64_t>(c.external_data.size()));
  for (const std::string& name : c.external_data) w.str(name);
  return w.bytes();
}

BackwardCase decode_backward_case(const std::string& payload) {
  MessageReader m(payload);
  BackwardCase c;
  c.p.B = m.i64();
  c.p.T = m.i64();
  c.p.H = m.i64();
  c.p.DK = m.i64();
  c.p.DV = m.i64();
  c.p.chunk = m.i64();
  const std::int64_t scale_bits = m.i64();
  std::memcpy(&c.p.scale, &scale_bits, sizeof scale_bits);
  c.p.cu_seqlens = m.i64s();
  c.dtype = enum_value(m, DType::f64);
  c.h_dtype = enum_value(m, DType::f64);
  c.gate = enum_value(m, GateKind::per_channel);
  c.has_initial_state = m.i64() != 0;
  c.initial_dtype = enum_value(m, DType::f64);
  c.input_file = m.str();
  c.input_group = m.str();
  c.grad_group = m.str();
  c.has_dht = m.i64() != 0;
  const std::int64_t external = m.i64();
  if (external < 0 || external > 16) throw std::runtime_error("malformed message from the reader process");
  for (std::int64_t i = 0; i < external; ++i) c.external_data.push_back(m.str());
  try {
    validate(c.p);  // the reader validated it; a malformed message would not be
  } catch (const std::invalid_argument&) {
    throw std::runtime_error("malformed message from the reader process");
  }
  return c;
}

}  // namespace linattn::pipeline
