// Automatic dynamic: one recompile with a symbolic dim after a size changes,
// none after; merged decisions across ranks; guards for a whole call.
#include <gtest/gtest.h>

#include "kiln/guards/frame_state.h"
#include "kiln/guards/input_frontend.h"

namespace kiln::guards {
namespace {

CallInput callOf(std::vector<Input> args) { return CallInput::of(std::move(args)); }

Input tensor(std::vector<int64_t> sizes) { return Input::of(contiguousTensor(DType::Float32, std::move(sizes))); }

// A function's compiled entries as the SDK keeps them: a miss observes the
// call, then "traces" (guards for the call under the frame state) and adds an entry.
struct Function {
  std::vector<std::string> names;
  FrameState frame;
  std::vector<Program> entries;
  int compiles = 0;

  void call(const CallInput& in) {
    for (const Program& p : entries)
      if (!firstFailure(p, in)) return;
    frame.observe(observe(in, names));
    entries.push_back(compile(guardsForCall(in, names, frame)));
    ++compiles;
  }
};

TEST(AutomaticDynamic, ASizeChangeRecompilesOnceWithASymbol) {
  Function f{{"x", "n"}};
  f.call(callOf({tensor({8, 16}), Input::of(3)}));
  f.call(callOf({tensor({8, 16}), Input::of(3)}));
  EXPECT_EQ(f.compiles, 1);
  f.call(callOf({tensor({12, 16}), Input::of(3)}));
  EXPECT_EQ(f.compiles, 2);
  EXPECT_TRUE(f.frame.dynamicDim("L['x']", 0));
  EXPECT_FALSE(f.frame.dynamicDim("L['x']", 1));
  for (int64_t batch : {5, 7, 64, 1000}) f.call(callOf({tensor({batch, 16}), Input::of(3)}));
  EXPECT_EQ(f.compiles, 2) << f.frame.text();
  // The int changing makes it dynamic too: once more, then never.
  f.call(callOf({tensor({9, 16}), Input::of(4)}));
  f.call(callOf({tensor({9, 16}), Input::of(5)}));
  f.call(callOf({tensor({33, 16}), Input::of(6)}));
  EXPECT_EQ(f.compiles, 3);
  // Sizes 0 and 1 stay static (one entry each), as in PyTorch.
  f.call(callOf({tensor({1, 16}), Input::of(6)}));
  EXPECT_EQ(f.compiles, 4);
  f.call(callOf({tensor({1, 16}), Input::of(7)}));
  EXPECT_EQ(f.compiles, 4);
}

TEST(AutomaticDynamic, AFloatThatChangesIsGuardedByTypeOnly) {
  Function f{{"x", "lr"}};
  f.call(callOf({tensor({4}), Input::of(0.1)}));
  f.call(callOf({tensor({4}), Input::of(0.1)}));
  EXPECT_EQ(f.compiles, 1);
  EXPECT_FALSE(f.frame.dynamicFloat("L['lr']"));
  for (double lr : {0.2, 0.3, 1e-3, -0.0}) f.call(callOf({tensor({4}), Input::of(lr)}));
  EXPECT_EQ(f.compiles, 2) << f.frame.text();
  EXPECT_TRUE(f.frame.dynamicFloat("L['lr']"));
  EXPECT_FALSE(f.frame.dynamicInt("L['lr']"));
  std::string text = guardsForCall(callOf({tensor({4}), Input::of(0.5)}), {"x", "lr"}, f.frame).text();
  EXPECT_NE(text.find("type(L['lr']) is builtins.float"), std::string::npos) << text;
  EXPECT_EQ(text.find("L['lr'] =="), std::string::npos) << text;
  // An int at that source is another kind of input: observed afresh, static again.
  EXPECT_TRUE(f.frame.observe(observe(callOf({tensor({4}), Input::of(3)}), {"x", "lr"})));
  EXPECT_FALSE(f.frame.dynamicInt("L['lr']"));
  EXPECT_FALSE(f.frame.dynamicFloat("L['lr']"));
}

TEST(AutomaticDynamic, GuardsOfADynamicDim) {
  FrameState frame;
  frame.observe(observe(callOf({tensor({8, 16, 4})}), {"x"}));
  frame.observe(observe(callOf({tensor({8, 32, 4})}), {"x"}));
  GuardSet set = guardsForCall(callOf({tensor({8, 32, 4})}), {"x"}, frame);
  std::string text = set.text();
  EXPECT_NE(text.find("L['x'] is a tensor float32 cpu size [8, ?, 4] stride [?, 4, 1]"), std::string::npos) << text;
  EXPECT_NE(text.find("s0 = L['x'].size()[1]"), std::string::npos) << text;
  EXPECT_NE(text.find("s1 = L['x'].stride()[0]"), std::string::npos) << text;
  Program p = compile(set);
  EXPECT_EQ(firstFailure(p, callOf({tensor({8, 100, 4})})), std::nullopt);
  EXPECT_NE(firstFailure(p, callOf({tensor({7, 100, 4})})), std::nullopt);
  TensorInput strided = contiguousTensor(DType::Float32, {8, 100, 4});
  strided.strides[0] = 800; // not the contiguous stride: the artifact would misread it
  EXPECT_NE(firstFailure(p, callOf({Input::of(strided)})), std::nullopt);
}

TEST(AutomaticDynamic, MarksOverrideObservations) {
  FrameState frame;
  frame.mark("L['x'].size()[0]", true);
  frame.observe(observe(callOf({tensor({8, 16})}), {"x"}));
  EXPECT_TRUE(frame.dynamicDim("L['x']", 0));
  frame.observe(observe(callOf({tensor({8, 32})}), {"x"}));
  frame.mark("L['x'].size()[1]", false);
  EXPECT_FALSE(frame.dynamicDim("L['x']", 1));
}

TEST(AutomaticDynamic, RanksMergeToOneDecision) {
  // Rank 0 sees batch 4, rank 1 batch 8: merged in rank order, both decide the same.
  std::vector<FrameInput> rank0 = observe(callOf({tensor({4, 16})}), {"x"});
  std::vector<FrameInput> rank1 = observe(callOf({tensor({8, 16})}), {"x"});
  FrameState a = merge({}, {rank0, rank1});
  FrameState b = merge({}, {rank0, rank1});
  EXPECT_EQ(a.text(), b.text());
  EXPECT_TRUE(a.dynamicDim("L['x']", 0));
  EXPECT_EQ(guardsForCall(callOf({tensor({4, 16})}), {"x"}, a).text(),
            guardsForCall(callOf({tensor({8, 16})}), {"x"}, b).text().replace(0, 0, ""));
}

TEST(AutomaticDynamic, GuardsOfNestedInputs) {
  CallInput call = callOf({Input::list({tensor({2}), Input::of(1.5)}),
                           Input::dict({{Input::of("k"), Input::of("v")}, {Input::of(3), Input::none()}}),
                           Input::object({"m", "Cfg"}, 9, {})});
  call.kwargs = {{"flag", Input::of(true)}};
  GuardSet set = guardsForCall(call, {"xs", "d", "cfg"}, {});
  Program p = compile(set);
  EXPECT_EQ(firstFailure(p, call), std::nullopt);
  CallInput other = call;
  other.args[0].items[1] = Input::of(2.5);
  EXPECT_EQ(firstFailure(p, other), "L['xs'][1] == 1.5 failed: got 2.5");
  other = call;
  other.kwargs[0].second = Input::of(false);
  EXPECT_EQ(firstFailure(p, other), "L['flag'] == True failed: got False");
  other = call;
  other.args[2].type = {"m", "Other"};
  EXPECT_EQ(firstFailure(p, other), "type(L['cfg']) is m.Cfg failed: got m.Other");
  other = call;
  other.state.gradEnabled = false;
  EXPECT_EQ(firstFailure(p, other), "torch.is_grad_enabled() == True failed: got False");
}

} // namespace
} // namespace kiln::guards
