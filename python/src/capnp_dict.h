// Cap'n Proto messages as plain Python values (capnp_dict.cpp), and the
// in-process tracer entry point.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

namespace kiln::python {

void bindCapnp(pybind11::module_& m);

// A flat message of `type` (TraceReply, Program, CheckConstraintsReply, ...) as nested
// dicts; Error{Malformed} for bytes that do not decode.
pybind11::object capnpDecode(const std::string& type, const std::string& bytes);

} // namespace kiln::python
