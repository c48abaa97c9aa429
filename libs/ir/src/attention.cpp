// Reading attention nodes (attention.h).
#include "kiln/ir/attention.h"

#include <algorithm>
#include <variant>

namespace kiln::ir {

double attentionDropout(const Node& node) {
  const AttrValue* p = node.attr("dropout_p");
  if (!p) return 0;
  if (const double* real = std::get_if<double>(p)) return *real;
  if (const int64_t* whole = std::get_if<int64_t>(p)) return static_cast<double>(*whole);
  return 0;
}

std::optional<std::pair<ValueId, ValueId>> attentionStream(const Node& node) {
  if (attentionDropout(node) == 0 || node.inputs.size() < 2) return std::nullopt;
  return std::make_pair(node.inputs[node.inputs.size() - 2], node.inputs.back());
}

bool attentionMasked(const Node& node) {
  size_t operands = node.inputs.size() - (attentionStream(node) ? 2 : 0);
  return node.target == "scaled_dot_product_attention" && operands > 3;
}

bool lseOfAttention(const Node& forward, const Node& lse) {
  if (forward.target != "scaled_dot_product_attention" || lse.target != "attention_lse" ||
      attentionMasked(forward) || forward.inputs.size() < 3 ||
      !std::equal(lse.inputs.begin(), lse.inputs.end(), forward.inputs.begin()))
    return false;
  for (const char* name : {"is_causal", "scale"}) {
    const AttrValue* a = forward.attr(name);
    const AttrValue* b = lse.attr(name);
    if ((a == nullptr) != (b == nullptr) || (a && *a != *b)) return false;
  }
  return true;
}

} // namespace kiln::ir
