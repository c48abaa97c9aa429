#include "kiln/codegen/plan.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>

#include "kiln/common/error.h"
#include "kiln/runtime/runtime.h"

namespace kiln::codegen {
namespace {

void forEachLoad(const Scalar& s, const std::function<void(BufferId)>& fn) {
  if (s->kind == ScalarKind::Load) fn(s->buffer);
  for (const Scalar& a : s->args) forEachLoad(a, fn);
}

// The buffers a step reads or writes.
std::set<BufferId> touched(const Program& program, const Schedule& schedule, const Step& step) {
  std::set<BufferId> out;
  if (step.kind == Step::CallExtern) {
    const ExternCall& call = program.buffers[step.buffer].call;
    out.insert(step.buffer);
    out.insert(call.results.begin(), call.results.end());
    out.insert(call.inputs.begin(), call.inputs.end());
    return out;
  }
  for (BufferId id : schedule.kernels[step.kernel].buffers) {
    out.insert(id);
    if (program.buffers[id].aliasOf) out.insert(*program.buffers[id].aliasOf); // written memory
    const Loops& loops = program.buffers[id].loops;
    forEachLoad(loops.body, [&](BufferId b) { out.insert(b); });
    if (loops.scatter) forEachLoad(loops.scatter, [&](BufferId b) { out.insert(b); });
  }
  return out;
}

// The elements a layout spans past its offset (runtime::extent), where every
// size and stride is known.
std::optional<int64_t> knownExtent(const ir::TensorMeta& m) {
  std::vector<int64_t> sizes, strides;
  for (size_t d = 0; d < m.dim(); ++d) {
    std::optional<int64_t> size = m.sizes[d].asInteger(), stride = m.strides[d].asInteger();
    if (!size || !stride) return std::nullopt;
    sizes.push_back(*size);
    strides.push_back(*stride);
  }
  return runtime::extent(sizes, strides);
}

// An output must view memory its buffer has (where the sizes are known): a
// view past it would read another allocation's bytes.
void checkOutputsInBounds(const Program& program) {
  for (size_t k = 0; k < program.outputs.size(); ++k) {
    const Output& o = program.outputs[k];
    if (!o.symInt.isNull()) continue;
    const Buffer& b = program.buffers[o.buffer];
    if (b.aliasOf) continue; // the root's memory: offsets count from the root
    std::optional<int64_t> have = knownExtent(b.layout), want = knownExtent(o.view);
    std::optional<int64_t> offset = o.view.storageOffset.asInteger();
    if (have && want && offset && *want > 0 && (*offset < 0 || *offset + *want > *have))
      throw Error(ErrorCode::Internal,
                  "codegen: output " + std::to_string(k) + " views elements " +
                      std::to_string(*offset) + ".." + std::to_string(*offset + *want - 1) +
                      " of " + b.name + ", which has " + std::to_string(*have));
  }
}

} // namespace

runtime::Plan buildPlan(const ir::Graph& graph, const Program& program, const Schedule& schedule,
                        const KernelSet& kernels) {
  checkOutputsInBounds(program);
  runtime::Plan plan;
  for (const ir::Node& n : graph.nodes())
    if (n.kind == ir::NodeKind::Placeholder) plan.inputs.push_back(n.value);
  for (const Buffer& b : program.buffers)
    plan.buffers.push_back({b.name, b.layout,
                            b.kind == BufferKind::Input ? static_cast<int32_t>(b.placeholder) : -1,
                            b.aliasOf ? static_cast<int32_t>(*b.aliasOf) : -1});
  plan.kernels = kernels.names;
  plan.symbols = kernels.symbols;
  plan.launches = kernels.launches;

  std::set<BufferId> kept; // inputs, outputs and registers-only buffers are never freed
  for (BufferId id = 0; id < program.buffers.size(); ++id)
    if (program.buffers[id].kind == BufferKind::Input) kept.insert(id);
  for (const Kernel& k : schedule.kernels) kept.insert(k.local.begin(), k.local.end());
  for (BufferId id = 0; id < program.buffers.size(); ++id)
    if (program.buffers[id].aliasOf) kept.insert(id); // its root's memory
  for (const Output& o : program.outputs)
    if (o.symInt.isNull()) kept.insert(o.buffer);
  std::vector<size_t> lastUse(program.buffers.size(), 0);
  for (size_t k = 0; k < schedule.steps.size(); ++k)
    for (BufferId id : touched(program, schedule, schedule.steps[k])) lastUse[id] = k;

  for (size_t k = 0; k < schedule.steps.size(); ++k) {
    const Step& s = schedule.steps[k];
    runtime::Step step;
    if (s.kind == Step::RunKernel) {
      step.kind = runtime::Step::RunKernel;
      step.kernel = static_cast<uint32_t>(s.kernel);
      const Kernel& kernel = schedule.kernels[s.kernel];
      for (BufferId id : kernel.buffers) // registers only: never allocated
        if (std::find(kernel.local.begin(), kernel.local.end(), id) == kernel.local.end())
          step.writes.push_back(id);
    } else {
      const ExternCall& call = program.buffers[s.buffer].call;
      step.kind = runtime::Step::CallExtern;
      step.buffer = s.buffer;
      step.op = call.op;
      step.attrs = call.attrs;
      step.writes.assign(call.results.begin(), call.results.end());
      for (size_t i = 0; i < call.inputs.size(); ++i)
        step.inputs.push_back({call.inputs[i], call.inputViews[i]});
    }
    plan.steps.push_back(std::move(step));
    for (BufferId id : touched(program, schedule, s))
      if (lastUse[id] == k && !kept.count(id)) {
        runtime::Step free;
        free.kind = runtime::Step::Free;
        free.buffer = id;
        plan.steps.push_back(std::move(free));
      }
  }
  for (const Output& o : program.outputs) plan.outputs.push_back({o.buffer, o.view, o.symInt});
  return plan;
}

} // namespace kiln::codegen
