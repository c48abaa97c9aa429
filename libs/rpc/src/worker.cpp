#include "kiln/rpc/worker.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/common/log.h"
#include "kiln/common/version.h"
#include "kiln/rpc/errors.h"
#include "kiln/schema/broker.capnp.h"

namespace kiln::rpc {

// Headers are a few words: a small first segment spares allocating and zeroing
// Cap'n Proto's default one (8 KiB) for every message. Reply bodies keep the default.
static constexpr unsigned kHeaderWords = 64;

// The socket to the broker, owned by the serve loop. While handle() runs the
// loop lets go of the socket and a side thread keeps heartbeating through it,
// so a long request does not make the worker look dead.
class Worker::Connection {
public:
  Connection(zmq::context_t& context, const WorkerOptions& options)
      : context_(context), options_(options) {
    connect();
  }

  void connect() {
    socket_ = zmq::socket_t(context_, zmq::socket_type::dealer);
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(options_.endpoint);
    capnp::MallocMessageBuilder message(kHeaderWords);
    auto ready = message.initRoot<schema::WorkerMessage>().initReady();
    ready.setService(options_.service);
    ready.setPid(getpid());
    ready.setVersion(std::string(version()));
    ready.setBuildId(std::string(buildId()));
    send(message);
    brokerSeen_ = Clock::now();
  }

  void send(capnp::MessageBuilder& header, zmq::message_t* body = nullptr) {
    socket_.send(toFrame(header), body ? zmq::send_flags::sndmore : zmq::send_flags::none);
    if (body) socket_.send(*body, zmq::send_flags::none);
    lastSent_ = Clock::now();
  }

  void sendHeartbeat() {
    capnp::MallocMessageBuilder message(kHeaderWords);
    message.initRoot<schema::WorkerMessage>().setHeartbeat();
    send(message);
  }

  void sendDisconnect(const std::string& reason) {
    capnp::MallocMessageBuilder message(kHeaderWords);
    message.initRoot<schema::WorkerMessage>().setDisconnect(reason);
    send(message);
  }

  zmq::socket_t& socket() { return socket_; }
  std::mutex& mutex() { return mutex_; }
  Clock::time_point lastSent() const { return lastSent_; }
  Clock::time_point brokerSeen() const { return brokerSeen_; }
  void sawBroker() { brokerSeen_ = Clock::now(); }

private:
  zmq::context_t& context_;
  const WorkerOptions& options_;
  zmq::socket_t socket_;
  std::mutex mutex_;
  Clock::time_point lastSent_;
  Clock::time_point brokerSeen_;
};

Worker::Worker(WorkerOptions options) : options_(std::move(options)) {}
Worker::~Worker() = default;

void Worker::run() {
  auto& logger = log();
  zmq::context_t context(1);
  Connection connection(context, options_);
  std::unique_lock<std::mutex> held(connection.mutex());

  // Heartbeats while the serve loop is inside handle() (it holds the mutex otherwise).
  // It looks several times per interval, so beats are at most 1.25 intervals apart.
  std::mutex quitMutex;
  std::condition_variable quitSignal;
  bool quit = false;
  const Millis look = std::max(Millis(1), options_.heartbeat / 4);
  std::thread heartbeater([&] {
    std::unique_lock<std::mutex> lock(quitMutex);
    while (!quitSignal.wait_for(lock, look, [&] { return quit; })) {
      std::unique_lock<std::mutex> socketLock(connection.mutex(), std::try_to_lock);
      if (socketLock && Clock::now() - connection.lastSent() >= options_.heartbeat)
        connection.sendHeartbeat();
    }
  });
  // Stops the heartbeater however run() ends: a joinable std::thread would terminate.
  struct StopHeartbeater {
    std::mutex& mutex;
    std::condition_variable& signal;
    bool& quit;
    std::thread& thread;
    ~StopHeartbeater() {
      {
        std::lock_guard<std::mutex> lock(mutex);
        quit = true;
      }
      signal.notify_one();
      thread.join();
    }
  } stopHeartbeater{quitMutex, quitSignal, quit, heartbeater}; // before `held` unlocks

  logger.info("worker ready service={} endpoint={}", options_.service, options_.endpoint);
  Millis reconnectDelay = options_.heartbeat;
  std::string leaving = "stopped";
  while (!stopping_.load()) {
    // Wake when the next heartbeat is due, not a whole interval after the last message.
    const auto due =
        std::chrono::ceil<Millis>(connection.lastSent() + options_.heartbeat - Clock::now());
    zmq::pollitem_t item{connection.socket().handle(), 0, ZMQ_POLLIN, 0};
    int ready = 0;
    try {
      ready = zmq::poll(&item, 1, std::clamp(due, Millis(0), options_.heartbeat));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
      continue; // a signal (stop) woke us
    }
    if (ready > 0) {
      std::vector<zmq::message_t> frames;
      frames.reserve(2); // header, body
      (void)zmq::recv_multipart(connection.socket(), std::back_inserter(frames));
      connection.sawBroker();
      reconnectDelay = options_.heartbeat;
      try {
        if (frames.empty()) continue;
        Message header(std::move(frames[0]), options_.limits);
        auto message = decoding([&] { return header.root<schema::BrokerMessage>(); });
        const auto which = decoding([&] { return message.which(); });
        if (which == schema::BrokerMessage::REQUEST) {
          const uint64_t dispatchId =
              decoding([&] { return message.getRequest().getDispatchId(); });
          zmq::message_t body = frames.size() > 1 ? std::move(frames[1]) : zmq::message_t();
          held.unlock();
          serveOne(connection, dispatchId, std::move(body));
          held.lock();
        } else if (which == schema::BrokerMessage::DRAIN) {
          leaving = "drained";
          break;
        } else if (which == schema::BrokerMessage::REREGISTER) {
          connection.connect();
        }
      } catch (const Error& e) {
        logger.warn("dropped a bad message from the broker error={}", e.what());
      }
    } else if (Clock::now() - connection.brokerSeen() > options_.heartbeat * options_.liveness) {
      // Paranoid Pirate: the broker went silent; reconnect with a growing delay.
      logger.warn("broker silent, reconnecting in {} ms", reconnectDelay.count());
      std::this_thread::sleep_for(reconnectDelay);
      reconnectDelay = std::min(reconnectDelay * 2, options_.heartbeat * 32);
      connection.connect();
    }
    if (Clock::now() - connection.lastSent() >= options_.heartbeat) connection.sendHeartbeat();
  }

  connection.sendDisconnect(leaving);
  // The socket lingers 0 so that a reconnect drops stale traffic; here it must not drop
  // the last reply and the goodbye, which may still be queued when the socket closes.
  connection.socket().set(zmq::sockopt::linger,
                          static_cast<int>((options_.heartbeat * options_.liveness).count()));
  logger.info("worker leaving service={} reason={} served={}", options_.service, leaving, served_);
}

// Runs handle() without the socket lock, then takes it back to send the reply.
void Worker::serveOne(Connection& connection, uint64_t dispatchId, zmq::message_t body) {
  capnp::MallocMessageBuilder reply;
  std::optional<Error> failure;
  try {
    Message request(std::move(body), options_.limits);
    decoding([&] { handle(request, reply); });
  } catch (const Error& e) {
    failure = e.from(options_.service);
  } catch (const std::exception& e) {
    failure = Error(ErrorCode::Internal, e.what(), options_.service);
  } catch (...) {
    failure = Error(ErrorCode::Internal, "unknown exception in handler", options_.service);
  }
  ++served_;

  std::lock_guard<std::mutex> lock(connection.mutex());
  capnp::MallocMessageBuilder head(kHeaderWords);
  auto out = head.initRoot<schema::WorkerMessage>().initReply();
  out.setDispatchId(dispatchId);
  if (failure) {
    toWire(*failure, out.initError());
    connection.send(head);
  } else {
    out.setOk();
    zmq::message_t frame = toFrame(reply);
    connection.send(head, &frame);
  }
}

} // namespace kiln::rpc
