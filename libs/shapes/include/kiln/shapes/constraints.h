// kiln::shapes::checkConstraints: does a traced program accept every input the
// user declared dynamic (torch.export's dynamic_shapes), and if not, what should
// the user write instead? Messages and fixes are in the user's terms: Dim names
// and sources such as `x.size(0)`.
#pragma once

#include <string>
#include <vector>

#include "kiln/shapes/simplify.h"
#include "kiln/sym/expr.h"
#include "kiln/sym/range.h"

namespace kiln::shapes {

// One dynamic dimension as the user declared it.
struct DimSpec {
  std::string source; // "x.size(0)"
  sym::Expr symbol;   // the symbol the trace gave that dimension
  std::string dim;    // the user's Dim name; entries with one name are one Dim (equal)
  sym::Range range = sym::Range::size(); // Dim(name, min=, max=); below 2 reads as 2,
                                         // since sizes 0 and 1 are specialized
  sym::Expr derived = {};                // null, or what the user derived this Dim from: an
                                         // expression of other entries' symbols (`2*s0`)
};

enum class ViolationKind { // in schemas/shapes.capnp's order
  Equal,                   // two Dims the guards make equal: use one Dim
  Static,                  // a Dim the guards pin to a constant: make it static
  Range,                   // a Dim whose valid values are fewer than declared: narrow its range
  Derived,                 // a Dim the guards make `a*other + b` of another: derive it
  Divisible,               // a Dim the guards require a multiple of k: derive it as k*_dim
  Other,                   // the traced code accepts no input at all
};

std::string_view violationKindName(ViolationKind kind);

struct Violation {
  ViolationKind kind = ViolationKind::Other;
  std::vector<std::string> dims; // the Dim names it concerns
  std::string message;           // what is wrong, in the user's terms
  std::string fix;               // a suggested line of the spec, or empty
};

// A condition on Dims the Dim language cannot spell (`batch*seq == n`,
// `batch != seq`, `batch**2 == 3*n`, or not proven in time): the exported
// program checks it at run time instead of refusing the spec.
struct RuntimeAssert {
  sym::Expr condition;           // over the trace's symbols
  std::vector<std::string> dims; // the Dim names it concerns
  std::string message;           // the condition in the user's terms
};

struct ConstraintReport {
  std::vector<Violation> violations;
  std::vector<RuntimeAssert> asserts; // hold for every input the program accepts
  bool ok() const { return violations.empty(); }
  // torch.export's shape: "Constraints violated (batch, seq)!", one "- message"
  // per violation, then "Suggested fixes:" with one line per fix. Empty if ok.
  std::string text() const;
};

// Checks `guards` (over the symbols of `spec`, and perhaps others the user
// said nothing about) against the spec. Error{InvalidArgument} for an entry
// without a symbol or Dim name, a symbol of another table, a derived
// expression naming a symbol no entry has, or what simplify refuses.
ConstraintReport checkConstraints(sym::SymbolTable& table, const std::vector<DimSpec>& spec,
                                  const std::vector<sym::Expr>& guards,
                                  const Options& options = {});

} // namespace kiln::shapes
