// A pickle reader that executes nothing: it understands the opcodes a PyTorch state dict uses and the few globals
// such a file needs (collections.OrderedDict, torch's tensor-rebuild functions and storage types), and refuses
// everything else with a message naming what was refused and where. torch.load would call whatever a pickle names
// (os.system, builtins.eval); here a global that is not on the list is refused the moment it is read.
//
// Objects live in an arena and refer to each other by index, so hostile nesting cannot overflow the C++ stack and
// cycles built through the memo cannot leak or loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/dtype.h"

namespace vitpipe {

using PickleId = uint32_t;

// A storage named by a persistent id: ('storage', torch.FloatStorage, key, location, numel[, view_metadata]).
struct PickledStorage {
  std::string key;  // zip format: record "data/<key>"; legacy format: position among the sorted keys
  DType dtype = DType::f32;
  int64_t numel = 0;     // elements of `dtype`
  std::string location;  // "cpu", "cuda:0": ignored, everything loads on the CPU
  // Legacy format only: a view of elements [view_offset, view_offset + view_numel) of storage `key`.
  bool is_view = false;
  int64_t view_offset = 0;
  int64_t view_numel = 0;
};

// What torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, ...) would build.
struct PickledTensor {
  size_t storage = 0;  // index into PickleResult::storages
  int64_t storage_offset = 0;
  std::vector<int64_t> size;
  std::vector<int64_t> stride;
};

struct PickleObject {
  enum class Kind : uint8_t {
    none,
    boolean,
    integer,
    big_integer,
    floating,
    string,
    bytes,
    tuple,
    list,
    dict,
    set,
    global,   // an allowed global, see `global`
    storage,  // integer = index into PickleResult::storages
    tensor,   // integer = index into PickleResult::tensors
  };
  enum class Global : uint8_t {
    none,
    ordered_dict,
    rebuild_tensor,
    rebuild_tensor_v2,
    rebuild_parameter,
    rebuild_parameter_with_state,
    rebuild_from_type_v2,
    tensor_type,
    parameter_type,
    storage_type,
  };
  Kind kind = Kind::none;
  Global global = Global::none;
  int64_t integer = 0;  // boolean, integer, storage, tensor; dtype of a storage_type global
  double floating = 0.0;
  std::string text;             // string (UTF-8 as pickled), bytes, big_integer (little-endian two's complement)
  std::vector<PickleId> items;  // tuple, list, set; dict: key, value, key, value, ... in insertion order
};

struct PickleResult {
  PickleId root = 0;
  std::vector<PickleObject> objects;
  std::vector<PickledStorage> storages;
  std::vector<PickledTensor> tensors;
  size_t consumed = 0;  // bytes up to and including STOP (the legacy format chains several pickles)

  const PickleObject& at(PickleId id) const { return objects[id]; }
  const PickleObject& root_object() const { return objects[root]; }
  std::string describe(PickleId id) const;  // "a list", "the string 'x'": for messages
};

struct UnpicklerLimits {
  size_t max_objects = 5'000'000;  // a state dict of 1000 tensors needs ~30,000
  size_t max_mark_depth = 10'000;
  size_t max_memo_entries = 5'000'000;
  size_t max_big_integer_bytes = 64;
};

// Reads one pickle from the start of `data`. `source` names it in messages ("pytorch_model.bin: archive/data.pkl").
// Throws vitpipe::Error for a truncated or malformed pickle and for anything outside the state-dict subset.
PickleResult restricted_unpickle(std::string_view data, const std::string& source, const UnpicklerLimits& limits = {});

}  // namespace vitpipe
