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

// Whether every load of `input` in `s` is a direct load at `at`.
bool loadsOnlyAt(const Scalar& s, BufferId input, sym::Expr at) {
  if (s->kind == ScalarKind::Load && s->buffer == input &&
      (!s->indirect.empty() || s->index != at))
    return false;
  for (const Scalar& a : s->args)
    if (!loadsOnlyAt(a, input, at)) return false;
  return true;
}

bool loads(const Scalar& s, BufferId input) {
  bool found = false;
  forEachLoad(s, [&](BufferId b) { found = found || b == input; });
  return found;
}

bool denseAtZero(const ir::TensorMeta& m) {
  return m.storageOffset.asInteger() == 0 && m.isContiguous();
}

// Whether `input` lies inside `written`'s elements at the same positions: both
// start at 0 with the same strides, each of input's sizes within written's
// (the saved logits [rows, V] of a product padded to [rows, V + 7], and the
// padded grad written over them).
bool within(const ir::TensorMeta& input, const ir::TensorMeta& written) {
  if (input.dtype != written.dtype || input.dim() != written.dim() ||
      input.storageOffset.asInteger() != 0 || input.strides != written.strides)
    return false;
  for (size_t d = 0; d < input.dim(); ++d) {
    std::optional<int64_t> in = input.sizes[d].asInteger(), out = written.sizes[d].asInteger();
    if (input.sizes[d] != written.sizes[d] && !(in && out && *in <= *out)) return false;
  }
  return true;
}

std::vector<size_t> lastUses(const Program& program, const Schedule& schedule) {
  std::vector<size_t> lastUse(program.buffers.size(), 0);
  for (size_t k = 0; k < schedule.steps.size(); ++k)
    for (BufferId id : touched(program, schedule, schedule.steps[k])) lastUse[id] = k;
  return lastUse;
}

} // namespace

std::map<BufferId, BufferId> inPlaceCandidates(const Program& program, const Schedule& schedule) {
  std::set<BufferId> fixed; // outputs and mutations' memory: never taken, never given
  for (const Output& o : program.outputs)
    if (o.symInt.isNull()) fixed.insert(o.buffer);
  for (const Buffer& b : program.buffers)
    if (b.aliasOf) fixed.insert(*b.aliasOf);
  std::vector<size_t> lastUse = lastUses(program, schedule);
  std::map<BufferId, BufferId> out;
  std::set<BufferId> given;
  for (size_t k = 0; k < schedule.steps.size(); ++k) {
    const Step& step = schedule.steps[k];
    if (step.kind != Step::RunKernel) continue;
    const Kernel& kernel = schedule.kernels[step.kernel];
    for (BufferId id = 0; id < program.buffers.size(); ++id) {
      const Buffer& input = program.buffers[id];
      if (input.kind != BufferKind::Input || fixed.count(id) || given.count(id) || lastUse[id] != k)
        continue;
      std::optional<BufferId> writer; // the one member reading the input: it takes its memory
      bool ok = true;
      for (BufferId m : kernel.buffers) {
        const Loops& l = program.buffers[m].loops;
        if (!loads(l.body, id) && !(l.scatter && loads(l.scatter, id))) continue;
        ok = ok && !writer;
        writer = m;
      }
      if (!ok || !writer) continue;
      const Buffer& b = program.buffers[*writer];
      bool local = std::find(kernel.local.begin(), kernel.local.end(), *writer) != kernel.local.end();
      if (local || b.kind != BufferKind::Computed || b.aliasOf || fixed.count(*writer) ||
          out.count(*writer) || b.loops.reduce != ReduceOp::None || b.loops.scatter ||
          !denseAtZero(b.layout) || !within(input.layout, b.layout) ||
          !loadsOnlyAt(b.loops.body, id, storeIndex(b)))
        continue;
      out.emplace(*writer, id);
      given.insert(id);
    }
  }
  return out;
}

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
  std::vector<size_t> lastUse = lastUses(program, schedule);
  for (auto [written, input] : kernels.inPlace)
    plan.buffers[written].reuses = static_cast<int32_t>(input);

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
        step.inputs.push_back({call.inputs[i], call.inputViews[i], sym::Expr()});
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
