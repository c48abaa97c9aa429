// The guard VM: runs a Program (program.h) against a call through a front end
// that reads the call's values. Two front ends exist: InputFrontend
// (input_frontend.h) reads a C++ CallInput; the Python SDK's reads Python
// objects through the C API. A front end F provides:
//
//   using Value = ...;                 // a handle to one value (a register)
//   bool callShape(const CallShape&);
//   bool globals(const GlobalState&);
//   bool load(const Step&, Value parent, Value& out);   // parent unused for roots
//   bool check(Value, const Check&);
//   bool integer(Value, int64_t& out);
//   void done();                       // end of one run: release what loads made
//   // Only when explaining a failure:
//   std::string callText();            // "2 positional, keywords [y]"
//   GlobalState globalState();
//   TypeRef type(Value);
//   std::string repr(Value);
//   std::optional<uint64_t> length(Value);
//   std::optional<std::vector<Constant>> keys(Value);
//   std::optional<TensorInput> tensor(Value);
//
// The hot path (`passes`) allocates nothing once its Scratch has grown to the
// program, and formats no text; `explain` runs again and words the failure.
#pragma once

#include <string>
#include <vector>

#include "kiln/guards/input.h"
#include "kiln/guards/program.h"

namespace kiln::guards {

template <class Value> struct Scratch {
  std::vector<Value> registers;
  std::vector<int64_t> symbols;
  std::vector<int64_t> stack;

  void fit(const Program& p) {
    if (registers.size() < p.nodes.size()) registers.resize(p.nodes.size());
    if (symbols.size() < p.symbols.size()) symbols.resize(p.symbols.size());
    if (stack.size() < p.maxStack + 1) stack.resize(p.maxStack + 1);
  }
};

namespace detail {
std::string globalsMismatch(const GlobalState& expected, const GlobalState& got);
std::string tensorMismatch(const std::string& source, const TensorCheck& expected, const TensorInput& got);
std::string checkFailure(const Program& p, const Instruction& i, const std::string& got);
std::string typeName(const TypeRef& type);
} // namespace detail

template <class F>
std::string explainAt(const Program& p, F& f, Scratch<typename F::Value>& s, const Instruction& i);

// Runs the program; the instruction that failed in *failedAt, and the reason
// in words in *reason when asked for (the slow path).
template <class F>
bool run(const Program& p, F& f, Scratch<typename F::Value>& s, size_t* failedAt = nullptr,
         std::string* reason = nullptr) {
  s.fit(p);
  for (size_t pc = 0; pc < p.code.size(); ++pc) {
    const Instruction& i = p.code[pc];
    bool ok = false;
    switch (i.op) {
    case Op::CallShape: ok = f.callShape(p.call); break;
    case Op::Globals: ok = f.globals(p.globals); break;
    case Op::Load: {
      const Node& n = p.nodes[i.node];
      ok = f.load(n.step, n.parent < 0 ? typename F::Value{} : s.registers[static_cast<size_t>(n.parent)],
                  s.registers[i.node]);
      break;
    }
    case Op::Check: ok = f.check(s.registers[i.node], p.nodes[i.node].checks[i.operand]); break;
    case Op::Symbol: ok = f.integer(s.registers[i.node], s.symbols[i.operand]); break;
    case Op::Shape: ok = evaluateShape(p.shapes[i.operand], s.symbols.data(), s.stack.data()); break;
    }
    if (!ok) {
      if (failedAt) *failedAt = pc;
      if (reason) *reason = explainAt(p, f, s, i);
      f.done();
      return false;
    }
  }
  f.done();
  return true;
}

template <class F>
std::string explainAt(const Program& p, F& f, Scratch<typename F::Value>& s, const Instruction& i) {
  switch (i.op) {
  case Op::CallShape: {
    std::string want = std::to_string(p.call.positional) + " positional, keywords [";
    for (size_t k = 0; k < p.call.keywords.size(); ++k) want += (k ? ", " : "") + p.call.keywords[k];
    return "call with " + want + "] failed: got " + f.callText();
  }
  case Op::Globals: return detail::globalsMismatch(p.globals, f.globalState());
  case Op::Load: {
    const Node& n = p.nodes[i.node];
    std::string what = p.sources[i.node] + " could not be read";
    if (n.parent < 0) return what;
    typename F::Value parent = s.registers[static_cast<size_t>(n.parent)];
    std::string about = p.sources[static_cast<size_t>(n.parent)] + " is " + detail::typeName(f.type(parent));
    if (auto len = f.length(parent)) about += " of length " + std::to_string(*len);
    return what + " (" + about + ")";
  }
  case Op::Check: {
    typename F::Value v = s.registers[i.node];
    const Check& c = p.nodes[i.node].checks[i.operand];
    switch (c.kind) {
    case Check::Kind::Type: return detail::checkFailure(p, i, detail::typeName(f.type(v)));
    case Check::Kind::Identity: return detail::checkFailure(p, i, "another object, " + f.repr(v));
    case Check::Kind::Equals: return detail::checkFailure(p, i, f.repr(v));
    case Check::Kind::Length: {
      auto len = f.length(v);
      return detail::checkFailure(p, i, len ? std::to_string(*len) : detail::typeName(f.type(v)) + " without a length");
    }
    case Check::Kind::DictKeys: {
      auto keys = f.keys(v);
      if (!keys) return detail::checkFailure(p, i, detail::typeName(f.type(v)));
      std::string got;
      for (size_t k = 0; k < keys->size(); ++k) got += (k ? ", " : "") + (*keys)[k].text();
      return detail::checkFailure(p, i, "[" + got + "]");
    }
    case Check::Kind::Tensor: {
      auto t = f.tensor(v);
      if (!t) return p.sources[i.node] + " is a tensor failed: got " + detail::typeName(f.type(v));
      return detail::tensorMismatch(p.sources[i.node], c.tensor, *t);
    }
    }
    return detail::checkFailure(p, i, f.repr(v));
  }
  case Op::Symbol:
    return p.sources[i.node] + " as " + p.symbols[i.operand] + " failed: got " + f.repr(s.registers[i.node]);
  case Op::Shape: {
    std::string bound;
    for (size_t k = 0; k < p.symbols.size(); ++k)
      bound += (k ? ", " : "") + p.symbols[k] + " = " + std::to_string(s.symbols[k]) + " (" +
               p.sources[p.symbolNodes[k]] + ")";
    return p.shapes[i.operand].text + " failed: got " + bound;
  }
  }
  return "guard failed";
}

} // namespace kiln::guards
