// The guard VM's front end for C++ callers: reads a CallInput (input.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kiln/guards/input.h"
#include "kiln/guards/vm.h"

namespace kiln::guards {

class InputFrontend {
public:
  // A register: an Input of the call, or a number read from a tensor (an int of
  // its sizes or strides, or its .item(): an int, or a float when `isFloat`).
  struct Value {
    const Input* input = nullptr;
    int64_t integer = 0;
    bool isFloat = false;
    double number = 0;
  };

  explicit InputFrontend(const CallInput& call) : call_(call) {}

  bool callShape(const CallShape& shape);
  bool globals(const GlobalState& expected);
  bool load(const Step& step, Value parent, Value& out);
  bool check(Value v, const Check& c);
  bool integer(Value v, int64_t& out);
  void done() {}

  std::string callText();
  GlobalState globalState() { return call_.state; }
  TypeRef type(Value v);
  std::string repr(Value v);
  std::optional<uint64_t> length(Value v);
  std::optional<std::vector<Constant>> keys(Value v);
  std::optional<TensorInput> tensor(Value v);

private:
  const CallInput& call_;
};

// The program against `call`: nullopt when it passes, else why not.
std::optional<std::string> firstFailure(const Program& program, const CallInput& call);

// The Python constant an input is, when it is one (None, bool, int, float, str, tuples of them).
std::optional<Constant> constantOf(const Input& input);

} // namespace kiln::guards
