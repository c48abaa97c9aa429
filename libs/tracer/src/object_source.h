// What a trace reads its objects from beyond the request: a kept trace (sessions.h) asks
// for the paths it meets undescribed and waits for them, where a trace of one round
// ends with `needObjects`.
#pragma once

#include <capnp/serialize.h>

#include <cstring>
#include <string>
#include <vector>

#include "kiln/common/error.h"
#include "kiln/schema/tracer.capnp.h"
#include "variables.h"

namespace kiln::tracer {

// A message read from bytes in a word-aligned copy of them.
struct CopiedMessage {
  kj::Array<capnp::word> words;
  capnp::FlatArrayMessageReader reader;

  CopiedMessage(const void* data, size_t size, const char* what)
      : words(copy(data, size, what)), reader(words, options()) {}

  static kj::Array<capnp::word> copy(const void* data, size_t size, const char* what) {
    if (size % sizeof(capnp::word) != 0)
      throw Error(ErrorCode::Malformed, std::string(what) + ": not whole words");
    kj::Array<capnp::word> words = kj::heapArray<capnp::word>(size / sizeof(capnp::word));
    std::memcpy(words.begin(), data, size);
    return words;
  }

  static capnp::ReaderOptions options() {
    capnp::ReaderOptions o;
    o.traversalLimitInWords = uint64_t{1} << 27;
    o.nestingLimit = 256;
    return o;
  }
};

class ObjectSource {
public:
  virtual ~ObjectSource() = default;
  // Every description received after the request (a second pass of the trace reads them too).
  virtual std::vector<schema::ObjectDesc::Reader> received() = 0;
  // Asks the SDK to describe `path` and waits: the descriptions its answer carried.
  virtual std::vector<schema::ObjectDesc::Reader> await(const Path& path) = 0;
};

// Traces `request` into `reply`; objects it lacks come from `source` when given, else the
// reply is `needObjects` (evaluator.cpp).
void traceWith(schema::TraceRequest::Reader request, schema::TraceReply::Builder reply,
               ObjectSource* source);

} // namespace kiln::tracer
