#include "io/restricted_unpickler.h"

#include <bit>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "util/error.h"

namespace vitpipe {
namespace {

using Kind = PickleObject::Kind;
using Global = PickleObject::Global;

// Opcode bytes (Python's Lib/pickle.py).
enum Op : uint8_t {
  MARK = '(',
  STOP = '.',
  POP = '0',
  POP_MARK = '1',
  DUP = '2',
  FLOAT = 'F',
  INT = 'I',
  BININT = 'J',
  BININT1 = 'K',
  LONG = 'L',
  BININT2 = 'M',
  NONE = 'N',
  PERSID = 'P',
  BINPERSID = 'Q',
  REDUCE = 'R',
  STRING = 'S',
  BINSTRING = 'T',
  SHORT_BINSTRING = 'U',
  UNICODE = 'V',
  BINUNICODE = 'X',
  APPEND = 'a',
  BUILD = 'b',
  GLOBAL = 'c',
  DICT = 'd',
  EMPTY_DICT = '}',
  APPENDS = 'e',
  GET = 'g',
  BINGET = 'h',
  INST = 'i',
  LONG_BINGET = 'j',
  LIST = 'l',
  EMPTY_LIST = ']',
  OBJ = 'o',
  PUT = 'p',
  BINPUT = 'q',
  LONG_BINPUT = 'r',
  SETITEM = 's',
  TUPLE = 't',
  EMPTY_TUPLE = ')',
  SETITEMS = 'u',
  BINFLOAT = 'G',
  PROTO = 0x80,
  NEWOBJ = 0x81,
  EXT1 = 0x82,
  EXT2 = 0x83,
  EXT4 = 0x84,
  TUPLE1 = 0x85,
  TUPLE2 = 0x86,
  TUPLE3 = 0x87,
  NEWTRUE = 0x88,
  NEWFALSE = 0x89,
  LONG1 = 0x8a,
  LONG4 = 0x8b,
  BINBYTES = 'B',
  SHORT_BINBYTES = 'C',
  SHORT_BINUNICODE = 0x8c,
  BINUNICODE8 = 0x8d,
  BINBYTES8 = 0x8e,
  EMPTY_SET = 0x8f,
  ADDITEMS = 0x90,
  FROZENSET = 0x91,
  NEWOBJ_EX = 0x92,
  STACK_GLOBAL = 0x93,
  MEMOIZE = 0x94,
  FRAME = 0x95,
  BYTEARRAY8 = 0x96,
  NEXT_BUFFER = 0x97,
  READONLY_BUFFER = 0x98,
};

const char* opcode_name(uint8_t op) {
  switch (op) {
    case PERSID:
      return "PERSID";
    case STRING:
      return "STRING";
    case UNICODE:
      return "UNICODE";
    case INST:
      return "INST";
    case OBJ:
      return "OBJ";
    case NEWOBJ:
      return "NEWOBJ";
    case NEWOBJ_EX:
      return "NEWOBJ_EX";
    case EXT1:
      return "EXT1";
    case EXT2:
      return "EXT2";
    case EXT4:
      return "EXT4";
    case BYTEARRAY8:
      return "BYTEARRAY8";
    case NEXT_BUFFER:
      return "NEXT_BUFFER";
    case READONLY_BUFFER:
      return "READONLY_BUFFER";
    default:
      return nullptr;
  }
}

struct AllowedGlobal {
  const char* module;
  const char* name;
  Global global;
  DType dtype;
};

// Everything a state dict saved by torch.save (zip or legacy format, torch 1.x and 2.x) refers to.
constexpr AllowedGlobal kAllowedGlobals[] = {
    {"collections", "OrderedDict", Global::ordered_dict, DType::f32},
    {"torch._utils", "_rebuild_tensor", Global::rebuild_tensor, DType::f32},
    {"torch._utils", "_rebuild_tensor_v2", Global::rebuild_tensor_v2, DType::f32},
    {"torch._utils", "_rebuild_parameter", Global::rebuild_parameter, DType::f32},
    {"torch._utils", "_rebuild_parameter_with_state", Global::rebuild_parameter_with_state, DType::f32},
    {"torch._tensor", "_rebuild_from_type_v2", Global::rebuild_from_type_v2, DType::f32},
    {"torch", "Tensor", Global::tensor_type, DType::f32},
    {"torch._tensor", "Tensor", Global::tensor_type, DType::f32},
    {"torch.nn.parameter", "Parameter", Global::parameter_type, DType::f32},
    {"torch", "FloatStorage", Global::storage_type, DType::f32},
    {"torch", "HalfStorage", Global::storage_type, DType::f16},
    {"torch", "BFloat16Storage", Global::storage_type, DType::bf16},
    {"torch", "DoubleStorage", Global::storage_type, DType::f64},
    {"torch", "LongStorage", Global::storage_type, DType::i64},
    {"torch", "IntStorage", Global::storage_type, DType::i32},
    {"torch", "ByteStorage", Global::storage_type, DType::u8},
    {"torch", "BoolStorage", Global::storage_type, DType::boolean},
};

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::none:
      return "None";
    case Kind::boolean:
      return "a bool";
    case Kind::integer:
    case Kind::big_integer:
      return "an int";
    case Kind::floating:
      return "a float";
    case Kind::string:
      return "a string";
    case Kind::bytes:
      return "bytes";
    case Kind::tuple:
      return "a tuple";
    case Kind::list:
      return "a list";
    case Kind::dict:
      return "a dict";
    case Kind::set:
      return "a set";
    case Kind::global:
      return "a class or function";
    case Kind::storage:
      return "a storage";
    case Kind::tensor:
      return "a tensor";
  }
  return "an object";
}

class Unpickler {
 public:
  Unpickler(std::string_view data, const std::string& source, const UnpicklerLimits& limits)
      : data_(data), source_(source), limits_(limits) {}

  PickleResult run() {
    while (true) {
      op_start_ = pos_;
      if (pos_ >= data_.size()) fail_here("truncated: the pickle ends without a STOP opcode");
      uint8_t op = static_cast<uint8_t>(data_[pos_++]);
      if (op == STOP) {
        result_.root = pop("STOP");
        result_.consumed = pos_;
        return std::move(result_);
      }
      dispatch(op);
    }
  }

 private:
  template <class... Parts>
  [[noreturn]] void fail_here(const Parts&... parts) const {
    fail(source_, ": byte ", op_start_, ": ", parts...);
  }

  // --- reading the byte stream ---
  std::string_view take(uint64_t count) {
    if (count > data_.size() - pos_) {
      fail_here("truncated: needs ", count, " more bytes but only ", data_.size() - pos_, " remain");
    }
    std::string_view bytes = data_.substr(pos_, static_cast<size_t>(count));
    pos_ += static_cast<size_t>(count);
    return bytes;
  }
  uint64_t read_le(int width) {
    std::string_view bytes = take(static_cast<uint64_t>(width));
    uint64_t value = 0;
    for (int i = width - 1; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
    return value;
  }
  std::string_view read_line() {
    size_t end = data_.find('\n', pos_);
    if (end == std::string_view::npos) fail_here("truncated: a text argument has no end of line");
    std::string_view line = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return line;
  }
  int64_t parse_decimal(std::string_view text) {
    if (!text.empty() && text.back() == 'L') text.remove_suffix(1);  // protocol 0 longs: "123L"
    int64_t value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size()) {
      fail_here("expected a decimal integer that fits 64 bits, found '", std::string(text.substr(0, 40)), "'");
    }
    return value;
  }

  // --- objects and the stack ---
  PickleId make(PickleObject object) {
    if (result_.objects.size() >= limits_.max_objects) {
      fail_here("the pickle builds more than ", limits_.max_objects, " objects; a state dict needs far fewer");
    }
    result_.objects.push_back(std::move(object));
    return static_cast<PickleId>(result_.objects.size() - 1);
  }
  PickleId make(Kind kind, int64_t integer = 0) {
    PickleObject object;
    object.kind = kind;
    object.integer = integer;
    return make(std::move(object));
  }
  PickleId make_text(Kind kind, std::string_view text) {
    PickleObject object;
    object.kind = kind;
    object.text.assign(text);
    return make(std::move(object));
  }
  PickleObject& obj(PickleId id) { return result_.objects[id]; }

  size_t frame_floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(PickleId id) { stack_.push_back(id); }
  PickleId pop(const char* what) {
    if (stack_.size() <= frame_floor()) fail_here(what, " needs a value but the stack is empty");
    PickleId id = stack_.back();
    stack_.pop_back();
    return id;
  }
  PickleId top(const char* what) {
    if (stack_.size() <= frame_floor()) fail_here(what, " needs a value but the stack is empty");
    return stack_.back();
  }
  std::vector<PickleId> pop_mark(const char* what) {
    if (marks_.empty()) fail_here(what, " needs a MARK but there is none");
    size_t start = marks_.back();
    marks_.pop_back();
    std::vector<PickleId> items(stack_.begin() + static_cast<std::ptrdiff_t>(start), stack_.end());
    stack_.resize(start);
    return items;
  }
  PickleId make_sequence(Kind kind, std::vector<PickleId> items) {
    PickleObject object;
    object.kind = kind;
    object.items = std::move(items);
    return make(std::move(object));
  }
  void memo_put(uint64_t key) {
    PickleId id = top("PUT");
    if (memo_.size() >= limits_.max_memo_entries && !memo_.count(key)) {
      fail_here("the pickle memoizes more than ", limits_.max_memo_entries, " objects");
    }
    memo_[key] = id;
  }
  void memo_get(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) fail_here("GET of memo entry ", key, ", which was never stored");
    push(it->second);
  }
  PickleId make_integer_from_le(std::string_view bytes) {
    if (bytes.empty()) return make(Kind::integer, 0);
    if (bytes.size() <= 8) {
      uint64_t value = 0;
      for (size_t i = bytes.size(); i-- > 0;) value = (value << 8) | static_cast<uint8_t>(bytes[i]);
      size_t bits = bytes.size() * 8;
      if (bits < 64 && (value >> (bits - 1)) & 1u) value |= ~uint64_t{0} << bits;  // sign-extend
      return make(Kind::integer, static_cast<int64_t>(value));
    }
    if (bytes.size() > limits_.max_big_integer_bytes) {
      fail_here("an integer of ", bytes.size(), " bytes; a state dict holds none that large");
    }
    return make_text(Kind::big_integer, bytes);
  }

  // --- the opcodes ---
  void dispatch(uint8_t op) {
    switch (op) {
      case PROTO: {
        uint64_t version = read_le(1);
        if (version > 5) fail_here("pickle protocol ", version, " is newer than any Python writes (0-5)");
        return;
      }
      case FRAME:
        read_le(8);
        return;  // framing is only a read-ahead hint
      case MARK:
        if (marks_.size() >= limits_.max_mark_depth) {
          fail_here("MARKs nested more than ", limits_.max_mark_depth, " deep; a state dict nests a few levels");
        }
        marks_.push_back(stack_.size());
        return;
      case POP:
        if (stack_.size() > frame_floor()) {
          stack_.pop_back();
        } else {
          pop_mark("POP");
        }
        return;
      case POP_MARK:
        pop_mark("POP_MARK");
        return;
      case DUP:
        push(top("DUP"));
        return;

      case NONE:
        push(make(Kind::none));
        return;
      case NEWTRUE:
        push(make(Kind::boolean, 1));
        return;
      case NEWFALSE:
        push(make(Kind::boolean, 0));
        return;
      case INT: {
        std::string_view line = read_line();
        if (line == "01" || line == "00") {
          push(make(Kind::boolean, line == "01"));
        } else {
          push(make(Kind::integer, parse_decimal(line)));
        }
        return;
      }
      case LONG:
        push(make(Kind::integer, parse_decimal(read_line())));
        return;
      case BININT:
        push(make(Kind::integer, static_cast<int32_t>(read_le(4))));
        return;
      case BININT1:
        push(make(Kind::integer, static_cast<int64_t>(read_le(1))));
        return;
      case BININT2:
        push(make(Kind::integer, static_cast<int64_t>(read_le(2))));
        return;
      case LONG1: {
        uint64_t length = read_le(1);
        push(make_integer_from_le(take(length)));
        return;
      }
      case LONG4: {
        int32_t length = static_cast<int32_t>(read_le(4));
        if (length < 0) fail_here("LONG4 with a negative length");
        push(make_integer_from_le(take(static_cast<uint64_t>(length))));
        return;
      }
      case FLOAT: {
        std::string text(read_line());
        char* end = nullptr;
        double value = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size()) fail_here("FLOAT with a malformed value");
        PickleObject object;
        object.kind = Kind::floating;
        object.floating = value;
        push(make(std::move(object)));
        return;
      }
      case BINFLOAT: {
        std::string_view bytes = take(8);
        uint64_t bits = 0;
        for (char c : bytes) bits = (bits << 8) | static_cast<uint8_t>(c);  // big-endian
        PickleObject object;
        object.kind = Kind::floating;
        object.floating = std::bit_cast<double>(bits);
        push(make(std::move(object)));
        return;
      }

      case BINUNICODE:
        push(make_text(Kind::string, take(read_le(4))));
        return;
      case SHORT_BINUNICODE:
        push(make_text(Kind::string, take(read_le(1))));
        return;
      case BINUNICODE8:
        push(make_text(Kind::string, take(read_le(8))));
        return;
      case BINSTRING: {  // Python 2 str: only its bytes matter here
        int32_t length = static_cast<int32_t>(read_le(4));
        if (length < 0) fail_here("BINSTRING with a negative length");
        push(make_text(Kind::string, take(static_cast<uint64_t>(length))));
        return;
      }
      case SHORT_BINSTRING:
        push(make_text(Kind::string, take(read_le(1))));
        return;
      case BINBYTES:
        push(make_text(Kind::bytes, take(read_le(4))));
        return;
      case SHORT_BINBYTES:
        push(make_text(Kind::bytes, take(read_le(1))));
        return;
      case BINBYTES8:
        push(make_text(Kind::bytes, take(read_le(8))));
        return;

      case EMPTY_TUPLE:
        push(make_sequence(Kind::tuple, {}));
        return;
      case TUPLE:
        push(make_sequence(Kind::tuple, pop_mark("TUPLE")));
        return;
      case TUPLE1:
      case TUPLE2:
      case TUPLE3: {
        size_t count = static_cast<size_t>(op - TUPLE1 + 1);
        std::vector<PickleId> items(count);
        for (size_t i = count; i-- > 0;) items[i] = pop("TUPLE1/2/3");
        push(make_sequence(Kind::tuple, std::move(items)));
        return;
      }
      case EMPTY_LIST:
        push(make_sequence(Kind::list, {}));
        return;
      case LIST:
        push(make_sequence(Kind::list, pop_mark("LIST")));
        return;
      case APPEND: {
        PickleId value = pop("APPEND");
        PickleId list = top("APPEND");
        require_kind(list, Kind::list, "APPEND");
        obj(list).items.push_back(value);
        return;
      }
      case APPENDS: {
        std::vector<PickleId> values = pop_mark("APPENDS");
        PickleId list = top("APPENDS");
        require_kind(list, Kind::list, "APPENDS");
        auto& items = obj(list).items;
        items.insert(items.end(), values.begin(), values.end());
        return;
      }
      case EMPTY_DICT:
        push(make_sequence(Kind::dict, {}));
        return;
      case DICT: {
        std::vector<PickleId> items = pop_mark("DICT");
        if (items.size() % 2 != 0) fail_here("DICT with an odd number of keys and values");
        push(make_sequence(Kind::dict, std::move(items)));
        return;
      }
      case SETITEM: {
        PickleId value = pop("SETITEM");
        PickleId key = pop("SETITEM");
        PickleId dict = top("SETITEM");
        require_kind(dict, Kind::dict, "SETITEM");
        obj(dict).items.push_back(key);
        obj(dict).items.push_back(value);
        return;
      }
      case SETITEMS: {
        std::vector<PickleId> pairs = pop_mark("SETITEMS");
        if (pairs.size() % 2 != 0) fail_here("SETITEMS with an odd number of keys and values");
        PickleId dict = top("SETITEMS");
        require_kind(dict, Kind::dict, "SETITEMS");
        auto& items = obj(dict).items;
        items.insert(items.end(), pairs.begin(), pairs.end());
        return;
      }
      case EMPTY_SET:
        push(make_sequence(Kind::set, {}));
        return;
      case FROZENSET:
        push(make_sequence(Kind::set, pop_mark("FROZENSET")));
        return;
      case ADDITEMS: {
        std::vector<PickleId> values = pop_mark("ADDITEMS");
        PickleId set = top("ADDITEMS");
        require_kind(set, Kind::set, "ADDITEMS");
        auto& items = obj(set).items;
        items.insert(items.end(), values.begin(), values.end());
        return;
      }

      case PUT:
        memo_put(static_cast<uint64_t>(parse_decimal(read_line())));
        return;
      case BINPUT:
        memo_put(read_le(1));
        return;
      case LONG_BINPUT:
        memo_put(read_le(4));
        return;
      case MEMOIZE:
        memo_put(memo_.size());
        return;
      case GET:
        memo_get(static_cast<uint64_t>(parse_decimal(read_line())));
        return;
      case BINGET:
        memo_get(read_le(1));
        return;
      case LONG_BINGET:
        memo_get(read_le(4));
        return;

      case GLOBAL: {
        std::string module(read_line());
        std::string name(read_line());
        push(make_global(module, name));
        return;
      }
      case STACK_GLOBAL: {
        PickleId name = pop("STACK_GLOBAL");
        PickleId module = pop("STACK_GLOBAL");
        if (obj(name).kind != Kind::string || obj(module).kind != Kind::string) {
          fail_here("STACK_GLOBAL needs a module and a name as strings");
        }
        push(make_global(obj(module).text, obj(name).text));
        return;
      }
      case REDUCE: {
        PickleId args = pop("REDUCE");
        PickleId callable = pop("REDUCE");
        push(reduce(callable, args));
        return;
      }
      case BUILD: {
        PickleId state = pop("BUILD");
        PickleId target = top("BUILD");
        build(target, state);
        return;
      }
      case BINPERSID:
        push(persistent_load(pop("BINPERSID")));
        return;

      default: {
        if (const char* name = opcode_name(op)) {
          fail_here("opcode ", name,
                    " is not allowed: a state dict of tensors never needs it, and torch.load would "
                    "use it to create arbitrary objects");
        }
        char hex[8];
        std::snprintf(hex, sizeof(hex), "0x%02x", op);
        fail_here("unknown pickle opcode ", hex, " (not a pickle, or a corrupted one)");
      }
    }
  }

  void require_kind(PickleId id, Kind kind, const char* what) {
    if (obj(id).kind != kind) fail_here(what, " applied to ", kind_name(obj(id).kind), ", expected ", kind_name(kind));
  }

  PickleId make_global(const std::string& module, const std::string& name) {
    for (const AllowedGlobal& allowed : kAllowedGlobals) {
      if (module == allowed.module && name == allowed.name) {
        PickleObject object;
        object.kind = Kind::global;
        object.global = allowed.global;
        object.integer = static_cast<int64_t>(allowed.dtype);
        object.text = module + "." + name;
        return make(std::move(object));
      }
    }
    std::string qualified = module + "." + name;
    if (module == "torch" && name.size() > 7 && name.ends_with("Storage")) {
      fail_here("tensor storage type ", qualified,
                " is not supported (vitpipe reads float32, float16, bfloat16, float64, int64, int32, uint8 and bool)");
    }
    if (module == "torch" || module.starts_with("torch.")) {
      fail_here("refusing global ", qualified,
                ": it is not one of the torch functions a state dict of plain tensors needs (sparse, quantized and "
                "custom tensor types are not supported)");
    }
    fail_here("refusing global ", qualified,
              ": torch.load would call it, which could run arbitrary code. vitpipe "
              "executes nothing from a checkpoint; a state dict needs only collections.OrderedDict and torch's tensor "
              "rebuild functions. If you trust this file, convert it to safetensors with Python first.");
  }

  // --- the calls a state dict makes ---
  std::vector<PickleId> args_of(PickleId args, const std::string& callee) {
    if (obj(args).kind != Kind::tuple) fail_here("arguments to ", callee, " are ", kind_name(obj(args).kind));
    return obj(args).items;
  }

  int64_t int_arg(PickleId id, const char* what) {
    const PickleObject& object = obj(id);
    if (object.kind != Kind::integer && object.kind != Kind::boolean) {
      fail_here(what, " must be an int, found ", result_.describe(id));
    }
    return object.integer;
  }

  std::vector<int64_t> int_tuple_arg(PickleId id, const char* what) {
    const PickleObject& object = obj(id);
    if (object.kind != Kind::tuple && object.kind != Kind::list) {
      fail_here(what, " must be a tuple of ints, found ", result_.describe(id));
    }
    if (object.items.size() > 64) fail_here(what, " has ", object.items.size(), " dimensions");
    std::vector<int64_t> values;
    for (PickleId item : object.items) values.push_back(int_arg(item, what));
    return values;
  }

  PickleId reduce(PickleId callable, PickleId args) {
    const PickleObject& function = obj(callable);
    if (function.kind != Kind::global) {
      fail_here("REDUCE calls ", result_.describe(callable), ", which is not callable");
    }
    std::string callee = function.text;  // copied: `call` may grow the arena
    Global global = function.global;
    std::vector<PickleId> arguments = args_of(args, callee);
    return call(global, callee, arguments);
  }

  PickleId call(Global global, const std::string& callee, const std::vector<PickleId>& arguments) {
    auto expect_count = [&](size_t low, size_t high) {
      if (arguments.size() < low || arguments.size() > high) {
        fail_here(callee, " called with ", arguments.size(), " arguments, expected ", low,
                  low == high ? std::string() : concat(" to ", high));
      }
    };
    switch (global) {
      case Global::ordered_dict: {
        expect_count(0, 1);
        PickleId dict = make_sequence(Kind::dict, {});
        if (arguments.size() == 1) {  // OrderedDict([(key, value), ...])
          const PickleObject& pairs = obj(arguments[0]);
          if (pairs.kind != Kind::list && pairs.kind != Kind::tuple)
            fail_here("OrderedDict(...) of ", kind_name(pairs.kind));
          std::vector<PickleId> items;
          for (PickleId pair : pairs.items) {
            const PickleObject& entry = obj(pair);
            if ((entry.kind != Kind::tuple && entry.kind != Kind::list) || entry.items.size() != 2) {
              fail_here("OrderedDict(...) entries must be (key, value) pairs");
            }
            items.push_back(entry.items[0]);
            items.push_back(entry.items[1]);
          }
          obj(dict).items = std::move(items);
        }
        return dict;
      }
      case Global::rebuild_tensor:
      case Global::rebuild_tensor_v2: {
        // _rebuild_tensor(storage, offset, size, stride);
        // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, backward_hooks[, metadata])
        if (global == Global::rebuild_tensor) {
          expect_count(4, 4);
        } else {
          expect_count(6, 7);
        }
        const PickleObject& storage = obj(arguments[0]);
        if (storage.kind != Kind::storage)
          fail_here(callee, " needs a storage, found ", result_.describe(arguments[0]));
        PickledTensor tensor;
        tensor.storage = static_cast<size_t>(storage.integer);
        tensor.storage_offset = int_arg(arguments[1], "storage_offset");
        tensor.size = int_tuple_arg(arguments[2], "size");
        tensor.stride = int_tuple_arg(arguments[3], "stride");
        if (tensor.size.size() != tensor.stride.size()) {
          fail_here(callee, ": size has ", tensor.size.size(), " dimensions but stride has ", tensor.stride.size());
        }
        result_.tensors.push_back(std::move(tensor));
        return make(Kind::tensor, static_cast<int64_t>(result_.tensors.size() - 1));
      }
      case Global::rebuild_parameter:
      case Global::rebuild_parameter_with_state: {
        // _rebuild_parameter(data, requires_grad, backward_hooks[, state]): the data is what matters.
        expect_count(global == Global::rebuild_parameter ? 3 : 4, global == Global::rebuild_parameter ? 3 : 4);
        if (obj(arguments[0]).kind != Kind::tensor) fail_here(callee, " needs a tensor");
        return arguments[0];
      }
      case Global::rebuild_from_type_v2: {
        // _rebuild_from_type_v2(func, type, args, state): torch 2 wraps tensors (and Parameters) this way.
        expect_count(4, 4);
        const PickleObject& function = obj(arguments[0]);
        const PickleObject& type = obj(arguments[1]);
        if (function.kind != Kind::global ||
            (function.global != Global::rebuild_tensor && function.global != Global::rebuild_tensor_v2 &&
             function.global != Global::rebuild_parameter && function.global != Global::rebuild_parameter_with_state)) {
          fail_here(callee, " must wrap one of torch's tensor rebuild functions");
        }
        if (type.kind != Kind::global ||
            (type.global != Global::tensor_type && type.global != Global::parameter_type)) {
          fail_here(callee, ": only torch.Tensor and torch.nn.Parameter are supported, not ",
                    result_.describe(arguments[1]));
        }
        const PickleObject& state = obj(arguments[3]);
        if (!(state.kind == Kind::none || (state.kind == Kind::dict && state.items.empty()))) {
          fail_here(callee, ": tensors carrying Python attributes are not supported");
        }
        std::string inner = function.text;
        Global inner_global = function.global;
        return call(inner_global, inner, args_of(arguments[2], inner));
      }
      case Global::tensor_type:
      case Global::parameter_type:
      case Global::storage_type:
      case Global::none:
        break;
    }
    fail_here("calling ", callee, " is not allowed in a state dict");
  }

  void build(PickleId target, PickleId state) {
    // OrderedDict state dicts carry a `_metadata` attribute (module versions): accepted and ignored.
    if (obj(target).kind == Kind::dict && (obj(state).kind == Kind::dict || obj(state).kind == Kind::none)) return;
    fail_here("BUILD sets the state of ", result_.describe(target), "; only a dict's attributes are accepted");
  }

  PickleId persistent_load(PickleId pid) {
    // ('storage', torch.FloatStorage, key, location, numel[, view_metadata])
    const PickleObject& id = obj(pid);
    if (id.kind != Kind::tuple || id.items.size() < 5 || id.items.size() > 6 || obj(id.items[0]).kind != Kind::string ||
        obj(id.items[0]).text != "storage") {
      fail_here("a persistent id that is not ('storage', type, key, location, numel)");
    }
    const PickleObject& type = obj(id.items[1]);
    if (type.kind != Kind::global || type.global != Global::storage_type) {
      fail_here("the storage type must be a torch.*Storage class, found ", result_.describe(id.items[1]));
    }
    PickledStorage storage;
    storage.dtype = static_cast<DType>(type.integer);
    const PickleObject& key = obj(id.items[2]);
    if (key.kind == Kind::string) {
      storage.key = key.text;
    } else if (key.kind == Kind::integer) {
      storage.key = std::to_string(key.integer);
    } else {
      fail_here("a storage key must be a string, found ", result_.describe(id.items[2]));
    }
    if (obj(id.items[3]).kind == Kind::string) storage.location = obj(id.items[3]).text;
    storage.numel = int_arg(id.items[4], "storage numel");
    if (storage.numel < 0) fail_here("storage ", storage.key, " has a negative size");
    if (id.items.size() == 6 && obj(id.items[5]).kind != Kind::none) {
      const PickleObject& view = obj(id.items[5]);  // (view_key, offset, view_size)
      if (view.kind != Kind::tuple || view.items.size() != 3) fail_here("malformed storage view metadata");
      storage.is_view = true;
      storage.view_offset = int_arg(view.items[1], "storage view offset");
      storage.view_numel = int_arg(view.items[2], "storage view size");
      if (storage.view_offset < 0 || storage.view_numel < 0 || storage.view_offset > storage.numel ||
          storage.view_numel > storage.numel - storage.view_offset) {
        fail_here("storage view [", storage.view_offset, ", +", storage.view_numel, ") lies outside storage ",
                  storage.key, " of ", storage.numel, " elements");
      }
    }
    result_.storages.push_back(std::move(storage));
    return make(Kind::storage, static_cast<int64_t>(result_.storages.size() - 1));
  }

  std::string_view data_;
  const std::string& source_;
  UnpicklerLimits limits_;
  size_t pos_ = 0;
  size_t op_start_ = 0;
  std::vector<PickleId> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PickleId> memo_;
  PickleResult result_;
};

}  // namespace

std::string PickleResult::describe(PickleId id) const {
  const PickleObject& object = objects[id];
  switch (object.kind) {
    case Kind::integer:
      return concat("the int ", object.integer);
    case Kind::string:
      return concat("the string '", object.text.substr(0, 60), "'");
    case Kind::global:
      return object.text;
    default:
      return kind_name(object.kind);
  }
}

PickleResult restricted_unpickle(std::string_view data, const std::string& source, const UnpicklerLimits& limits) {
  return Unpickler(data, source, limits).run();
}

}  // namespace vitpipe
