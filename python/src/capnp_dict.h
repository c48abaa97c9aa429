// Cap'n Proto messages as plain Python values (capnp_dict.cpp), and the
// in-process tracer entry point.
#pragma once

#include <pybind11/pybind11.h>

namespace kiln::python {

void bindCapnp(pybind11::module_& m);

} // namespace kiln::python
