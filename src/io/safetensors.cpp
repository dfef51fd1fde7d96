#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <vector>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_error_detail.h"

namespace vitpipe {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; add byte swapping");

using Json = nlohmann::json;
constexpr size_t kNoError = std::numeric_limits<size_t>::max();
constexpr const char* kMetadataKey = "__metadata__";

// Offset of the first byte that breaks UTF-8 (overlong forms, surrogates and code points past U+10FFFF included),
// or kNoError.
size_t find_invalid_utf8(const unsigned char* text, size_t size) {
  size_t i = 0;
  while (i < size) {
    unsigned char lead = text[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t length;
    uint32_t code;
    uint32_t smallest;
    if ((lead & 0xe0) == 0xc0) {
      length = 2, code = lead & 0x1fu, smallest = 0x80;
    } else if ((lead & 0xf0) == 0xe0) {
      length = 3, code = lead & 0x0fu, smallest = 0x800;
    } else if ((lead & 0xf8) == 0xf0) {
      length = 4, code = lead & 0x07u, smallest = 0x10000;
    } else {
      return i;
    }
    if (size - i < length) return i;
    for (size_t k = 1; k < length; ++k) {
      unsigned char next = text[i + k];
      if ((next & 0xc0) != 0x80) return i;
      code = (code << 6) | (next & 0x3fu);
    }
    if (code < smallest || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return i;
    i += length;
  }
  return kNoError;
}

bool is_utf8(std::string_view text) {
  return find_invalid_utf8(reinterpret_cast<const unsigned char*>(text.data()), text.size()) == kNoError;
}

const char* json_type(const Json& value) {
  if (value.is_number_unsigned()) return "a non-negative integer";
  if (value.is_number_integer()) return "a negative integer";
  if (value.is_number_float()) return "a non-integer number";
  return value.type_name();
}

// nlohmann::json keeps one of two duplicate keys silently; the parse callback sees every key, so duplicates (and
// nesting deeper than a header has: object > entry > shape/offsets array) are refused while parsing.
Json parse_header_json(std::string_view text, const std::string& file) {
  struct Frame {
    bool object;
    std::string name;  // the key this object or array is the value of ("" at the top)
    std::set<std::string, std::less<>> keys;
    std::string last_key;
  };
  std::vector<Frame> frames;
  auto callback = [&](int, Json::parse_event_t event, Json& parsed) -> bool {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start: {
        std::string name = frames.empty() ? "" : frames.back().last_key;
        if (frames.size() >= 3) {
          fail(file, ": header nests deeper than a safetensors header can (inside '", frames[1].name, "')");
        }
        frames.push_back({event == Json::parse_event_t::object_start, std::move(name), {}, {}});
        break;
      }
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        frames.pop_back();
        break;
      case Json::parse_event_t::key: {
        Frame& frame = frames.back();
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!frame.keys.insert(key).second) {
          if (frames.size() == 1) fail(file, ": duplicate tensor name '", key, "' in the header");
          fail(file, ": tensor '", frame.name, "': duplicate field '", key, "'");
        }
        frame.last_key = key;
        break;
      }
      case Json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::exception& e) {
    fail(file, ": header is not valid JSON", json_error_detail(e, text));
  }
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;
  uint64_t end;
};

std::string offsets_string(uint64_t begin, uint64_t end) { return concat("[", begin, ", ", end, ")"); }

std::string json_shape_string(const Json& shape) {
  std::string text = shape.dump();
  return text.size() > 80 ? text.substr(0, 77) + "..." : text;
}

Entry parse_entry(const std::string& file, const std::string& name, const Json& info, uint64_t data_size) {
  const std::string where = concat(file, ": tensor '", name, "': ");
  VP_REQUIRE(info.is_object(), where, "expected an object {dtype, shape, data_offsets}, got ", json_type(info));
  for (const auto& [key, value] : info.items()) {
    VP_REQUIRE(key == "dtype" || key == "shape" || key == "data_offsets", where, "unexpected field '", key,
               "' (expected exactly dtype, shape, data_offsets)");
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    VP_REQUIRE(info.contains(key), where, "missing field '", key, "'");
  }
  Entry entry;
  entry.name = name;

  const Json& dtype = info["dtype"];
  VP_REQUIRE(dtype.is_string(), where, "dtype must be a string, got ", json_type(dtype));
  VP_REQUIRE(parse_dtype(dtype.get<std::string>(), &entry.dtype), where, "unknown dtype '", dtype.get<std::string>(),
             "' (known: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");

  const Json& shape = info["shape"];
  VP_REQUIRE(shape.is_array(), where, "shape must be an array of non-negative integers, got ", json_type(shape));
  uint64_t numel = 1;
  bool overflow = false;
  for (const Json& dim : shape) {
    VP_REQUIRE(dim.is_number_unsigned(), where, "shape ", json_shape_string(shape),
               " must hold non-negative integers, found ", json_type(dim));
    uint64_t value = dim.get<uint64_t>();
    overflow |= value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    overflow |= __builtin_mul_overflow(numel, value, &numel);
    entry.shape.push_back(static_cast<int64_t>(value));
  }
  uint64_t nbytes = 0;
  overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(entry.dtype)), &nbytes);
  overflow |= numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  VP_REQUIRE(!overflow, where, "shape ", json_shape_string(shape), " ", dtype.get<std::string>(),
             " has more bytes than a 64-bit size can count");

  const Json& offsets = info["data_offsets"];
  VP_REQUIRE(
      offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
      where, "data_offsets must be [begin, end] with non-negative integers, got ", json_shape_string(offsets));
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  VP_REQUIRE(entry.begin <= entry.end, where, "data_offsets ", offsets_string(entry.begin, entry.end),
             " end before they begin");
  VP_REQUIRE(entry.end <= data_size, where, "data_offsets ", offsets_string(entry.begin, entry.end),
             " run past the end of the data section (", data_size, " bytes)");
  VP_REQUIRE(entry.end - entry.begin == nbytes, where, "data_offsets ", offsets_string(entry.begin, entry.end),
             " hold ", entry.end - entry.begin, " bytes but shape ", shape_string(entry.shape), " ",
             dtype_name(entry.dtype), " needs ", nbytes);
  return entry;
}

StringMap parse_metadata(const std::string& file, const Json& metadata) {
  VP_REQUIRE(metadata.is_object(), file, ": ", kMetadataKey, " must be an object of string to string, got ",
             json_type(metadata));
  StringMap out;
  for (const auto& [key, value] : metadata.items()) {
    VP_REQUIRE(value.is_string(), file, ": ", kMetadataKey, " must be an object of string to string; '", key,
               "' holds ", json_type(value));
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// safetensors' Dtype enum order; the reference writer puts higher ranks first, which keeps data aligned.
int dtype_rank(DType dtype) {
  switch (dtype) {
    case DType::boolean:
      return 0;
    case DType::u8:
      return 1;
    case DType::i8:
      return 2;
    case DType::i16:
      return 3;
    case DType::f16:
      return 4;
    case DType::bf16:
      return 5;
    case DType::i32:
      return 6;
    case DType::f32:
      return 7;
    case DType::f64:
      return 8;
    case DType::i64:
      return 9;
  }
  return 0;
}

template <class Sink>
void emit_safetensors(const TensorMap& tensors, const StringMap& metadata, Sink&& sink) {
  std::vector<std::pair<const std::string*, const Tensor*>> order;
  for (const auto& [name, tensor] : tensors) {
    VP_REQUIRE(name != kMetadataKey, "safetensors: a tensor may not be named ", kMetadataKey);
    VP_REQUIRE(is_utf8(name), "safetensors: tensor name is not valid UTF-8");
    VP_REQUIRE(tensor.device() == Device::cpu, "safetensors: tensor '", name, "' is not in CPU memory");
    VP_REQUIRE(tensor.defined(), "safetensors: tensor '", name, "' has no data");
    order.emplace_back(&name, &tensor);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return dtype_rank(a.second->dtype()) > dtype_rank(b.second->dtype());
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  if (metadata.find("format") == metadata.end()) meta["format"] = "pt";
  for (const auto& [key, value] : metadata) {
    VP_REQUIRE(is_utf8(key) && is_utf8(value), "safetensors: metadata entry is not valid UTF-8");
    meta[key] = value;
  }
  header[kMetadataKey] = std::move(meta);
  uint64_t offset = 0;
  for (const auto& [name, tensor] : order) {
    nlohmann::ordered_json info = nlohmann::ordered_json::object();
    info["dtype"] = dtype_name(tensor->dtype());
    info["shape"] = tensor->shape();
    info["data_offsets"] = {offset, offset + tensor->nbytes()};
    offset += tensor->nbytes();
    header[*name] = std::move(info);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t length = text.size();
  sink(&length, sizeof(length));
  sink(text.data(), text.size());
  for (const auto& [name, tensor] : order) {
    if (tensor->nbytes() > 0) sink(tensor->raw(), tensor->nbytes());
  }
}

}  // namespace

SafetensorsFile read_safetensors_memory(const void* data, size_t size, const std::string& file,
                                        std::shared_ptr<const void> keep_alive) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  VP_REQUIRE(size >= 8, file, ": file is ", size, " bytes, too short for the 8-byte header length");
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes, 8);
  VP_REQUIRE(header_length <= kSafetensorsMaxHeaderBytes, file, ": header length ", header_length,
             " exceeds the limit of ", kSafetensorsMaxHeaderBytes, " bytes");
  VP_REQUIRE(header_length <= size - 8, file, ": header length ", header_length, " runs past the end of the file (",
             size, " bytes)");
  const unsigned char* header_bytes = bytes + 8;
  size_t bad = find_invalid_utf8(header_bytes, header_length);
  VP_REQUIRE(bad == kNoError, file, ": header is not valid UTF-8 (byte ", bad, " of the header)");

  std::string_view header_text(reinterpret_cast<const char*>(header_bytes), header_length);
  Json header = parse_header_json(header_text, file);
  VP_REQUIRE(header.is_object(), file, ": header must be a JSON object, got ", json_type(header));

  const uint64_t data_size = size - 8 - header_length;
  SafetensorsFile result;
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == kMetadataKey) {
      result.metadata = parse_metadata(file, info);
    } else {
      entries.push_back(parse_entry(file, name, info, data_size));
    }
  }

  // Sorted by begin, the tensors must tile the data section exactly: no gap, no overlap, nothing after.
  std::vector<const Entry*> sorted;
  for (const auto& entry : entries) sorted.push_back(&entry);
  std::sort(sorted.begin(), sorted.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry* entry : sorted) {
    const std::string where =
        concat(file, ": tensor '", entry->name, "': data_offsets ", offsets_string(entry->begin, entry->end));
    VP_REQUIRE(entry->begin >= covered, where, " overlap tensor '", previous ? previous->name : "", "' at ",
               previous ? offsets_string(previous->begin, previous->end) : "");
    VP_REQUIRE(entry->begin == covered, where, " leave a gap: bytes ", offsets_string(covered, entry->begin),
               " of the data section belong to no tensor");
    if (entry->end > covered || previous == nullptr) previous = entry;
    covered = entry->end;
  }
  VP_REQUIRE(covered == data_size, file, ": ", data_size - covered,
             " trailing bytes after the last tensor (tensors cover ", covered, " of the ", data_size,
             " bytes of the data section)");

  const unsigned char* data_section = header_bytes + header_length;
  for (const auto& entry : entries) {
    void* pointer = const_cast<unsigned char*>(data_section + entry.begin);
    size_t width = dtype_size(entry.dtype);
    Tensor tensor;
    if (reinterpret_cast<uintptr_t>(pointer) % width == 0) {
      tensor = Tensor::wrap(pointer, entry.shape, entry.dtype, keep_alive);
    } else {
      tensor = Tensor::empty(entry.shape, entry.dtype);
      if (tensor.nbytes() > 0) std::memcpy(tensor.raw(), pointer, tensor.nbytes());
    }
    result.tensors.emplace(entry.name, std::move(tensor));
  }
  return result;
}

SafetensorsFile read_safetensors(const std::filesystem::path& path) {
  std::shared_ptr<MappedFile> mapping = MappedFile::open(path);
  static const unsigned char empty = 0;
  const void* data = mapping->size() > 0 ? static_cast<const void*>(mapping->data()) : &empty;
  SafetensorsFile result = read_safetensors_memory(data, mapping->size(), path.string(), mapping);
  result.mapping = std::move(mapping);
  return result;
}

void write_safetensors(const std::filesystem::path& path, const TensorMap& tensors, const StringMap& metadata) {
  AtomicFileWriter writer(path);
  emit_safetensors(tensors, metadata, [&](const void* data, size_t size) { writer.write(data, size); });
  writer.commit();
}

std::string serialize_safetensors(const TensorMap& tensors, const StringMap& metadata) {
  std::string out;
  emit_safetensors(tensors, metadata,
                   [&](const void* data, size_t size) { out.append(static_cast<const char*>(data), size); });
  return out;
}

}  // namespace vitpipe
