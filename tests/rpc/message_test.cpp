// rpc::Message: frames of any alignment are read in place or copied, and bad
// frames become kiln::Error with the code the protocol documents.
#include <cstring>
#include <functional>
#include <memory>

#include <gtest/gtest.h>

#include "kiln/rpc/message.h"
#include "rpc_fixture.h"

namespace {

using kiln::Error;
using kiln::ErrorCode;
using kiln::rpc::Limits;
using kiln::rpc::Message;
using namespace kiln::rpc::test;

ErrorCode codeOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "no kiln::Error thrown";
  return ErrorCode::Internal;
}

zmq::message_t frameOf(const std::string& bytes) {
  return zmq::message_t(bytes.data(), bytes.size());
}

std::string echoOf(Message& message) {
  auto echo = kiln::rpc::decoding([&] { return message.root<kiln::testsvc::Request>().getEcho(); });
  return std::string(reinterpret_cast<const char*>(echo.begin()), echo.size());
}

TEST(Message, ReadsUnalignedFrame) {
  const std::string payload(1000, 'k');
  const std::string bytes = frameBytes(*echoRequest(payload));
  // A zero-copy frame whose data starts one byte past a word boundary.
  auto storage = std::make_unique<kj::byte[]>(bytes.size() + 8);
  kj::byte* unaligned = storage.get() + 1;
  std::memcpy(unaligned, bytes.data(), bytes.size());
  zmq::message_t frame(unaligned, bytes.size(), nullptr, nullptr);
  ASSERT_EQ(frame.data(), static_cast<void*>(unaligned));

  Message message(std::move(frame));
  EXPECT_EQ(echoOf(message), payload);
  EXPECT_EQ(message.sizeBytes(), bytes.size());
}

TEST(Message, ReadsSmallFrameStoredInsideTheZmqMessage) {
  // ZeroMQ keeps frames of up to 33 bytes inside zmq_msg_t, at no particular alignment.
  capnp::MallocMessageBuilder nest;
  nest.initRoot<kiln::testsvc::Nest>().initChild();
  const std::string bytes = frameBytes(nest);
  ASSERT_LE(bytes.size(), 33u);
  Message message(frameOf(bytes));
  auto root = message.root<kiln::testsvc::Nest>();
  EXPECT_TRUE(root.hasChild());
  EXPECT_FALSE(root.getChild().hasChild());
}

TEST(Message, RefusesFrameOverTheLimitAsTooLarge) {
  Limits limits;
  limits.maxFrameBytes = 64;
  const std::string bytes = frameBytes(*echoRequest(std::string(100, 'x')));
  EXPECT_EQ(codeOf([&] { Message message(frameOf(bytes), limits); }), ErrorCode::TooLarge);
  limits.maxFrameBytes = bytes.size();
  Message atLimit(frameOf(bytes), limits);
  EXPECT_EQ(echoOf(atLimit), std::string(100, 'x'));
}

TEST(Message, RefusesFrameThatIsNotWholeWordsAsMalformed) {
  const std::string bytes = frameBytes(*echoRequest("0123456789"));
  for (const size_t size : {size_t{0}, size_t{1}, size_t{7}, size_t{9}, bytes.size() - 1})
    EXPECT_EQ(codeOf([&] { Message message(frameOf(bytes.substr(0, size))); }),
              ErrorCode::Malformed)
        << size << " bytes";
}

TEST(Message, RefusesSegmentTableThatPromisesMoreThanTheFrame) {
  auto table = [](uint32_t segmentsMinusOne, uint32_t firstSize) {
    std::string bytes(16, '\0');
    std::memcpy(&bytes[0], &segmentsMinusOne, 4);
    std::memcpy(&bytes[4], &firstSize, 4);
    return bytes;
  };
  for (const auto& bytes :
       {table(0, 1000), table(0, 0xffffffff), table(0xffffffff, 1), table(600, 1), table(1, 1)})
    EXPECT_EQ(codeOf([&] { Message message(frameOf(bytes)); }), ErrorCode::Malformed);
  // Truncated inside the first segment.
  const std::string bytes = frameBytes(*echoRequest(std::string(64, 'x')));
  EXPECT_EQ(codeOf([&] { Message message(frameOf(bytes.substr(0, bytes.size() - 8))); }),
            ErrorCode::Malformed);
}

TEST(Message, ReportsNestingOverTheLimitAsTooLarge) {
  Limits limits;
  limits.nestingLimit = 16;
  const std::string bytes = frameBytes(*nestRequest(40));
  Message message(frameOf(bytes), limits);
  EXPECT_EQ(codeOf([&] {
              kiln::rpc::decoding([&] {
                auto nest = message.root<kiln::testsvc::Request>().getNest();
                while (nest.hasChild()) nest = nest.getChild();
              });
            }),
            ErrorCode::TooLarge);
}

TEST(Message, ReportsTraversalOverTheLimitAsTooLarge) {
  Limits limits;
  limits.traversalLimitWords = 32;
  Message message(frameOf(frameBytes(*echoRequest(std::string(1000, 'x')))), limits);
  EXPECT_EQ(codeOf([&] { echoOf(message); }), ErrorCode::TooLarge);
}

TEST(Message, ReportsWrongPointerKindAsMalformed) {
  // A Nest chain read as an echo request: where the Data should be lies a struct pointer.
  capnp::MallocMessageBuilder nest;
  nest.initRoot<kiln::testsvc::Nest>().initChild().initChild();
  Message message(frameOf(frameBytes(nest)));
  EXPECT_EQ(codeOf([&] { echoOf(message); }), ErrorCode::Malformed);
}

} // namespace
