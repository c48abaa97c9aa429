// _kiln.ir: the bindings of libs/ir (see ir_bindings.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include "kiln/ir/graph.h"

namespace kiln::python {

void bindIr(pybind11::module_& parent);

// The libs/ir graph of a kiln.ir.Graph object (TypeError for anything else).
const ir::Graph& graphOf(pybind11::handle graph);

} // namespace kiln::python
