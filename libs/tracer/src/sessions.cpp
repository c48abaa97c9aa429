// Kept traces: a session per trace, its evaluator on a thread of its own (sessions.h).
#include "sessions.h"

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <random>

#include "kiln/guards/wire.h"
#include "object_source.h"

namespace kiln::tracer {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kIdle = std::chrono::seconds(120); // a session whose caller is silent this long ends
constexpr size_t kMaxWaiting = 16; // sessions waiting at once; the most idle ends first
constexpr size_t kStackBytes = size_t{64} << 20; // the evaluator recurses once per inlined call

// Unwinds a session's evaluator when the session ends before its trace does.
struct Ended {};

class Session : public ObjectSource {
public:
  Session(uint64_t id, schema::TraceRequest::Reader request) : id_(id) {
    request_.setRoot(request);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, kStackBytes);
    int failed = pthread_create(&thread_, &attr, &Session::main, this);
    pthread_attr_destroy(&attr);
    if (failed)
      throw Error(ErrorCode::Internal,
                  "kept trace: no thread for it (" + std::to_string(failed) + ")");
  }

  ~Session() noexcept override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ended_ = true;
    }
    cv_.notify_all();
    pthread_join(thread_, nullptr);
  }

  uint64_t id() const { return id_; }
  Clock::time_point lastUsed() const { return lastUsed_; }

  // Hands the trace `objects` (what it asked for; none in the first round) and waits for its
  // next need or its end, which it writes into `reply`. True when the trace ended.
  bool round(capnp::List<capnp::Data>::Reader objects, schema::TraceReply::Builder reply) {
    std::vector<std::unique_ptr<CopiedMessage>> copies;
    for (auto blob : objects)
      copies.push_back(
          std::make_unique<CopiedMessage>(blob.begin(), blob.size(), "an object message"));
    std::unique_lock<std::mutex> lock(mu_);
    for (auto& c : copies) received_.push_back(std::move(c));
    tracing_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !tracing_; });
    lastUsed_ = Clock::now();
    if (done_) {
      if (error_) std::rethrow_exception(error_);
      copyAnswer(reply);
      return true;
    }
    auto steps = reply.initNeedObjects(1).init(0, static_cast<unsigned>(need_.size()));
    for (unsigned j = 0; j < steps.size(); ++j) guards::toWire(need_[j], steps[j]);
    reply.setSession(id_);
    return false;
  }

  std::vector<schema::ObjectDesc::Reader> received() override {
    std::lock_guard<std::mutex> lock(mu_);
    taken_ = received_.size();
    return readers(0);
  }

  std::vector<schema::ObjectDesc::Reader> await(const Path& path) override {
    std::unique_lock<std::mutex> lock(mu_);
    need_ = path;
    tracing_ = false;
    cv_.notify_all();
    cv_.wait(lock, [&] { return tracing_ || ended_; });
    if (ended_) throw Ended{};
    std::vector<schema::ObjectDesc::Reader> fresh = readers(taken_);
    taken_ = received_.size();
    return fresh;
  }

private:
  static void* main(void* self) {
    static_cast<Session*>(self)->run();
    return nullptr;
  }

  void run() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return tracing_ || ended_; }); // the first round's caller is waiting
      if (ended_) return finish(nullptr);
    }
    try {
      traceWith(request_.getRoot<schema::TraceRequest>().asReader(),
                answer_.initRoot<schema::TraceReply>(), this);
      finish(nullptr);
    } catch (const Ended&) {
      finish(nullptr);
    } catch (...) {
      finish(std::current_exception());
    }
  }

  void finish(std::exception_ptr error) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(error);
    done_ = true;
    tracing_ = false;
    cv_.notify_all();
  }

  std::vector<schema::ObjectDesc::Reader> readers(size_t from) const {
    std::vector<schema::ObjectDesc::Reader> out;
    for (size_t k = from; k < received_.size(); ++k)
      out.push_back(received_[k]->reader.getRoot<schema::ObjectDesc>());
    return out;
  }

  void copyAnswer(schema::TraceReply::Builder reply) {
    auto answer = answer_.getRoot<schema::TraceReply>().asReader();
    switch (answer.which()) {
    case schema::TraceReply::TRACED: reply.setTraced(answer.getTraced()); return;
    case schema::TraceReply::UNSUPPORTED: reply.setUnsupported(answer.getUnsupported()); return;
    case schema::TraceReply::NEED_OBJECTS: reply.setNeedObjects(answer.getNeedObjects()); return;
    case schema::TraceReply::SESSION_LOST: reply.setSessionLost(answer.getSessionLost()); return;
    }
  }

  const uint64_t id_;
  capnp::MallocMessageBuilder request_;
  capnp::MallocMessageBuilder answer_;
  pthread_t thread_{};
  std::mutex mu_;
  std::condition_variable cv_;
  bool tracing_ = false; // the evaluator's turn; else the caller's
  bool ended_ = false;   // the session ends: the evaluator unwinds at its next wait
  bool done_ = false;    // the trace ended: `answer_` or `error_` holds how
  Path need_;
  std::vector<std::unique_ptr<CopiedMessage>> received_;
  size_t taken_ = 0; // received_ the evaluator has read
  std::exception_ptr error_;
  Clock::time_point lastUsed_ = Clock::now();
};

// The sessions waiting for their caller's next round.
class Waiting {
public:
  std::unique_ptr<Session> start(schema::TraceRequest::Reader request) {
    uint64_t id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      do id = ids_();
      while (id == 0 || waiting_.count(id));
    }
    return std::make_unique<Session>(id, request);
  }

  // The session `id`, out of the waiting ones while its round runs; null when it is gone.
  std::unique_ptr<Session> take(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = waiting_.find(id);
    if (it == waiting_.end()) return nullptr;
    std::unique_ptr<Session> s = std::move(it->second);
    waiting_.erase(it);
    return s;
  }

  void park(std::unique_ptr<Session> session) {
    std::vector<std::unique_ptr<Session>> ending; // ended (their threads joined) outside the lock
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t id = session->id();
    waiting_.emplace(id, std::move(session));
    auto now = Clock::now();
    for (auto it = waiting_.begin(); it != waiting_.end();)
      if (now - it->second->lastUsed() > kIdle) {
        ending.push_back(std::move(it->second));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    while (waiting_.size() > kMaxWaiting) {
      auto idlest = waiting_.begin();
      for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
        if (it->second->lastUsed() < idlest->second->lastUsed()) idlest = it;
      ending.push_back(std::move(idlest->second));
      waiting_.erase(idlest);
    }
  }

private:
  std::mutex mu_;
  std::map<uint64_t, std::unique_ptr<Session>> waiting_;
  std::mt19937_64 ids_{std::random_device{}()};
};

Waiting& waiting() {
  static Waiting sessions;
  return sessions;
}

} // namespace

void traceKept(schema::TraceRequest::Reader request, schema::TraceReply::Builder reply) {
  uint64_t id = request.getSession();
  std::unique_ptr<Session> session = id ? waiting().take(id) : waiting().start(request);
  if (!session) {
    reply.setSessionLost("no kept trace " + std::to_string(id) +
                         " here: it ended (idle, or too many waiting) "
                         "or another worker holds it");
    return;
  }
  capnp::List<capnp::Data>::Reader none;
  if (!session->round(id ? request.getObjectMessages() : none, reply))
    waiting().park(std::move(session));
}

} // namespace kiln::tracer
