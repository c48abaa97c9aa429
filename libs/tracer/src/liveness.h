// Which locals a code object may still read from one of its instructions on:
// what a graph break passes to the code that resumes after it.
#pragma once

#include <set>
#include <string>

#include "kiln/schema/tracer.capnp.h"

namespace kiln::tracer {

// The locals live before instruction `at` (an index into the code's instruction
// list): read (or deleted) on some path from there before being stored. Paths
// go through jumps and, from every instruction an exception-table entry covers,
// to its handler. Code that can read its locals by name (`locals()`, `vars()`,
// `eval`, `exec`, `dir`) keeps every local live; code that calls zero-argument super()
// (a `__class__` free variable) keeps its first argument.
std::set<std::string> liveLocals(schema::Code::Reader code, size_t at);

} // namespace kiln::tracer
