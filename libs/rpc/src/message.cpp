#include "kiln/rpc/message.h"

#include <cstring>

#include <fmt/format.h>
#include <kj/io.h>

namespace kiln::rpc {

static constexpr uint32_t kMaxSegments = 512; // Cap'n Proto's own limit

Message::Message(zmq::message_t frame, const Limits& limits) : frame_(std::move(frame)) {
  const size_t size = frame_.size();
  if (size > limits.maxFrameBytes)
    throw Error(ErrorCode::TooLarge, fmt::format("message of {} bytes exceeds the {} byte limit",
                                                 size, limits.maxFrameBytes));
  if (size == 0 || size % sizeof(capnp::word) != 0)
    throw Error(ErrorCode::Malformed,
                fmt::format("frame of {} bytes is not a whole number of 8-byte words", size));

  // The first word says how many segments follow, minus one. Cap'n Proto adds the one
  // in 32 bits, so 0xffffffff wraps to zero segments and the frame passes as a valid
  // one-segment message; it allows at most 512 segments anyway.
  const auto* table = frame_.data<uint8_t>();
  const uint32_t segmentsMinusOne = uint32_t{table[0]} | uint32_t{table[1]} << 8 |
                                    uint32_t{table[2]} << 16 | uint32_t{table[3]} << 24;
  if (segmentsMinusOne >= kMaxSegments)
    throw Error(ErrorCode::Malformed,
                fmt::format("segment table declares {} segments, more than {}",
                            uint64_t{segmentsMinusOne} + 1, kMaxSegments));

  // ZeroMQ gives no alignment promise; Cap'n Proto reads words in place.
  kj::ArrayPtr<const capnp::word> words;
  if (reinterpret_cast<uintptr_t>(frame_.data()) % alignof(capnp::word) == 0) {
    words = kj::arrayPtr(frame_.data<capnp::word>(), size / sizeof(capnp::word));
  } else {
    aligned_ = kj::heapArray<capnp::word>(size / sizeof(capnp::word));
    std::memcpy(aligned_.begin(), frame_.data(), size);
    words = aligned_.asPtr();
  }

  capnp::ReaderOptions options;
  options.traversalLimitInWords = limits.traversalLimitWords;
  options.nestingLimit = limits.nestingLimit;
  try {
    reader_.emplace(words, options);
  } catch (const kj::Exception& e) {
    throwMalformed("invalid segment table", e);
  }
}

zmq::message_t toFrame(capnp::MessageBuilder& message) {
  const size_t bytes = capnp::computeSerializedSizeInWords(message) * sizeof(capnp::word);
  zmq::message_t frame(bytes);
  kj::ArrayOutputStream out(kj::arrayPtr(frame.data<kj::byte>(), bytes));
  capnp::writeMessage(out, message);
  return frame;
}

void throwMalformed(const char* what, const kj::Exception& e) {
  // Cap'n Proto reports its traversal and nesting limits like any other decode failure,
  // naming ReaderOptions; the protocol answers those with too_large.
  const char* description = e.getDescription().cStr();
  if (std::strstr(description, "capnp::ReaderOptions"))
    throw Error(ErrorCode::TooLarge, "message over the traversal or nesting limit", {},
                description);
  throw Error(ErrorCode::Malformed, what, {}, description);
}

} // namespace kiln::rpc
