// The words of guard failures, shared by every front end.
#include "kiln/guards/vm.h"

#include <algorithm>

namespace kiln::guards::detail {
namespace {

std::string boolText(bool b) { return b ? "True" : "False"; }

std::string torchDtype(DType t) { return "torch." + std::string(dtypeName(t)); }

std::string autocastText(const Autocast& a) {
  return a.enabled ? "on " + std::string(dtypeName(a.dtype)) : std::string("off");
}

} // namespace

std::string typeName(const TypeRef& type) { return type.text(); }

std::string checkFailure(const Program& p, const Instruction& i, const std::string& got) {
  return describe(p.sources[i.node], p.nodes[i.node].checks[i.operand]) + " failed: got " + got;
}

std::string globalsMismatch(const GlobalState& e, const GlobalState& g) {
  if (e.gradEnabled && e.gradEnabled != g.gradEnabled)
    return "torch.is_grad_enabled() == " + boolText(*e.gradEnabled) + " failed: got " +
           (g.gradEnabled ? boolText(*g.gradEnabled) : "unknown");
  if (e.defaultDtype && e.defaultDtype != g.defaultDtype)
    return "torch.get_default_dtype() == " + torchDtype(*e.defaultDtype) + " failed: got " +
           (g.defaultDtype ? torchDtype(*g.defaultDtype) : "unknown");
  if (e.deterministic && e.deterministic != g.deterministic)
    return "torch.are_deterministic_algorithms_enabled() == " + boolText(*e.deterministic) + " failed: got " +
           (g.deterministic ? boolText(*g.deterministic) : "unknown");
  for (const Autocast& a : e.autocast) {
    auto it = std::find_if(g.autocast.begin(), g.autocast.end(), [&](const Autocast& x) { return x.device == a.device; });
    std::string device = a.device == ir::DeviceType::Cuda ? "cuda" : "cpu";
    if (it == g.autocast.end()) return "autocast(" + device + ") == " + autocastText(a) + " failed: got unknown";
    if (!a.holds(*it))
      return "autocast(" + device + ") == " + autocastText(a) + " failed: got " + autocastText(*it);
  }
  return "global state differs";
}

std::string tensorMismatch(const std::string& src, const TensorCheck& e, const TensorInput& t) {
  auto fail = [](const std::string& what, const std::string& want, const std::string& got) {
    return what + " == " + want + " failed: got " + got;
  };
  if (t.dtype != e.dtype) return fail(src + ".dtype", torchDtype(e.dtype), torchDtype(t.dtype));
  if (t.device != e.device) return fail(src + ".device", ir::toString(e.device), ir::toString(t.device));
  if (t.requiresGrad != e.requiresGrad)
    return fail(src + ".requires_grad", boolText(e.requiresGrad), boolText(t.requiresGrad));
  if (t.sizes.size() != e.sizes.size())
    return fail(src + ".dim()", std::to_string(e.sizes.size()), std::to_string(t.sizes.size()));
  for (size_t k = 0; k < e.sizes.size(); ++k)
    if (e.sizes[k] && *e.sizes[k] != t.sizes[k])
      return fail(src + ".size()[" + std::to_string(k) + "]", std::to_string(*e.sizes[k]), std::to_string(t.sizes[k]));
  for (size_t k = 0; k < e.strides.size(); ++k)
    if (e.strides[k] && *e.strides[k] != t.strides[k])
      return fail(src + ".stride()[" + std::to_string(k) + "]", std::to_string(*e.strides[k]),
                  std::to_string(t.strides[k]));
  if (e.storageOffset && *e.storageOffset != t.storageOffset)
    return fail(src + ".storage_offset()", std::to_string(*e.storageOffset), std::to_string(t.storageOffset));
  return src + " tensor guard failed";
}

} // namespace kiln::guards::detail
