// _kiln.guards: the bindings of libs/guards and of the guard VM's Python front
// end (see guard_bindings.cpp, guard_frontend.h).
#pragma once

#include <pybind11/pybind11.h>

namespace kiln::python {

void bindGuards(pybind11::module_& parent);

} // namespace kiln::python
