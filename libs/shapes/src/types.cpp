// The small members and names of libs/shapes' result types (no Z3 here: the
// client SDK links these with the wire form).
#include <algorithm>
#include <set>

#include "kiln/common/error.h"
#include "kiln/shapes/constraints.h"
#include "kiln/shapes/decide.h"
#include "kiln/shapes/simplify.h"
#include "kiln/sym/print.h"

namespace kiln::shapes {

sym::Range Simplified::rangeOf(sym::Expr symbol) const {
  for (const auto& [s, r] : ranges)
    if (s == symbol) return r;
  throw Error(ErrorCode::NotFound, "no range for " + sym::toString(symbol));
}

std::string_view answerName(Answer answer) {
  switch (answer) {
  case Answer::True: return "true";
  case Answer::False: return "false";
  case Answer::Unknown: break;
  }
  return "unknown";
}

std::string_view violationKindName(ViolationKind kind) {
  switch (kind) {
  case ViolationKind::Equal: return "equal";
  case ViolationKind::Static: return "static";
  case ViolationKind::Range: return "range";
  case ViolationKind::Derived: return "derived";
  case ViolationKind::Divisible: return "divisible";
  case ViolationKind::Other: break;
  }
  return "other";
}

std::string ConstraintReport::text() const {
  if (ok()) return {};
  std::set<std::string> dims;
  for (const Violation& v : violations) dims.insert(v.dims.begin(), v.dims.end());
  std::string names;
  for (const std::string& d : dims) names += (names.empty() ? "" : ", ") + d;
  std::string out = "Constraints violated (" + names + ")!\n";
  for (const Violation& v : violations) out += "  - " + v.message + "\n";
  std::vector<std::string> fixes;
  for (const Violation& v : violations)
    if (!v.fix.empty() && std::find(fixes.begin(), fixes.end(), v.fix) == fixes.end())
      fixes.push_back(v.fix);
  if (!fixes.empty()) {
    out += "Suggested fixes:\n";
    for (const std::string& f : fixes) out += "  " + f + "\n";
  }
  return out;
}

} // namespace kiln::shapes
