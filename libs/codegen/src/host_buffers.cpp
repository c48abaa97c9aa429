#include "host_buffers.h"

#include "kiln/runtime/runtime.h"

#include <algorithm>
#include <cstring>

#include "kiln/common/error.h"
#include "kiln/sym/print.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::codegen::detail {
namespace {

std::vector<int64_t> evaluateAll(const Shape& shape, const sym::Binding& binding) {
  std::vector<int64_t> out;
  for (sym::Expr e : shape) out.push_back(sym::evaluate(e, binding));
  return out;
}

} // namespace

HostBuffers::HostBuffers(const Program& program, const ir::Graph& graph,
                         std::vector<ir::HostTensor> inputs)
    : program_(program), inputs_(std::move(inputs)) {
  bindSymbols(graph);
  for (const Buffer& b : program_.buffers) {
    Storage s;
    s.dtype = b.layout.dtype;
    if (b.aliasOf) { // a mutation's writes land in its root's memory
      storage_.push_back(storage_.at(*b.aliasOf));
      pointers_.push_back(pointers_.at(*b.aliasOf));
      continue;
    }
    if (b.kind == BufferKind::Input) {
      const ir::HostTensor& t = inputs_.at(b.placeholder);
      size_t size = elementSize(t.dtype);
      int64_t total = t.storage ? static_cast<int64_t>(t.storage->size() / size) : 0;
      s.data = t.storage ? t.storage->data() + t.storageOffset * static_cast<int64_t>(size) : nullptr;
      s.elements = total - t.storageOffset;
    } else {
      s.elements = runtime::extent(evaluateAll(b.layout.sizes, binding_),
                                   evaluateAll(b.layout.strides, binding_));
      owned_.emplace_back(static_cast<size_t>(std::max<int64_t>(s.elements, 1)) *
                          elementSize(s.dtype));
      s.data = owned_.back().data();
    }
    storage_.push_back(s);
    pointers_.push_back(reinterpret_cast<char*>(s.data));
  }
}

void HostBuffers::bindSymbols(const ir::Graph& graph) {
  std::vector<ir::Value> placeholders;
  for (const ir::Node& n : graph.nodes())
    if (n.kind == ir::NodeKind::Placeholder) placeholders.push_back(n.value);
  std::vector<runtime::Tensor> tensors;
  for (const ir::HostTensor& t : inputs_) {
    std::byte* data = t.storage ? t.storage->data() + t.storageOffset * static_cast<int64_t>(elementSize(t.dtype))
                                : nullptr;
    tensors.push_back({t.dtype, data, t.sizes, t.strides});
  }
  binding_ = runtime::bindInputs(placeholders, tensors);
}

ir::HostTensor HostBuffers::view(BufferId id, const ir::TensorMeta& meta) const {
  const Storage& s = storage_.at(id);
  ir::HostTensor t;
  t.dtype = meta.dtype;
  t.sizes = evaluateAll(meta.sizes, binding_);
  t.strides = evaluateAll(meta.strides, binding_);
  t.storageOffset = sym::evaluate(meta.storageOffset, binding_);
  size_t bytes = static_cast<size_t>(std::max<int64_t>(s.elements, 0)) * elementSize(s.dtype);
  t.storage = std::make_shared<std::vector<std::byte>>(s.data, s.data + bytes);
  return t;
}

ir::HostTensor HostBuffers::output(const Output& out) const {
  if (!out.symInt.isNull())
    return ir::HostTensor::fromDoubles(DType::Int64, {},
                                       {static_cast<double>(sym::evaluate(out.symInt, binding_))});
  return view(out.buffer, out.view);
}

void HostBuffers::runExtern(BufferId id) {
  const Buffer& b = program_.buffers.at(id);
  if (!b.call.results.empty())
    throw Error(ErrorCode::Unsupported, "codegen: the host evaluates no " + b.call.op +
                                            " call of several results");
  std::vector<runtime::Tensor> inputs;
  for (size_t k = 0; k < b.call.inputs.size(); ++k)
    inputs.push_back(tensor(b.call.inputs[k], b.call.inputViews[k]));
  std::vector<ir::Attr> attrs = b.call.attrs;
  for (ir::Attr& a : attrs)
    if (auto* e = std::get_if<sym::Expr>(&a.value)) a.value = sym::evaluate(*e, binding_);
  runtime::runExtern(b.call.op, inputs, attrs, tensor(id, b.layout));
}

runtime::Tensor HostBuffers::tensor(BufferId id, const ir::TensorMeta& meta) const {
  const Storage& s = storage_.at(id);
  int64_t offset = sym::evaluate(meta.storageOffset, binding_);
  return {meta.dtype, s.data + offset * static_cast<int64_t>(elementSize(s.dtype)),
          evaluateAll(meta.sizes, binding_), evaluateAll(meta.strides, binding_)};
}

} // namespace kiln::codegen::detail
