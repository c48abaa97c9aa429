// _kiln.ir: the bindings of libs/ir (see ir_bindings.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace kiln::python {

void bindIr(pybind11::module_& parent);

} // namespace kiln::python
