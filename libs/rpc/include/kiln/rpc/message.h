// Cap'n Proto messages in ZeroMQ frames: one message per frame, written flat,
// read back from word-aligned storage under traversal, nesting and size limits,
// so a malformed or oversized frame becomes kiln::Error instead of a crash.
#pragma once

#include <cstdint>
#include <optional>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/array.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "kiln/common/error.h"

namespace kiln::rpc {

struct Limits {
  size_t maxFrameBytes = size_t{256} << 20;          // larger frames are refused before parsing
  uint64_t traversalLimitWords = uint64_t{64} << 20; // 512 MiB of traversal per message
  int nestingLimit = 64;
};

// A received message: owns its bytes (copied to aligned storage only when the
// frame is not word-aligned) and a reader over them.
class Message {
public:
  // Throws Error{too_large} over the frame limit, Error{malformed} if the
  // segment table is invalid.
  Message(zmq::message_t frame, const Limits& limits = {});
  Message(Message&&) = delete; // the reader points into this object's storage

  // The root as T; field access may still throw kj::Exception on a bad
  // pointer, which every process boundary catches (see rethrowAsError).
  template <class T> typename T::Reader root() { return reader_->getRoot<T>(); }

  size_t sizeBytes() const { return frame_.size(); }

private:
  zmq::message_t frame_;
  kj::Array<capnp::word> aligned_;
  std::optional<capnp::FlatArrayMessageReader> reader_;
};

// Serializes a builder into one frame (one copy, into the frame's own buffer).
zmq::message_t toFrame(capnp::MessageBuilder& message);

// Runs fn, turning Cap'n Proto decode failures into Error{malformed}, or
// Error{too_large} past the traversal or nesting limit.
template <class Fn> auto decoding(Fn&& fn) -> decltype(fn());

[[noreturn]] void throwMalformed(const char* what, const kj::Exception& e);

template <class Fn> auto decoding(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const kj::Exception& e) {
    throwMalformed("cannot decode message", e);
  }
}

} // namespace kiln::rpc
