// The arithmetic operators (+ - * // %, each also reflected) of a Python class that
// wraps a sym::Expr: kiln.ir.Sym and kiln.guards.Sym. `make(self, expr)` wraps a
// result; `other(self, handle)` reads the other operand as an expression of self's table.
#pragma once

#include <pybind11/pybind11.h>

#include "kiln/sym/expr.h"

namespace kiln::python {

using SymBuilder = sym::Expr (*)(sym::Expr, sym::Expr);

template <class T, class Make, class Other> auto symBinary(Make make, Other other, SymBuilder f) {
  return [make, other, f](const T& a, pybind11::handle b) { return make(a, f(a.expr, other(a, b))); };
}

template <class T, class Make, class Other> auto symReflected(Make make, Other other, SymBuilder f) {
  return [make, other, f](const T& a, pybind11::handle b) { return make(a, f(other(a, b), a.expr)); };
}

template <class T, class Make, class Other>
void defSymArithmetic(pybind11::class_<T>& cls, Make make, Other other) {
  const std::pair<const char*, SymBuilder> ops[] = {
      {"add", [](sym::Expr a, sym::Expr b) { return a + b; }},
      {"sub", [](sym::Expr a, sym::Expr b) { return a - b; }},
      {"mul", [](sym::Expr a, sym::Expr b) { return a * b; }},
      {"floordiv", [](sym::Expr a, sym::Expr b) { return sym::floorDiv(a, b); }},
      {"mod", [](sym::Expr a, sym::Expr b) { return sym::mod(a, b); }},
  };
  for (const auto& [name, f] : ops) {
    cls.def((std::string("__") + name + "__").c_str(), symBinary<T>(make, other, f));
    cls.def((std::string("__r") + name + "__").c_str(), symReflected<T>(make, other, f));
  }
}

} // namespace kiln::python
