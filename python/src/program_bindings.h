// _kiln.Program: the bindings of libs/program (see program_bindings.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace kiln::python {

void bindProgram(pybind11::module_& m);

} // namespace kiln::python
