// Small builders shared by the libs/ir tests.
#pragma once

#include "kiln/ir/graph.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::ir::testing {

inline TensorMeta tensorOf(sym::SymbolTable& table, DType dtype, Shape sizes) {
  return TensorMeta::contiguous(dtype, std::move(sizes), table);
}

inline Shape ints(sym::SymbolTable& table, std::initializer_list<int64_t> xs) {
  Shape out;
  for (int64_t x : xs) out.push_back(table.integer(x));
  return out;
}

} // namespace kiln::ir::testing
