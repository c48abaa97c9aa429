// Storms of random and malformed frames at the broker's two sockets and at a
// worker: every message gets an Error reply or is dropped, and both processes
// stay up and keep serving.
#include <algorithm>
#include <cstring>
#include <future>
#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "kiln/schema/broker.capnp.h"
#include "rpc_fixture.h"

namespace {

using kiln::ErrorCode;
using kiln::Millis;
using kiln::rpc::Message;
using namespace kiln::rpc::test;
using Broker = RpcTest;
using Worker = RpcTest;

constexpr int kStorm = 1000;

// Deterministic garbage (fixed seeds), of the kinds a decoder must survive.
class Garbage {
public:
  explicit Garbage(uint32_t seed) : rng_(seed) {}

  uint32_t below(uint32_t n) { return std::uniform_int_distribution<uint32_t>(0, n - 1)(rng_); }

  std::string randomBytes() {
    std::string bytes(below(200), '\0');
    for (auto& byte : bytes) byte = static_cast<char>(below(256));
    return bytes;
  }
  std::string notWholeWords() {
    std::string bytes = randomBytes();
    if (bytes.size() % 8 == 0) bytes.push_back('x');
    return bytes;
  }
  // A valid message cut short: the segment table promises more than the frame holds.
  std::string truncated(const std::string& valid) { return valid.substr(0, below(valid.size())); }
  std::string oversizeSegmentTable() {
    const uint32_t table[][2] = {{0, 0xffffffffu}, {0xffffffffu, 1}, {511, 1 << 20}, {0, 1 << 28}};
    std::string bytes(16 + 8 * below(4), '\0');
    std::memcpy(&bytes[0], table[below(4)], 8);
    return bytes;
  }
  std::string deepNesting() {
    capnp::MallocMessageBuilder message;
    auto nest = message.initRoot<kiln::testsvc::Nest>();
    for (uint32_t i = 0, depth = 100 + below(900); i < depth; ++i) nest = nest.initChild();
    return frameBytes(message);
  }
  // A well-formed segment table over random words: decodes into nonsense.
  std::string validTableRandomWords() {
    const uint32_t words = 1 + below(16);
    std::string bytes(8 + 8 * words, '\0');
    const uint32_t header[2] = {0, words};
    std::memcpy(&bytes[0], header, 8);
    for (size_t i = 8; i < bytes.size(); ++i) bytes[i] = static_cast<char>(below(256));
    return bytes;
  }

  // Any of the above (random words only where decoding them into a valid message is harmless).
  std::string any(const std::string& valid, bool randomWords) {
    switch (below(randomWords ? 6 : 5)) {
    case 0: return randomBytes();
    case 1: return notWholeWords();
    case 2: return truncated(valid);
    case 3: return oversizeSegmentTable();
    case 4: return deepNesting();
    default: return validTableRandomWords();
    }
  }

private:
  std::mt19937 rng_;
};

std::string brokerHeartbeatFrame() {
  capnp::MallocMessageBuilder message;
  message.initRoot<kiln::schema::BrokerMessage>().setHeartbeat();
  return frameBytes(message);
}

std::string workerErrorFrame(uint64_t dispatchId, uint16_t code) {
  capnp::MallocMessageBuilder message;
  auto reply = message.initRoot<kiln::schema::WorkerMessage>().initReply();
  reply.setDispatchId(dispatchId);
  auto error = reply.initError();
  error.setCode(static_cast<kiln::schema::ErrorCode>(code));
  error.setMessage("garbage");
  return frameBytes(message);
}

TEST_F(Broker, SurvivesGarbageFromClients) {
  startBroker();
  const pid_t pid = spawnWorker();
  ASSERT_EQ(waitForWorkers(1).size(), 1u);

  Garbage garbage(1);
  const std::string envelope = envelopeFrame("testsvc", 7, 5000);
  const std::string body = frameBytes(*whoamiRequest());
  RawPeer peer(options_.clientEndpoint);
  for (int i = 0; i < kStorm; ++i) {
    switch (garbage.below(8)) {
    case 0: peer.send({garbage.any(envelope, true)}); break;
    case 1: peer.send({envelope, body, garbage.any(body, true)}); break;
    case 2: peer.send({garbage.any(envelope, true), body}); break;
    case 3: peer.send({envelope, garbage.any(body, false)}); break; // the worker sees it
    case 4: peer.send({envelopeFrame("testsvc", i, 5000), frameBytes(*nestRequest(200))}); break;
    case 5: peer.send({envelopeFrame("", i, 5000), body}); break;
    case 6: peer.send({envelopeFrame(std::string(1000, 's'), i, 5000), body}); break;
    default: peer.send({envelopeFrame("nosuch", i, 5000), body}); break;
    }
  }

  std::map<ErrorCode, int> codes;
  int replies = 0;
  while (replies < kStorm) {
    auto frames = peer.receive(Millis(5000));
    if (!frames) break;
    ++replies;
    ASSERT_EQ(frames->size(), 1u) << "only an error reply comes without a body";
    Message head(std::move((*frames)[0]));
    auto header = head.root<kiln::schema::ReplyHeader>();
    ASSERT_TRUE(header.isError());
    ++codes[static_cast<ErrorCode>(header.getError().getCode())];
  }
  EXPECT_EQ(replies, kStorm) << "every request gets an answer";
  for (const auto code : {ErrorCode::Malformed, ErrorCode::TooLarge, ErrorCode::InvalidArgument,
                          ErrorCode::UnknownService})
    EXPECT_GT(codes[code], 0) << kiln::errorCodeName(code);

  EXPECT_EQ(callPid(*client(), *whoamiRequest()), pid);
  EXPECT_TRUE(children_.alive(pid));
}

TEST_F(Broker, SurvivesGarbageFromWorkers) {
  startBroker();
  const pid_t pid = spawnWorker();
  ASSERT_EQ(waitForWorkers(1).size(), 1u);
  RawPeer stranger(options_.workerEndpoint); // never registers
  RawPeer impostor(options_.workerEndpoint); // registers, takes a request, answers garbage
  impostor.send({readyFrame("fuzz", 4001)});
  ASSERT_EQ(waitForWorkers(1, "fuzz").size(), 1u);
  auto fuzzClient = client();
  auto pending = std::async(std::launch::async, [&] {
    auto reply = fuzzClient->call("fuzz", *whoamiRequest(), Millis(10000));
    return reply->root<kiln::testsvc::Reply>().getPid();
  });
  const auto held = awaitDispatch(impostor, Millis(2000));
  ASSERT_TRUE(held);

  Garbage garbage(2);
  const std::string ready = readyFrame("fuzz", 4002);
  const std::string reply = workerReplyFrame(*held + 1);
  for (int i = 0; i < kStorm; ++i) {
    RawPeer& peer = garbage.below(2) ? stranger : impostor;
    if (i % 20 == 0) impostor.send({heartbeatFrame()});
    switch (garbage.below(8)) {
    case 0: peer.send({garbage.any(ready, true)}); break;
    case 1: peer.send({garbage.any(reply, true), garbage.randomBytes()}); break;
    case 2: peer.send({heartbeatFrame(), heartbeatFrame(), heartbeatFrame()}); break;
    case 3:
      peer.send({workerReplyFrame(*held + 1 + garbage.below(1000)), garbage.randomBytes()});
      break;
    case 4: peer.send({workerReplyFrame(*held + 1 + garbage.below(1000))}); break; // ok, no body
    case 5: peer.send({workerErrorFrame(*held + 1, 1000 + garbage.below(1000))}); break;
    case 6: stranger.send({heartbeatFrame()}); break; // unknown: told to register again
    default: peer.send({std::string()}); break;
    }
  }

  // The impostor finally answers what it holds; the real worker serves as before.
  impostor.send({workerReplyFrame(*held), whoamiReplyBody(4001)});
  EXPECT_EQ(pending.get(), 4001);
  // Once the stranger's last message registers it, the broker has read all it sent.
  stranger.send({readyFrame("fuzz", 4003)});
  EXPECT_TRUE(waitUntil(
      [&] {
        const auto fuzz = broker_->workers("fuzz");
        return std::any_of(fuzz.begin(), fuzz.end(), [](const auto& w) { return w.pid == 4003; });
      },
      Millis(5000)));
  EXPECT_EQ(callPid(*client(), *whoamiRequest()), pid);
  const auto workers = broker_->workers("testsvc");
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].pid, pid);
  EXPECT_TRUE(children_.alive(pid));
}

TEST_F(Worker, SurvivesGarbageFromBroker) {
  // A fake broker: the worker connects to this ROUTER, which sends it garbage.
  zmq::context_t context(1);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.set(zmq::sockopt::sndhwm, 0); // a ROUTER drops past its high-water mark
  router.bind(dir_.endpoint("fake"));
  const pid_t pid = spawnWorker("testsvc", Millis(100), 10, dir_.endpoint("fake"));

  auto receive = [&](Millis timeout) -> std::optional<std::vector<zmq::message_t>> {
    zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0) return std::nullopt;
    std::vector<zmq::message_t> frames;
    (void)zmq::recv_multipart(router, std::back_inserter(frames));
    return frames;
  };
  auto first = receive(Millis(10000));
  ASSERT_TRUE(first && first->size() == 2);
  const std::string identity = (*first)[0].to_string();
  {
    Message header(std::move((*first)[1]));
    auto ready = header.root<kiln::schema::WorkerMessage>();
    ASSERT_TRUE(ready.isReady());
    EXPECT_EQ(ready.getReady().getPid(), pid);
  }
  auto send = [&](const std::vector<std::string>& frames) {
    router.send(zmq::buffer(identity), zmq::send_flags::sndmore);
    for (size_t i = 0; i < frames.size(); ++i)
      router.send(zmq::buffer(frames[i]),
                  i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  };

  // Replies by dispatch id; the worker answers in order, so dispatch 1 (sent last) ends it.
  std::map<uint64_t, int> errors;
  std::map<uint64_t, int> oks;
  bool reconnected = false;
  auto collect = [&](Millis timeout) {
    const auto deadline = kiln::Clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<Millis>(deadline - kiln::Clock::now());
      auto frames = receive(std::max(left, Millis(0)));
      if (!frames) return;
      if (frames->size() < 2) continue;
      if ((*frames)[0].to_string() != identity) reconnected = true;
      Message header(std::move((*frames)[1]));
      auto message = header.root<kiln::schema::WorkerMessage>();
      if (message.isReady()) reconnected = true;
      if (!message.isReply()) continue;
      const uint64_t id = message.getReply().getDispatchId();
      ++(message.getReply().isError() ? errors : oks)[id];
      if (id == 1) return;
    }
  };

  Garbage garbage(3);
  const std::string dispatch = dispatchFrame(999);
  const std::string body = frameBytes(*whoamiRequest());
  auto wrongToken = std::make_unique<capnp::MallocMessageBuilder>();
  wrongToken->initRoot<kiln::testsvc::Request>().setCrash(kiln::testsvc::CRASH_TOKEN + 1);
  std::set<uint64_t> expected; // dispatches with a garbage body: each must get an Error reply
  uint64_t nextId = 1000;
  for (int i = 0; i < kStorm; ++i) {
    if (i % 25 == 0) send({brokerHeartbeatFrame()});
    switch (garbage.below(7)) {
    case 0: send({garbage.any(dispatch, false)}); break;
    case 1: send({garbage.any(dispatch, false), body}); break;
    case 2: send({brokerHeartbeatFrame(), garbage.randomBytes(), garbage.randomBytes()}); break;
    case 3:
      send({dispatchFrame(nextId), garbage.any(body, false)});
      expected.insert(nextId++);
      break;
    case 4:
      send({dispatchFrame(nextId)});
      expected.insert(nextId++);
      break; // no body
    case 5:
      send({dispatchFrame(nextId), frameBytes(*nestRequest(200))});
      expected.insert(nextId++);
      break;
    default:
      send({dispatchFrame(nextId), frameBytes(*wrongToken)});
      expected.insert(nextId++);
      break;
    }
    collect(Millis(0));
  }
  send({brokerHeartbeatFrame()});
  send({dispatchFrame(1), body});
  collect(Millis(5000));

  EXPECT_FALSE(reconnected) << "the worker reconnected: it took garbage for a reregister";
  ASSERT_EQ(oks.count(1), 1u) << "a normal request after the storm";
  // A deep Nest chain read as a BrokerMessage is a well-formed request with dispatch id 0:
  // with a valid body, that one may be answered ok. Nothing else may.
  for (const auto& [id, count] : oks) EXPECT_TRUE(id == 1 || id == 0) << "ok for dispatch " << id;
  for (const uint64_t id : expected) EXPECT_EQ(errors[id], 1) << "dispatch " << id;
  for (const auto& [id, count] : errors)
    EXPECT_TRUE(expected.count(id) || id == 0) << "an error for dispatch " << id;
  EXPECT_TRUE(children_.alive(pid));
}

} // namespace
