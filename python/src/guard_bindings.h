// _kiln.guards: the bindings of libs/guards and of the guard VM's Python front
// end (see guard_bindings.cpp, guard_frontend.h).
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "kiln/guards/guard_set.h"
#include "kiln/guards/input.h"

namespace kiln::python {

void bindGuards(pybind11::module_& parent);

// kiln.guards.GuardSet: a guard set shared with the symbols made from it.
struct PyGuardSet {
  std::shared_ptr<guards::GuardSet> set = std::make_shared<guards::GuardSet>();
};

// kiln.guards.Sym: a symbolic int of one guard set (its symbols and shape guards).
struct GuardSym {
  std::shared_ptr<guards::GuardSet> owner;
  sym::Expr expr;
};

// A Python call described for the C++ front end (the slow path); `fn` may be None.
guards::CallInput describePythonCall(pybind11::handle fn, pybind11::handle args,
                                     pybind11::handle kwargs);

} // namespace kiln::python
