// kiln::tracer: symbolic evaluation of a Python function's bytecode (as the
// SDK lists it with `dis`) against descriptions of its arguments, producing a
// graph of the tensor work, the guards it relied on and the structure of the
// returned value — Dynamo's job, in C++ (docs/tracer.md).
//
// The evaluator keeps a stack and locals of typed variables: tensors are graph
// values with symbolic metas, sizes are libs/sym expressions (a branch on one
// is decided with its hint and recorded as a shape guard), Python constants,
// tuples and lists, iterators, torch callables known by qualified name. What
// it cannot model ends the trace with `unsupported` naming the construct and
// its line; an object it has not been shown yet is asked for with `needObjects`
// (a kept trace waits for it on its own thread: sessions.h).
#pragma once

#include <string>
#include <string_view>

#include "kiln/schema/tracer.capnp.h"

namespace kiln::tracer {

// A whole TraceRequest message (schemas/tracer.capnp) in, a TraceReply message
// out. A request it cannot read is Error{Malformed}; everything the trace
// itself meets (unsupported code, errors of the user's code, missing objects)
// is an answer in the reply, never an exception.
std::string trace(std::string_view request);
void trace(schema::TraceRequest::Reader request, schema::TraceReply::Builder reply);

} // namespace kiln::tracer
