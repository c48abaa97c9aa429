// Kept traces (TraceRequest.keepState): the trace runs on a thread of its own that waits
// where it meets an object it was not shown, so that each round sends and evaluates only
// what is new, where a trace of one round starts again from the first instruction with
// every description resent. A session ends with its answer; a waiting one also ends when
// another starts waiting after its caller was silent too long, or when too many are
// waiting. A later round for it is then `sessionLost`.
#pragma once

#include "kiln/schema/tracer.capnp.h"

namespace kiln::tracer {

// Starts a kept trace of `request`, or goes on with `request.session`: the answer of this
// round into `reply` (needObjects with the session, or the trace's end).
void traceKept(schema::TraceRequest::Reader request, schema::TraceReply::Builder reply);

} // namespace kiln::tracer
