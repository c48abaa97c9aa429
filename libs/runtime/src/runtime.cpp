// The plan's interpreter: binds symbols, allocates buffers as steps need them,
// runs kernels and extern calls in order, frees what the plan frees.
#include "kiln/runtime/runtime.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>

#include "blas.h"
#include "data_dependent.h"
#include "kiln/common/error.h"
#include "kiln/runtime/executor.h"
#include "kiln/sym/print.h"
#include "kiln/sym/range.h"
#include "kiln/sym/symbol_table.h"
#include "matrix_product.h"

namespace kiln::runtime {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, message);
}

std::vector<int64_t> evaluateAll(const ir::Shape& shape, const sym::Binding& binding) {
  std::vector<int64_t> out;
  out.reserve(shape.size());
  for (const sym::Expr& e : shape) out.push_back(sym::evaluate(e, binding));
  return out;
}

// Whether every symbol of `e` has a value (constants, the usual dims, at once).
bool isBound(const sym::Expr& e, const sym::Binding& binding) {
  if (e.asInteger()) return true;
  for (const sym::Expr& s : sym::freeSymbols(e))
    if (!binding.count(s)) return false;
  return true;
}

bool isBound(const ir::TensorMeta& layout, const sym::Binding& binding) {
  for (const ir::Shape* dims : {&layout.sizes, &layout.strides})
    for (const sym::Expr& e : *dims)
      if (!isBound(e, binding)) return false;
  return true;
}

std::byte* at(void* data, int64_t offset, ir::DType dtype) {
  return static_cast<std::byte*>(data) + offset * static_cast<int64_t>(elementSize(dtype));
}

// The plan's buffers during one run; releases what it allocated unless handed out.
class Buffers {
public:
  // `facts`: the plan's planFacts, or null (then worked out here).
  Buffers(const Plan& plan, const std::vector<Tensor>& inputs, Allocator& allocator,
          const sym::Binding& binding, const PlanFacts* facts)
      : plan_(plan), allocator_(allocator), binding_(binding),
        computed_(facts ? std::nullopt : std::optional<PlanFacts>(planFacts(plan))),
        facts_(facts ? *facts : *computed_), data_(plan.buffers.size(), nullptr),
        owned_(plan.buffers.size(), false), bytes_(facts_.bytes), demand_(facts_.demand) {
    for (size_t k = 0; k < plan.buffers.size(); ++k) {
      const PlanBuffer& b = plan.buffers[k];
      if (b.input >= 0) data_[k] = inputs.at(static_cast<size_t>(b.input)).data;
      if (b.input >= 0 || b.aliasOf >= 0 || bytes_[k] != 0 || !isBound(b.layout, binding)) continue;
      bytes_[k] = bytesOf(b.layout, binding);
      ++demand_[bytes_[k]];
    }
  }
  ~Buffers() {
    for (size_t k = 0; k < data_.size(); ++k)
      if (owned_[k] && data_[k]) allocator_.release(data_[k]);
    for (auto& [bytes, data] : pool_) allocator_.release(data);
  }

  // Element 0 of every buffer (null for those not allocated or freed).
  char* const* pointers() { return reinterpret_cast<char* const*>(data_.data()); }

  void* ensure(uint32_t id) {
    if (data_[id] || plan_.buffers[id].input >= 0) return data_[id];
    if (int32_t root = plan_.buffers[id].aliasOf; root >= 0) // a mutation writes its target
      return data_[id] = ensure(static_cast<uint32_t>(root));
    size_t bytes = bytes_[id];
    if (bytes == 0) { // sized by a symbol a step bound from data
      bytes = bytesOf(plan_.buffers[id].layout, binding_);
    } else if (auto d = demand_.find(bytes); d != demand_.end() && --d->second == 0) {
      demand_.erase(d);
    }
    int32_t given = plan_.buffers[id].reuses; // an input the caller may have given up
    // Only aligned memory: a kernel's 16-byte path takes the run's own as aligned (no twin).
    if (given >= 0 && data_[given] && reinterpret_cast<uintptr_t>(data_[given]) % kAligned == 0 &&
        allocator_.adopt(plan_.buffers[given].input, data_[given], bytes)) {
      data_[id] = data_[given];
    } else if (auto reuse = pool_.find(bytes); reuse != pool_.end()) {
      // Buffer reuse: an intermediate freed earlier in this run, of the same size.
      data_[id] = reuse->second;
      pool_.erase(reuse);
    } else if (int32_t whole = facts_.wholeOutput[id]; whole >= 0) {
      const ir::TensorMeta& meta = plan_.outputs[static_cast<size_t>(whole)].meta;
      Tensor layout;
      layout.dtype = meta.dtype;
      layout.sizes = evaluateAll(meta.sizes, binding_);
      layout.strides = evaluateAll(meta.strides, binding_);
      bool empty = std::find(layout.sizes.begin(), layout.sizes.end(), 0) != layout.sizes.end();
      data_[id] = empty ? allocator_.allocate(bytes) : allocator_.allocateOutput(bytes, layout);
    } else {
      data_[id] = allocator_.allocate(bytes);
    }
    bytes_[id] = bytes;
    owned_[id] = true;
    return data_[id];
  }

  // The buffer's memory goes to the run's pool when a buffer of its size is
  // still to come (the pool's are released at the run's end), else back to the
  // allocator: holding memory no later buffer takes would raise the peak.
  void free(uint32_t id) {
    if (plan_.buffers[id].aliasOf >= 0) return; // its root's memory, freed as the root
    if (owned_[id] && data_[id]) {
      size_t bytes = bytes_[id];
      auto d = demand_.find(bytes);
      if (d != demand_.end() && static_cast<size_t>(d->second) > pool_.count(bytes))
        pool_.emplace(bytes, data_[id]);
      else
        allocator_.release(data_[id]);
    }
    data_[id] = nullptr;
    owned_[id] = false;
  }

  Tensor view(const View& v) {
    Tensor t;
    t.dtype = v.meta.dtype;
    t.sizes = evaluateAll(v.meta.sizes, binding_);
    t.strides = evaluateAll(v.meta.strides, binding_);
    t.data = at(ensure(v.buffer), sym::evaluate(v.meta.storageOffset, binding_), v.meta.dtype);
    return t;
  }

  // The outputs: views of buffers now owned by the caller.
  RunResult handOut(const std::vector<View>& outputs, Executor& executor) {
    RunResult result;
    for (const View& v : outputs) {
      if (v.symInt.isNull())
        result.outputs.push_back(view(v));
      else
        result.outputs.push_back(executor.symIntOutput(sym::evaluate(v.symInt, binding_), result));
    }
    for (const View& v : outputs) {
      if (!v.symInt.isNull() || !owned_[v.buffer]) continue;
      result.buffers.push_back(data_[v.buffer]);
      owned_[v.buffer] = false;
    }
    return result;
  }

private:
  const Plan& plan_;
  Allocator& allocator_;
  const sym::Binding& binding_;
  std::optional<PlanFacts> computed_; // where the caller keeps none
  const PlanFacts& facts_;
  std::vector<void*> data_;
  std::vector<bool> owned_;
  std::vector<size_t> bytes_; // per buffer; 0 until a step binds the symbols that size it
  std::multimap<size_t, void*> pool_; // freed intermediates by size
  std::map<size_t, int> demand_;      // sizes of the buffers not allocated yet, and how many
};

// Kernels of a loaded shared object, called in turn; extern calls through BLAS.
class HostExecutor : public Executor {
public:
  HostExecutor(const Plan& plan, const KernelLookup& kernels, Allocator& allocator)
      : plan_(plan), kernels_(kernels), allocator_(allocator) {}

  void begin(const sym::Binding&, const std::vector<int64_t>& symbols) override {
    for (const std::string& name : plan_.kernels) fns_.push_back(kernels_(name));
    symbols_ = &symbols;
  }

  void runKernel(uint32_t kernel, char* const* buffers) override {
    const Launch& launch = plan_.launches.at(kernel);
    int status = fns_.at(kernel)(buffers, symbols_->data(), launch.buffers.data(),
                                 launch.symbols.data());
    const std::string& name = plan_.kernels[kernel];
    if (status == 1) invalid(name + ": integer division by zero");
    if (status == 2) invalid(name + ": an index is out of range");
    if (status != 0) throw Error(ErrorCode::Internal, name + ": status " + std::to_string(status));
  }

  void callExtern(const Step& step, const std::vector<Tensor>& inputs,
                  const std::vector<ir::Attr>& attrs, const Tensor& out,
                  const std::vector<Tensor>& results) override {
    if (!results.empty())
      throw Error(ErrorCode::Unsupported,
                  "runtime: no CPU routine for the extern call " + step.op + " of several results");
    runExtern(step.op, inputs, attrs, out);
  }

  void end() override {}

  int64_t readInt(const Tensor& t) override { return detail::readInt(t); }

  void nonzero(const Tensor& t, const std::function<Tensor(int64_t)>& output) override {
    detail::fillNonzero(t, output(detail::countNonzero(t)));
  }

  Tensor symIntOutput(int64_t value, RunResult& result) override {
    void* data = allocator_.allocate(sizeof(int64_t)); // the caller's, as other outputs
    *static_cast<int64_t*>(data) = value;
    result.buffers.push_back(data);
    return {ir::DType::Int64, data, {}, {}};
  }

private:
  const Plan& plan_;
  const KernelLookup& kernels_;
  Allocator& allocator_;
  std::vector<KernelFn> fns_;
  const std::vector<int64_t>* symbols_ = nullptr;
};

} // namespace

void* HostAllocator::allocate(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw Error(ErrorCode::ResourceExhausted, "runtime: out of memory for " + std::to_string(bytes) + " bytes");
  return p;
}

void HostAllocator::release(void* data) {
  std::free(data);
}

int64_t extent(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t last = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    last += (sizes[d] - 1) * strides[d];
  }
  return last + 1;
}

std::vector<int64_t> contiguousStrides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  for (size_t k = sizes.size(); k-- > 0;) {
    strides[k] = stride;
    stride *= std::max<int64_t>(sizes[k], 1);
  }
  return strides;
}

sym::Binding bindInputs(const std::vector<ir::Value>& inputs, const std::vector<Tensor>& tensors) {
  if (inputs.size() != tensors.size())
    invalid(std::to_string(inputs.size()) + " inputs expected, got " + std::to_string(tensors.size()));
  sym::Binding binding;
  auto bindOne = [&](sym::Expr e, int64_t actual) {
    if (e.isSymbol() && !binding.count(e)) binding[e] = actual;
  };
  for (size_t k = 0; k < inputs.size(); ++k) { // check ranks and dtypes first
    const Tensor& t = tensors[k];
    if (!inputs[k].isTensor()) {
      if (t.dtype != ir::DType::Int64 || !t.sizes.empty())
        invalid("input " + std::to_string(k) + " must be a 0-d int64 tensor (a symbolic int)");
      continue;
    }
    const ir::TensorMeta& m = inputs[k].tensor();
    if (m.dim() != t.sizes.size() || t.strides.size() != t.sizes.size())
      invalid("input " + std::to_string(k) + ": rank " + std::to_string(t.sizes.size()) +
              ", expected " + std::to_string(m.dim()));
    if (m.dtype != t.dtype)
      invalid("input " + std::to_string(k) + ": dtype " + std::string(ir::name(t.dtype)) +
              ", expected " + std::string(ir::name(m.dtype)));
  }
  // Sizes bind first, then strides (of dims not of size 1), then symbolic ints,
  // so a wrong stride is reported as one rather than as a size.
  for (int pass = 0; pass < 3; ++pass)
    for (size_t k = 0; k < inputs.size(); ++k) {
      const Tensor& t = tensors[k];
      if (!inputs[k].isTensor()) {
        if (pass == 2) bindOne(inputs[k].symInt(), *static_cast<const int64_t*>(t.data));
        continue;
      }
      const ir::TensorMeta& m = inputs[k].tensor();
      for (size_t d = 0; d < m.dim(); ++d) {
        if (pass == 0) bindOne(m.sizes[d], t.sizes[d]);
        if (pass == 1 && t.sizes[d] != 1) bindOne(m.strides[d], t.strides[d]);
      }
    }
  for (auto& [symbol, value] : binding)
    if (!sym::range(symbol).contains(value))
      invalid("symbol " + sym::toString(symbol) + " = " + std::to_string(value) +
              " lies outside its range");
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& t = tensors[k];
    if (!inputs[k].isTensor()) {
      int64_t value = *static_cast<const int64_t*>(t.data);
      if (sym::evaluate(inputs[k].symInt(), binding) != value)
        invalid("input " + std::to_string(k) + ": " + std::to_string(value) + ", expected " +
                sym::toString(inputs[k].symInt()));
      continue;
    }
    const ir::TensorMeta& m = inputs[k].tensor();
    for (size_t d = 0; d < m.dim(); ++d) {
      if (sym::evaluate(m.sizes[d], binding) != t.sizes[d])
        invalid("input " + std::to_string(k) + ": size " + std::to_string(t.sizes[d]) + " at dim " +
                std::to_string(d) + ", expected " + sym::toString(m.sizes[d]));
      if (t.sizes[d] != 1 && sym::evaluate(m.strides[d], binding) != t.strides[d])
        invalid("input " + std::to_string(k) + ": stride " + std::to_string(t.strides[d]) +
                " at dim " + std::to_string(d) + ", expected " + sym::toString(m.strides[d]));
    }
  }
  return binding;
}

void runExtern(const std::string& op, const std::vector<Tensor>& inputs,
               const std::vector<ir::Attr>& attrs, const Tensor& out) {
  if (detail::matrixProduct(op, inputs, detail::numberAttr(attrs, "alpha"),
                            detail::numberAttr(attrs, "beta"), out))
    return;
  throw Error(ErrorCode::Unsupported, "runtime: no CPU routine for the extern call " + op + " of " +
                                          std::string(ir::name(out.dtype)) +
                                          " (CPU lowering makes loops of it)");
}

// The kernels' symbol slots whose symbols are all bound (the others wait for
// the steps that bind their unbacked symbols).
void evaluateSlots(const Plan& plan, const sym::Binding& binding, std::vector<int64_t>& slots) {
  slots.resize(plan.symbols.size(), 0);
  for (size_t k = 0; k < plan.symbols.size(); ++k)
    if (isBound(plan.symbols[k], binding)) slots[k] = sym::evaluate(plan.symbols[k], binding);
}

PlanFacts planFacts(const Plan& plan) {
  PlanFacts facts;
  facts.bytes.assign(plan.buffers.size(), 0);
  const sym::Binding none;
  for (size_t k = 0; k < plan.buffers.size(); ++k) {
    const PlanBuffer& b = plan.buffers[k];
    if (b.input >= 0 || b.aliasOf >= 0 || !isBound(b.layout, none)) continue;
    facts.bytes[k] = bytesOf(b.layout, none);
    ++facts.demand[facts.bytes[k]];
  }
  // The output that is all of a buffer the plan allocates (element 0 on, its
  // dtype, sizes and strides), unless an output views that buffer as another
  // dtype (a tensor made as the one could not be viewed as the other).
  auto atZero = [](const sym::Expr& e) { return !e.isNull() && e.asInteger() == 0; };
  facts.wholeOutput.assign(plan.buffers.size(), -1);
  std::vector<bool> otherDtype(plan.buffers.size(), false);
  for (size_t k = 0; k < plan.outputs.size(); ++k) {
    const View& v = plan.outputs[k];
    if (!v.symInt.isNull()) continue;
    const ir::TensorMeta& layout = plan.buffers.at(v.buffer).layout;
    if (v.meta.dtype != layout.dtype) otherDtype[v.buffer] = true;
    bool whole = v.meta.dtype == layout.dtype && v.meta.sizes == layout.sizes &&
                 v.meta.strides == layout.strides && atZero(v.meta.storageOffset) &&
                 atZero(layout.storageOffset);
    if (whole && facts.wholeOutput[v.buffer] < 0)
      facts.wholeOutput[v.buffer] = static_cast<int32_t>(k);
  }
  for (size_t k = 0; k < plan.buffers.size(); ++k) {
    const PlanBuffer& b = plan.buffers[k];
    if (otherDtype[k] || b.input >= 0 || b.aliasOf >= 0) facts.wholeOutput[k] = -1;
  }
  return facts;
}

size_t bytesOf(const ir::TensorMeta& layout, const sym::Binding& binding) {
  int64_t n = extent(evaluateAll(layout.sizes, binding), evaluateAll(layout.strides, binding));
  return static_cast<size_t>(std::max<int64_t>(n, 1)) * elementSize(layout.dtype);
}

bool alignedInRun(const Launch& launch, char* const* buffers, const sym::Binding& binding) {
  for (const AlignedAccess& a : launch.aligned) {
    uintptr_t from = a.buffer >= 0 ? reinterpret_cast<uintptr_t>(buffers[a.buffer]) : 0;
    // Unsigned arithmetic: a negative offset wraps as the address would, and the
    // remainder by a power of two is the address's.
    uintptr_t address = from + static_cast<uintptr_t>(sym::evaluate(a.offset, binding)) *
                                   static_cast<uintptr_t>(a.elementBytes);
    if (address % a.bytes != 0) return false;
  }
  return true;
}

RunResult run(const Plan& plan, Executor& executor, const std::vector<Tensor>& inputs,
              Allocator& allocator, const PlanFacts* facts) {
  sym::Binding binding = bindInputs(plan.inputs, inputs);
  std::vector<int64_t> symbols;
  evaluateSlots(plan, binding, symbols);
  Buffers buffers(plan, inputs, allocator, binding, facts);
  // An unbacked symbol's value, as a step found it, checked against its range:
  // a runtime assert that bounds one symbol became its range (SymbolTable::assume).
  auto bindUnbacked = [&](const Step& step, int64_t value) {
    sym::Expr symbol = detail::boundSymbol(step);
    detail::checkRange(symbol, value, step.op);
    binding[symbol] = value;
    evaluateSlots(plan, binding, symbols);
  };
  executor.begin(binding, symbols);
  for (const Step& step : plan.steps) {
    switch (step.kind) {
    case Step::RunKernel:
      for (uint32_t b : step.writes) buffers.ensure(b);
      executor.runKernel(step.kernel, buffers.pointers());
      break;
    case Step::CallExtern: {
      if (detail::isAssert(step)) {
        detail::checkAssert(step, binding);
        break;
      }
      std::vector<Tensor> args;
      for (const View& v : step.inputs) args.push_back(buffers.view(v));
      View whole{step.buffer, plan.buffers[step.buffer].layout, {}};
      whole.meta.storageOffset = plan.buffers[step.buffer].layout.storageOffset;
      if (bindsSymbol(step)) {
        if (args.size() != 1) throw Error(ErrorCode::Malformed, "runtime: a " + step.op + " step of " + std::to_string(args.size()) + " inputs");
        if (step.op == "item") {
          bindUnbacked(step, executor.readInt(args[0]));
        } else {
          executor.nonzero(args[0], [&](int64_t count) {
            bindUnbacked(step, count);
            return buffers.view(whole);
          });
        }
        break;
      }
      const std::vector<ir::Attr>* attrs = &step.attrs; // copied only to evaluate symbols
      std::vector<ir::Attr> evaluated;
      auto symbolic = [](const ir::Attr& a) { return std::holds_alternative<sym::Expr>(a.value); };
      if (std::any_of(step.attrs.begin(), step.attrs.end(), symbolic)) {
        evaluated = step.attrs;
        for (ir::Attr& a : evaluated)
          if (auto* e = std::get_if<sym::Expr>(&a.value)) a.value = sym::evaluate(*e, binding);
        attrs = &evaluated;
      }
      std::vector<Tensor> results;
      for (uint32_t b : step.writes) {
        View all{b, plan.buffers[b].layout, {}};
        results.push_back(buffers.view(all));
      }
      executor.callExtern(step, args, *attrs, buffers.view(whole), results);
      break;
    }
    case Step::Free: buffers.free(step.buffer); break;
    }
  }
  executor.end();
  return buffers.handOut(plan.outputs, executor);
}

RunResult run(const Plan& plan, const KernelLookup& kernels, const std::vector<Tensor>& inputs,
              Allocator& allocator, const PlanFacts* facts) {
  HostExecutor executor(plan, kernels, allocator);
  return run(plan, executor, inputs, allocator, facts);
}

} // namespace kiln::runtime
