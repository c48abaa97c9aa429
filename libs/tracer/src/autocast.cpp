#include "autocast.h"

#include <algorithm>
#include <set>

namespace kiln::tracer {
namespace {

using ir::DeviceType;
using ir::DType;

enum class Policy {
  None,
  LowerPrecision, // matrix products, attention: run in the autocast dtype
  Float32,        // precision-sensitive math: run in f32
  Float32Result,  // reductions with a dtype argument: f32 unless the caller chose one
};

Policy policyOf(const std::string& op, DeviceType device) {
  static const std::set<std::string> lower = {"mm",     "bmm",    "matmul",      "addmm",
                                              "linear", "convolution", "scaled_dot_product_attention"};
  if (device == DeviceType::Cpu) {
    // torch's CPU lists, for kiln's ops. cross_entropy: torch's CPU log_softmax keeps a half
    // input's dtype and its nll_loss computes in f32; kiln computes both in f32 (the same
    // dtype, a result closer to exact).
    static const std::set<std::string> cpuFloat32 = {"prod", "cross_entropy"};
    if (lower.count(op)) return Policy::LowerPrecision;
    return cpuFloat32.count(op) ? Policy::Float32 : Policy::None;
  }
  // cross_entropy is log_softmax (f32 result) then nll_loss (f32) in torch.
  static const std::set<std::string> float32 = {"exp", "expm1", "log", "log1p", "reciprocal", "rsqrt",
                                                "tan", "pow", "layer_norm", "cross_entropy"};
  static const std::set<std::string> float32Result = {"sum", "prod", "softmax", "log_softmax"};
  if (lower.count(op)) return Policy::LowerPrecision;
  if (float32.count(op)) return Policy::Float32;
  if (float32Result.count(op)) return Policy::Float32Result;
  return Policy::None;
}

// What autocast casts: floating tensors other than f64 on its device type.
bool eligible(const ir::Graph& graph, ir::ValueId id, DeviceType device) {
  if (!graph.value(id).isTensor()) return false;
  const ir::TensorMeta& m = graph.meta(id);
  return m.device.type == device && ir::isFloating(m.dtype) && m.dtype != DType::Float64;
}

void castInputs(ir::Graph& graph, std::vector<ir::ValueId>& inputs, DeviceType device, DType to) {
  for (ir::ValueId& in : inputs)
    if (eligible(graph, in, device) && graph.meta(in).dtype != to)
      in = graph.call("to_dtype", {in}, {{"dtype", to}});
}

void applyOn(ir::Graph& graph, DeviceType device, DType lowerPrecision, const std::string& op,
             std::vector<ir::ValueId>& inputs, std::vector<ir::Attr>& attrs) {
  switch (policyOf(op, device)) {
  case Policy::None: return;
  case Policy::LowerPrecision: castInputs(graph, inputs, device, lowerPrecision); return;
  case Policy::Float32: castInputs(graph, inputs, device, DType::Float32); return;
  case Policy::Float32Result: {
    bool chosen = std::any_of(attrs.begin(), attrs.end(), [](const ir::Attr& a) {
      return a.name == "dtype" && !std::holds_alternative<std::monostate>(a.value);
    });
    if (!chosen && !inputs.empty() && eligible(graph, inputs[0], device))
      attrs.push_back({"dtype", DType::Float32});
    return;
  }
  }
}

} // namespace

void applyAutocast(ir::Graph& graph, const AutocastState& state, const std::string& op,
                   std::vector<ir::ValueId>& inputs, std::vector<ir::Attr>& attrs) {
  if (state.cpu) applyOn(graph, DeviceType::Cpu, *state.cpu, op, inputs, attrs);
  if (state.cuda) applyOn(graph, DeviceType::Cuda, *state.cuda, op, inputs, attrs);
}

} // namespace kiln::tracer
