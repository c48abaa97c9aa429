// Guard sets, call inputs and frame states on the wire (schemas/guards.capnp).
// Reading checks what the schema cannot (a node's parent comes before it, a
// root step has no parent, symbols name nodes, shape guards are relations over
// them, nesting within kMaxInputDepth) and throws Error{Malformed} naming the
// problem; it never trusts an index it was given.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kiln/guards/entry.h"
#include "kiln/guards/frame_state.h"
#include "kiln/guards/guard_set.h"
#include "kiln/guards/input.h"
#include "kiln/schema/guards.capnp.h"

namespace kiln::guards {

constexpr int kMaxInputDepth = 64;

void toWire(const GuardSet& set, schema::GuardSet::Builder out);
GuardSet fromWire(schema::GuardSet::Reader in);

void toWire(const CallInput& call, schema::CallInput::Builder out);
CallInput fromWire(schema::CallInput::Reader in);

void toWire(const FrameState& frame, schema::FrameState::Builder out);
FrameState fromWire(schema::FrameState::Reader in);

void toWire(const std::vector<FrameInput>& inputs, capnp::List<schema::FrameInput>::Builder out);
std::vector<FrameInput> fromWire(capnp::List<schema::FrameInput>::Reader in);

void toWire(const Step& step, schema::GuardStep::Builder out);
Step fromWire(schema::GuardStep::Reader in);
void toWire(const TypeRef& type, schema::TypeRef::Builder out);
TypeRef fromWire(schema::TypeRef::Reader in);
void toWire(const TensorInput& tensor, schema::InputValue::TensorInput::Builder out);
TensorInput fromWire(schema::InputValue::TensorInput::Reader in);

void toWire(const GlobalState& state, schema::GlobalState::Builder out);
GlobalState fromWire(schema::GlobalState::Reader in);

// A function key needs a qualname and a code hash (Error{InvalidArgument} otherwise).
void toWire(const FunctionKey& key, schema::FunctionKey::Builder out);
FunctionKey fromWire(schema::FunctionKey::Reader in);
void toWire(const CompiledEntry& entry, schema::CompiledEntry::Builder out);
CompiledEntry fromWire(schema::CompiledEntry::Reader in);
// A member needs 0 <= rank < worldSize (Error{InvalidArgument} otherwise);
// an empty job is no job, and reads as nullopt.
void toWire(const JobMember& member, schema::JobMember::Builder out);
std::optional<JobMember> fromWire(schema::JobMember::Reader in);

// Whole messages, as the SDK caches them and the service stores them.
std::string toBytes(const GuardSet& set);
GuardSet guardSetFromBytes(std::string_view bytes);
std::string toBytes(const CallInput& call);
CallInput callInputFromBytes(std::string_view bytes);
std::string toBytes(const CompiledEntry& entry);
CompiledEntry compiledEntryFromBytes(std::string_view bytes);

} // namespace kiln::guards
