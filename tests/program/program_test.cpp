#include "kiln/program/program.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include "kiln/common/error.h"
#include "kiln/schema/program.capnp.h"

namespace fs = std::filesystem;
using namespace kiln;
using program::Input;
using program::InputShape;
using program::RuntimeAssert;
using program::TensorData;

namespace {

// f(x, y) = (x.reshape(-1) * w, y) with x: [s0, s1], y: [s2], w stored (no add, which the
// IR cannot type before the assert is known):
// the asserts s0*s1 == s2 (what a reshape needs) and s0 != s1.
Program seedProgram() {
  auto table = std::make_shared<sym::SymbolTable>();
  ir::Graph g(*table);
  sym::Expr s0 = table->declare("s0", 3, {2, sym::kInf});
  sym::Expr s1 = table->declare("s1", 4, {2, sym::kInf});
  sym::Expr s2 = table->declare("s2", 12, {2, sym::kInf});
  auto meta = [&](ir::Shape sizes) {
    return ir::Value(ir::TensorMeta::contiguous(DType::Float32, sizes, *table));
  };
  ir::ValueId x = g.placeholder("x", meta({s0, s1}));
  ir::ValueId w = g.placeholder("w", meta({table->integer(1)}));
  ir::ValueId y = g.placeholder("y", meta({s2}));
  ir::ValueId flat = g.call("reshape", {x}, {{"size", std::vector<sym::Expr>{s0 * s1}}});
  g.setOutputs({g.call("mul", {flat, w}), y});
  TensorData weight{DType::Float32, {1}, std::string("\0\0\0@", 4)}; // 2.0f
  std::vector<Input> inputs{{"x", "L['x']", x, std::nullopt, {}},
                            {"w", "G['w']", w, weight, {}},
                            {"y", "L['y']", y, std::nullopt, {}}};
  std::vector<program::Symbol> symbols{{s0, "a", "x.size(0)", {2, 64}},
                                       {s1, "b", "x.size(1)", {2, sym::kInf}},
                                       {s2, "n", "y.size(0)", {2, sym::kInf}}};
  std::vector<RuntimeAssert> asserts{{sym::eq(s0 * s1, s2), "the traced code needs a*b == n"},
                                     {sym::ne(s0, s1), "the traced code needs a != b"}};
  return Program(table, std::move(g), std::move(inputs), std::move(symbols), std::move(asserts), {},
                 "f");
}

InputShape f32(std::vector<int64_t> sizes) {
  return {DType::Float32, {}, std::move(sizes)};
}

std::string errorOf(const std::function<void()>& f, ErrorCode* code = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (code) *code = e.code();
    return e.message();
  }
  return "(no error)";
}

struct TempFile {
  fs::path path =
      fs::temp_directory_path() / ("kiln-program-test-" + std::to_string(::getpid()) + ".kiln");
  ~TempFile() { fs::remove(path); }
  void write(const std::string& bytes) const { std::ofstream(path, std::ios::binary) << bytes; }
};

} // namespace

TEST(Program, ChecksACallAgainstTheSpecAndTheAsserts) {
  Program p = seedProgram();
  ASSERT_EQ(p.userInputs().size(), 2u);
  sym::Binding b = p.check({f32({3, 4}), f32({12})});
  EXPECT_EQ(b.at(*p.table().lookup("s2")), 12);
  EXPECT_EQ(
      errorOf([&] {
        p.check({f32({3, 4}), f32({13})});
      }),
      "f: runtime assert s0*s1 == s2 failed: s0=3, s1=4, s2=13 (the traced code needs a*b == n)");
  EXPECT_NE(errorOf([&] {
              p.check({f32({4, 4}), f32({16})});
            }).find("runtime assert s0 != s1 failed: s0=4, s1=4"),
            std::string::npos);
  EXPECT_EQ(errorOf([&] {
              p.check({f32({65, 2}), f32({130})});
            }),
            "f: x.size(0) (a) is 65, outside a's range [2, 64]");
  EXPECT_EQ(errorOf([&] { p.check({f32({3, 4})}); }), "f: expected 2 inputs (x, y), got 1");
  EXPECT_EQ(errorOf([&] {
              p.check({f32({3, 4}), {DType::Float64, {}, {12}}});
            }),
            "f: input y must be float32, got float64");
  EXPECT_NE(errorOf([&] {
              p.check({f32({12}), f32({12})});
            }).find("input x must have 2 dims"),
            std::string::npos);
  EXPECT_NE(errorOf([&] {
              p.check({f32({3, 4}), {DType::Float32, {ir::DeviceType::Cuda, 0}, {12}}});
            }).find("must be on cpu"),
            std::string::npos);
}

TEST(Program, OneDimIsOneValue) {
  auto table = std::make_shared<sym::SymbolTable>();
  ir::Graph g(*table);
  sym::Expr s0 = table->declare("s0", 4, {2, sym::kInf}),
            s1 = table->declare("s1", 4, {2, sym::kInf});
  ir::ValueId x =
      g.placeholder("x", ir::Value(ir::TensorMeta::contiguous(DType::Float32, {s0}, *table)));
  ir::ValueId y =
      g.placeholder("y", ir::Value(ir::TensorMeta::contiguous(DType::Float32, {s1}, *table)));
  g.setOutputs({x, y});
  Program p(
      table, std::move(g),
      {{"x", "L['x']", x, std::nullopt, {}}, {"y", "L['y']", y, std::nullopt, {}}},
      {{s0, "batch", "x.size(0)", {2, sym::kInf}}, {s1, "batch", "y.size(0)", {2, sym::kInf}}}, {});
  EXPECT_NO_THROW(p.check({f32({5}), f32({5})}));
  EXPECT_EQ(errorOf([&] {
              p.check({f32({5}), f32({6})});
            }),
            "program: x.size(0) and y.size(0) are both Dim batch, but they are 5 and 6");
}

TEST(Program, RoundTripsThroughAFile) {
  Program p = seedProgram();
  TempFile file;
  p.save(file.path);
  Program back = Program::load(file.path);
  EXPECT_EQ(back.toBytes(), p.toBytes());
  EXPECT_EQ(back.name(), "f");
  ASSERT_EQ(back.asserts().size(), 2u);
  EXPECT_EQ(back.symbols()[0].dim, "a");
  EXPECT_EQ(back.symbols()[0].range, (sym::Range{2, 64}));
  ASSERT_TRUE(back.inputs()[1].constant);
  EXPECT_EQ(back.inputs()[1].constant->bytes, p.inputs()[1].constant->bytes);
  EXPECT_EQ(errorOf([&] {
              back.check({f32({3, 4}), f32({13})});
            }),
            errorOf([&] {
              p.check({f32({3, 4}), f32({13})});
            }));
  EXPECT_NE(back.text().find("s0*s1 == s2"), std::string::npos) << back.text();
}

TEST(Program, LoadErrorsAreTyped) {
  const std::string good = seedProgram().toBytes();
  TempFile file;
  auto codeOfLoading = [&](const std::string& bytes) {
    file.write(bytes);
    ErrorCode code = ErrorCode::Internal;
    std::string message = errorOf([&] { Program::load(file.path); }, &code);
    EXPECT_NE(message.find(file.path.string()), std::string::npos) << message;
    return code;
  };
  EXPECT_EQ(codeOfLoading(good.substr(0, good.size() / 2)), ErrorCode::Malformed) << "truncated";
  EXPECT_EQ(codeOfLoading(good.substr(0, good.size() - 8)), ErrorCode::Malformed)
      << "one word short";
  EXPECT_EQ(codeOfLoading(good.substr(0, 13)), ErrorCode::Malformed) << "not whole words";
  EXPECT_EQ(codeOfLoading(""), ErrorCode::Malformed) << "empty";
  EXPECT_EQ(codeOfLoading(std::string(4096, '\x5a')), ErrorCode::Malformed) << "garbage";

  auto edited = [&](auto edit) {
    kj::Array<capnp::word> words = kj::heapArray<capnp::word>(good.size() / sizeof(capnp::word));
    std::memcpy(words.begin(), good.data(), good.size());
    capnp::FlatArrayMessageReader reader(words);
    capnp::MallocMessageBuilder message;
    message.setRoot(reader.getRoot<schema::Program>());
    edit(message.getRoot<schema::Program>());
    auto flat = capnp::messageToFlatArray(message);
    return std::string(reinterpret_cast<const char*>(flat.asBytes().begin()),
                       flat.asBytes().size());
  };
  ErrorCode code = ErrorCode::Internal;
  file.write(edited([](schema::Program::Builder p) { p.setMagic(0x1234); }));
  EXPECT_NE(errorOf([&] { Program::load(file.path); }, &code).find("bad magic"), std::string::npos);
  EXPECT_EQ(code, ErrorCode::Malformed);
  file.write(edited(
      [](schema::Program::Builder p) { p.setFormatVersion(schema::PROGRAM_FORMAT_VERSION + 1); }));
  EXPECT_NE(errorOf([&] { Program::load(file.path); }, &code).find("format version 2"),
            std::string::npos);
  EXPECT_EQ(code, ErrorCode::Unsupported);
  file.write(edited([](schema::Program::Builder p) { p.getSymbols()[0].setName("s9"); }));
  errorOf([&] { Program::load(file.path); }, &code);
  EXPECT_EQ(code, ErrorCode::Malformed) << "a symbol the graph lacks";
  file.write(edited([](schema::Program::Builder p) {
    p.getInputs()[1].getConstant().setData(kj::heapArray<kj::byte>(3));
  }));
  errorOf([&] { Program::load(file.path); }, &code);
  EXPECT_EQ(code, ErrorCode::Malformed) << "a stored tensor of the wrong size";
  file.write(edited([](schema::Program::Builder p) { p.initInputs(1); }));
  errorOf([&] { Program::load(file.path); }, &code);
  EXPECT_EQ(code, ErrorCode::Malformed) << "fewer inputs than placeholders";
  errorOf([&] { Program::load("/nonexistent/x.kiln"); }, &code);
  EXPECT_EQ(code, ErrorCode::NotFound);
}

TEST(Program, TensorFilesRoundTrip) {
  TempFile file;
  TensorData t{DType::Int64, {2, 1}, std::string(16, '\x01')};
  program::saveTensor(file.path, t);
  TensorData back = program::loadTensor(file.path);
  EXPECT_EQ(back.dtype, DType::Int64);
  EXPECT_EQ(back.sizes, t.sizes);
  EXPECT_EQ(back.bytes, t.bytes);
  file.write("garbage!");
  EXPECT_THROW(program::loadTensor(file.path), Error);
}
