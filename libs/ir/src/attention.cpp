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

std::optional<size_t> attentionMaskInput(const Node& node) {
  size_t operands = node.inputs.size() - (attentionStream(node) ? 2 : 0);
  bool grad = node.target == "attention_grad_query" || node.target == "attention_grad_key_value";
  size_t unmasked = grad ? 6 : 3;
  if (operands <= unmasked) return std::nullopt;
  return unmasked;
}

std::optional<ValueId> attentionMask(const Node& node) {
  std::optional<size_t> at = attentionMaskInput(node);
  if (!at) return std::nullopt;
  return node.inputs[*at];
}

bool lseOfAttention(const Node& forward, const Node& lse) {
  // lse: query, key, value and the mask, as the forward's first inputs
  if (forward.target != "scaled_dot_product_attention" || lse.target != "attention_lse" ||
      forward.inputs.size() < lse.inputs.size() ||
      !std::equal(lse.inputs.begin(), lse.inputs.end(), forward.inputs.begin()) ||
      attentionMask(forward) != attentionMask(lse))
    return false;
  for (const char* name : {"is_causal", "scale"}) {
    const AttrValue* a = forward.attr(name);
    const AttrValue* b = lse.attr(name);
    if ((a == nullptr) != (b == nullptr) || (a && *a != *b)) return false;
  }
  return true;
}

} // namespace kiln::ir
