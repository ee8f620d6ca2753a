// A forwarder to envpool's XLA FFI handlers, under names that are the same in every process
// (see rljax/envs/envpool_ffi.py for why).
//
// envpool's custom calls carry the pool's address as a static attribute `handle` (an int64
// scalar) and are registered under a name made of the Python object's id, so each process
// compiles different programs. Here a handler is registered once per (env type, method) under a
// fixed name and called without attributes; at run time it reads the pool's address from
// operand 0 (the handle buffer envpool threads through every call: the 8 bytes of the pointer),
// and calls envpool's own handler with a copy of the call frame whose attributes are exactly
// those envpool's programs carry: {handle = <address> : i64}. Operands, results, stage,
// execution context and the future are envpool's unchanged.
//
// A handler sees only its call frame, not the name it was called by, so each name gets one
// of kSlots functions (Forward<0>, Forward<1>, ...), and rljax_envpool_bind(slot, handler) sets
// the envpool handler that slot calls. Every pool of one env type shares the same handler, so
// one slot serves every pool of that type and method in a process.
//
// Only the C API (xla/ffi/api/c_api.h) is used: no C++ FFI bindings, no state of our own.

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <utility>

#include "xla/ffi/api/c_api.h"

namespace {

constexpr int kSlots = 64;
constexpr int64_t kHandleBytes = 8;

std::atomic<XLA_FFI_Handler*> g_targets[kSlots];

XLA_FFI_Error* Fail(const XLA_FFI_CallFrame* frame, XLA_FFI_Error_Code code,
                    const char* message) {
  XLA_FFI_Error_Create_Args args;
  std::memset(&args, 0, sizeof(args));
  args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  args.extension_start = nullptr;
  args.message = message;
  args.errc = code;
  return frame->api->XLA_FFI_Error_Create(&args);
}

XLA_FFI_Error* Forward(int slot, XLA_FFI_CallFrame* frame) {
  XLA_FFI_Handler* target = g_targets[slot].load(std::memory_order_acquire);
  if (target == nullptr) {
    return Fail(frame, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                "rljax envpool forwarder: no envpool handler bound to this target");
  }
  // Metadata queries (API version, traits) at registration are envpool's to answer.
  if (frame->extension_start != nullptr &&
      frame->extension_start->type == XLA_FFI_Extension_Metadata) {
    return target(frame);
  }
  if (frame->args.size < 1 || frame->args.types[0] != XLA_FFI_ArgType_BUFFER) {
    return Fail(frame, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                "rljax envpool forwarder: operand 0 must be the pool's handle buffer");
  }
  const auto* buffer = static_cast<const XLA_FFI_Buffer*>(frame->args.args[0]);
  if (buffer->dtype != XLA_FFI_DataType_U8 || buffer->rank != 1 ||
      buffer->dims[0] != kHandleBytes || buffer->data == nullptr) {
    return Fail(frame, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                "rljax envpool forwarder: operand 0 must be a uint8[8] handle");
  }
  if (frame->attrs.size != 0) {
    return Fail(frame, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                "rljax envpool forwarder: the call must carry no attributes");
  }
  int64_t handle;
  std::memcpy(&handle, buffer->data, sizeof(handle));

  static const char kName[] = "handle";
  XLA_FFI_ByteSpan name{kName, sizeof(kName) - 1};
  XLA_FFI_ByteSpan* names[1] = {&name};
  XLA_FFI_Scalar scalar{XLA_FFI_DataType_S64, &handle};
  void* attrs[1] = {&scalar};
  XLA_FFI_AttrType types[1] = {XLA_FFI_AttrType_SCALAR};

  XLA_FFI_CallFrame copy = *frame;
  copy.attrs.size = 1;
  copy.attrs.types = types;
  copy.attrs.names = names;
  copy.attrs.attrs = attrs;
  XLA_FFI_Error* error = target(&copy);
  frame->future = copy.future;
  return error;
}

template <int Slot>
XLA_FFI_Error* ForwardSlot(XLA_FFI_CallFrame* frame) {
  return Forward(Slot, frame);
}

template <int... Slots>
constexpr auto MakeTable(std::integer_sequence<int, Slots...>) {
  return std::array<XLA_FFI_Handler*, sizeof...(Slots)>{&ForwardSlot<Slots>...};
}

const std::array<XLA_FFI_Handler*, kSlots> kForwarders =
    MakeTable(std::make_integer_sequence<int, kSlots>{});
}  // namespace

extern "C" {

// How many slots (distinct registered names) a process may use.
int rljax_envpool_slots() { return kSlots; }

// The forwarder of `slot` (an XLA_FFI_Handler*), or null for a slot out of range.
void* rljax_envpool_forwarder(int slot) {
  if (slot < 0 || slot >= kSlots) return nullptr;
  return reinterpret_cast<void*>(kForwarders[slot]);
}

// Makes `slot` call `handler` (envpool's XLA_FFI_Handler*); 0 on success, -1 if out of range.
int rljax_envpool_bind(int slot, void* handler) {
  if (slot < 0 || slot >= kSlots) return -1;
  g_targets[slot].store(reinterpret_cast<XLA_FFI_Handler*>(handler),
                        std::memory_order_release);
  return 0;
}

}  // extern "C"
