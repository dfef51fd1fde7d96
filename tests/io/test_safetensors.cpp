#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/safetensors_sharded.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/random.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / concat("vitpipe_io_", ::getpid(), "_", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A tensor whose bytes are a recognisable function of (seed, position).
Tensor patterned(const Shape& shape, DType dtype, uint8_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* bytes = static_cast<unsigned char*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(seed * 31 + i * 7);
  if (dtype == DType::boolean) {
    for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] &= 1;
  }
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

TensorMap every_dtype() {
  TensorMap tensors;
  const DType dtypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64,
                          DType::i32, DType::i16, DType::i8,  DType::u8,   DType::boolean};
  uint8_t seed = 1;
  for (DType dtype : dtypes) {
    tensors.emplace(concat("t_", dtype_name(dtype)), patterned({3, 5}, dtype, seed++));
    tensors.emplace(concat("scalar_", dtype_name(dtype)), patterned({}, dtype, seed++));
  }
  tensors.emplace("empty", Tensor::empty({0}, DType::f32));
  tensors.emplace("empty_middle", Tensor::empty({2, 0, 3}, DType::bf16));
  tensors.emplace("odd_u8", patterned({7}, DType::u8, 99));  // odd sizes must not misalign what follows
  return tensors;
}

TEST(Safetensors, RoundTripsEveryDtypeEmptyAndScalar) {
  fs::path dir = temp_dir("roundtrip");
  TensorMap tensors = every_dtype();
  write_safetensors(dir / "all.safetensors", tensors, {{"note", "hello"}});
  SafetensorsFile file = read_safetensors(dir / "all.safetensors");
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    ASSERT_TRUE(file.tensors.count(name)) << name;
    EXPECT_TRUE(same_bytes(file.tensors.at(name), tensor)) << name;
    // Zero-copy: a view into the mapping, aligned to its element size.
    const Tensor& read = file.tensors.at(name);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(read.raw()) % dtype_size(read.dtype()), 0u) << name;
  }
  EXPECT_EQ(file.metadata.at("format"), "pt");
  EXPECT_EQ(file.metadata.at("note"), "hello");
  EXPECT_EQ(file.tensors.at("scalar_F32").shape(), Shape{});
  EXPECT_EQ(file.tensors.at("scalar_F32").numel(), 1);

  // The exact layout: length, space-padded header starting with the metadata, data right after.
  std::string bytes = read_text_file(dir / "all.safetensors");
  EXPECT_EQ(bytes, serialize_safetensors(tensors, {{"note", "hello"}}));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.rfind("{\"__metadata__\":{\"format\":\"pt\",\"note\":\"hello\"}", 0), 0u) << header;
  EXPECT_EQ(header.find_last_not_of(' ') + 1 + (8 - (header.find_last_not_of(' ') + 1) % 8) % 8, n);
}

TEST(Safetensors, CallerFormatWinsAndEmptyFileIsValid) {
  SafetensorsFile file;
  std::string bytes = serialize_safetensors({}, {{"format", "np"}});
  file = read_safetensors_memory(bytes.data(), bytes.size(), "mem");
  EXPECT_EQ(file.metadata.at("format"), "np");
  EXPECT_TRUE(file.tensors.empty());
}

TEST(Safetensors, CopiesMisalignedDataInsteadOfViewingIt) {
  // A header of length 9 puts the data at offset 17: an F32 there is misaligned.
  std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  header.resize(((header.size() / 8) + 1) * 8 + 1, ' ');
  std::string bytes(8, '\0');
  uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += header;
  float values[2] = {1.5f, -2.0f};
  bytes.append(reinterpret_cast<const char*>(values), 8);
  std::vector<char> buffer(bytes.begin(), bytes.end());
  SafetensorsFile file = read_safetensors_memory(buffer.data(), buffer.size(), "mem");
  const Tensor& a = file.tensors.at("a");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.raw()) % 4, 0u);
  EXPECT_EQ(a.f32()[0], 1.5f);
  EXPECT_EQ(a.f32()[1], -2.0f);
}

TEST(Safetensors, WriterRefusesReservedNames) {
  TensorMap tensors;
  tensors.emplace("__metadata__", Tensor::zeros({1}));
  EXPECT_THROW(serialize_safetensors(tensors), Error);
}

TEST(Safetensors, MissingFileAndDirectoryAreErrors) {
  fs::path dir = temp_dir("missing");
  EXPECT_THROW(read_safetensors(dir / "nope.safetensors"), Error);
  EXPECT_THROW(read_safetensors(dir), Error);
}

// --- Malformed files: one per rule, each refused with its message. ---

std::string file_with_header(const std::string& header, size_t data_bytes, int64_t length_override = -1) {
  std::string bytes(8, '\0');
  uint64_t n = length_override >= 0 ? static_cast<uint64_t>(length_override) : header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += header;
  bytes.append(data_bytes, '\x11');
  return bytes;
}

struct MalformedCase {
  const char* what;
  std::string bytes;
  const char* expected;
};

std::vector<MalformedCase> malformed_cases() {
  const std::string a16 = R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";
  return {
      {"shorter than the length field", std::string("\x01\x02\x03", 3), "too short for the 8-byte header length"},
      {"huge header length", file_with_header("{}", 0, 100'000'001), "header length 100000001 exceeds the limit"},
      {"header past the end", file_with_header("{}", 0, 64), "header length 64 runs past the end of the file"},
      {"non-UTF-8 header", file_with_header("{\"a\xff\":1}", 0), "header is not valid UTF-8 (byte 3"},
      {"overlong UTF-8", file_with_header("{\"\xc0\xaf\":1}", 0), "not valid UTF-8"},
      {"not JSON", file_with_header("{not json}", 0), "header is not valid JSON"},
      {"JSON but not an object", file_with_header("[1, 2]", 0), "header must be a JSON object, got array"},
      {"entry not an object", file_with_header(R"({"a":5})", 0), "tensor 'a': expected an object"},
      {"unknown dtype", file_with_header(R"({"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", 1),
       "tensor 'a': unknown dtype 'F8_E4M3'"},
      {"dtype not a string", file_with_header(R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,1]}})", 1),
       "tensor 'a': dtype must be a string"},
      {"negative dimension", file_with_header(R"({"a":{"dtype":"F32","shape":[-1,2],"data_offsets":[0,8]}})", 8),
       "tensor 'a': shape [-1,2] must hold non-negative integers, found a negative integer"},
      {"fractional dimension", file_with_header(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8),
       "must hold non-negative integers, found a non-integer number"},
      {"overflowing shape",
       file_with_header(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,2],"data_offsets":[0,8]}})", 8),
       "has more bytes than a 64-bit size can count"},
      {"overflowing byte size",
       file_with_header(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}})", 8),
       "has more bytes than a 64-bit size can count"},
      {"dimension past int64",
       file_with_header(R"({"a":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,8]}})", 8),
       "has more bytes than a 64-bit size can count"},
      {"missing field", file_with_header(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", 8),
       "tensor 'a': missing field 'shape'"},
      {"extra field", file_with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8),
       "tensor 'a': unexpected field 'x'"},
      {"offsets not a pair", file_with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8]}})", 8),
       "tensor 'a': data_offsets must be [begin, end]"},
      {"offsets reversed", file_with_header(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 8),
       "tensor 'a': data_offsets [8, 4) end before they begin"},
      {"offsets past the end", file_with_header("{" + a16 + "}", 12),
       "tensor 'a': data_offsets [0, 16) run past the end of the data section (12 bytes)"},
      {"size mismatch", file_with_header(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 12),
       "tensor 'a': data_offsets [0, 12) hold 12 bytes but shape [2, 2] F32 needs 16"},
      {"gap", file_with_header("{" + a16 + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[20,24]}})", 24),
       "tensor 'b': data_offsets [20, 24) leave a gap: bytes [16, 20) of the data section belong to no tensor"},
      {"gap at the start", file_with_header(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", 4),
       "tensor 'a': data_offsets [2, 4) leave a gap: bytes [0, 2)"},
      {"overlap", file_with_header("{" + a16 + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16),
       "tensor 'b': data_offsets [8, 16) overlap tensor 'a' at [0, 16)"},
      {"empty tensor inside another",
       file_with_header("{" + a16 + R"(,"b":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})", 16),
       "tensor 'b': data_offsets [4, 4) overlap tensor 'a'"},
      {"trailing bytes", file_with_header("{" + a16 + "}", 20),
       "4 trailing bytes after the last tensor (tensors cover 16 of the 20 bytes"},
      {"trailing bytes without tensors", file_with_header("{}", 3), "3 trailing bytes after the last tensor"},
      {"duplicate tensor names", file_with_header("{" + a16 + "," + a16 + "}", 16), "duplicate tensor name 'a'"},
      {"duplicate field",
       file_with_header(R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", 4),
       "tensor 'a': duplicate field 'dtype'"},
      {"metadata not an object", file_with_header(R"({"__metadata__":["pt"]})", 0),
       "__metadata__ must be an object of string to string, got array"},
      {"metadata value not a string", file_with_header(R"({"__metadata__":{"format":"pt","n":3}})", 0),
       "__metadata__ must be an object of string to string; 'n' holds a non-negative integer"},
      {"nesting too deep", file_with_header(R"({"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", 4),
       "header nests deeper than a safetensors header can"},
  };
}

TEST(Safetensors, RefusesEveryMalformedFileWithItsRule) {
  fs::path dir = temp_dir("malformed");
  for (const auto& c : malformed_cases()) {
    // Through the file reader, so the message names the real path.
    fs::path path = dir / "model.safetensors";
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(c.bytes.data(), static_cast<std::streamsize>(c.bytes.size()));
    }
    try {
      read_safetensors(path);
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const Error& e) {
      std::string message = e.what();
      EXPECT_NE(message.find(c.expected), std::string::npos) << c.what << "\n  got: " << message;
      EXPECT_EQ(message.rfind(path.string() + ": ", 0), 0u)
          << c.what << ": message does not start with the file\n  " << message;
    }
  }
}

TEST(Safetensors, AcceptsEmptyTensorsAtTheBoundaries) {
  std::string bytes = file_with_header(
      R"({"z0":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
      R"("z1":{"dtype":"I64","shape":[3,0],"data_offsets":[4,4]}})",
      4);
  SafetensorsFile file = read_safetensors_memory(bytes.data(), bytes.size(), "mem");
  EXPECT_EQ(file.tensors.size(), 3u);
  EXPECT_EQ(file.tensors.at("z1").shape(), (Shape{3, 0}));
}

// --- Mutation fuzzing: whatever the bytes, the reader either accepts or throws vitpipe::Error. ---

TEST(Safetensors, MutationFuzzOnlyEverThrowsVitpipeErrors) {
  TensorMap tensors;
  tensors.emplace("weight", patterned({4, 3}, DType::f32, 1));
  tensors.emplace("half", patterned({5}, DType::bf16, 2));
  tensors.emplace("ids", patterned({2}, DType::i64, 3));
  tensors.emplace("mask", patterned({3}, DType::boolean, 4));
  tensors.emplace("nothing", Tensor::empty({0, 4}, DType::f16));
  tensors.emplace("scalar", patterned({}, DType::f64, 5));
  const std::string valid = serialize_safetensors(tensors, {{"k", "v"}});
  uint64_t header_length = 0;
  std::memcpy(&header_length, valid.data(), 8);

  // VITPIPE_FUZZ_ITERATIONS / VITPIPE_FUZZ_SEED make longer or different runs (e.g. under AddressSanitizer).
  const char* iterations_env = std::getenv("VITPIPE_FUZZ_ITERATIONS");
  const char* seed_env = std::getenv("VITPIPE_FUZZ_SEED");
  const int iterations = iterations_env ? std::atoi(iterations_env) : 20000;
  Rng rng(seed_env ? std::strtoull(seed_env, nullptr, 10) : 20240601);
  int accepted = 0, refused = 0;
  for (int it = 0; it < iterations; ++it) {
    std::string bytes = valid;
    const int mutations = 1 + static_cast<int>(rng.below(4));
    for (int m = 0; m < mutations; ++m) {
      // Most mutations land in the header, where the parser lives.
      auto position = [&](size_t size) -> size_t {
        if (size == 0) return 0;
        if (rng.uniform() < 0.8 && size > 8) return 8 + rng.below(std::min<uint64_t>(header_length, size - 8));
        return rng.below(size);
      };
      switch (rng.below(8)) {
        case 0:  // flip a bit
          if (!bytes.empty()) bytes[position(bytes.size())] ^= static_cast<char>(1u << rng.below(8));
          break;
        case 1:  // overwrite with a random byte
          if (!bytes.empty()) bytes[position(bytes.size())] = static_cast<char>(rng.below(256));
          break;
        case 2:  // overwrite with a JSON-significant character
          if (!bytes.empty()) bytes[position(bytes.size())] = "{}[]\",:-0123456789e. \\"[rng.below(22)];
          break;
        case 3:  // insert bytes
          bytes.insert(position(bytes.size() + 1), std::string(1 + rng.below(4), static_cast<char>(rng.below(256))));
          break;
        case 4:  // delete a range
          if (!bytes.empty()) {
            size_t at = position(bytes.size());
            bytes.erase(at, 1 + rng.below(8));
          }
          break;
        case 5:  // truncate
          bytes.resize(rng.below(bytes.size() + 1));
          break;
        case 6: {  // a different header length
          uint64_t n = rng.uniform() < 0.5 ? header_length + rng.below(17) - 8 : rng.next_u64() >> rng.below(64);
          if (bytes.size() >= 8) std::memcpy(bytes.data(), &n, 8);
          break;
        }
        case 7: {  // append junk
          bytes.append(1 + rng.below(16), static_cast<char>(rng.below(256)));
          break;
        }
      }
    }
    // A private copy sized exactly, so AddressSanitizer sees any read past the end.
    std::unique_ptr<char[]> buffer(new char[bytes.size() + 1]);
    std::memcpy(buffer.get(), bytes.data(), bytes.size());
    try {
      SafetensorsFile file = read_safetensors_memory(buffer.get(), bytes.size(), "fuzz");
      // Touch every byte of every accepted tensor.
      unsigned sum = 0;
      for (const auto& [name, t] : file.tensors) {
        const auto* p = static_cast<const unsigned char*>(t.raw());
        for (size_t i = 0; i < t.nbytes(); ++i) sum += p[i];
      }
      volatile unsigned observed = sum;  // keeps the reads
      (void)observed;
      ++accepted;
    } catch (const Error&) {
      ++refused;
    } catch (const std::exception& e) {
      FAIL() << "iteration " << it << ": non-vitpipe exception " << typeid(e).name() << ": " << e.what();
    }
  }
  // Both outcomes must occur, or the mutations are not exercising the reader.
  EXPECT_GT(accepted, 100);
  EXPECT_GT(refused, iterations / 2);
  std::printf("fuzz: %d accepted, %d refused\n", accepted, refused);
}

// --- Sharded checkpoints ---

TEST(SafetensorsSharded, PlansShardsLikeHuggingfaceHub) {
  // A tensor larger than the limit gets its own shard as soon as it is met; others fill shards in order.
  auto plan = plan_shards({4, 4, 10, 4, 4}, 8);
  EXPECT_EQ(plan, (std::vector<std::vector<size_t>>{{2}, {0, 1}, {3, 4}}));
  EXPECT_EQ(plan_shards({1, 2, 3}, 100), (std::vector<std::vector<size_t>>{{0, 1, 2}}));
  EXPECT_EQ(plan_shards({5, 5, 5}, 9), (std::vector<std::vector<size_t>>{{0}, {1}, {2}}));
  EXPECT_EQ(plan_shards({}, 9), (std::vector<std::vector<size_t>>{{}}));
}

NamedTensorList sample_list() {
  NamedTensorList list;
  for (int i = 0; i < 7; ++i) list.emplace_back(concat("layer.", i, ".weight"), patterned({16}, DType::f32, i));
  list.emplace_back("big", patterned({64}, DType::f32, 42));
  return list;
}

TEST(SafetensorsSharded, WritesShardsAndIndexAndReadsThemBack) {
  fs::path dir = temp_dir("sharded");
  NamedTensorList list = sample_list();
  auto written = write_sharded_safetensors(dir, list, 150);
  // 64-byte tensors, two per 150-byte shard; "big" (256 bytes) alone in a shard of its own: 5 shards.
  ASSERT_EQ(written.size(), 6u);
  EXPECT_EQ(written[0], "model-00001-of-00005.safetensors");
  EXPECT_EQ(written[4], "model-00005-of-00005.safetensors");
  EXPECT_EQ(written[5], "model.safetensors.index.json");
  auto index = nlohmann::json::parse(read_text_file(dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 7 * 64 + 256);
  EXPECT_EQ(index["weight_map"]["layer.0.weight"], "model-00001-of-00005.safetensors");
  EXPECT_EQ(index["weight_map"]["big"], "model-00004-of-00005.safetensors");  // emitted when met

  ShardedSafetensors read = read_sharded_safetensors(dir / "model.safetensors.index.json");
  ASSERT_EQ(read.tensors.size(), list.size());
  for (const auto& [name, tensor] : list) EXPECT_TRUE(same_bytes(read.tensors.at(name), tensor)) << name;
  EXPECT_EQ(read.source.at("layer.6.weight"), "model-00005-of-00005.safetensors");

  // Everything fits: one plain model.safetensors, no index.
  fs::path single = temp_dir("single");
  EXPECT_EQ(write_sharded_safetensors(single, list), std::vector<std::string>{"model.safetensors"});
  EXPECT_FALSE(fs::exists(single / "model.safetensors.index.json"));
}

void expect_sharded_error(const fs::path& index, const std::string& fragment) {
  try {
    read_sharded_safetensors(index);
    ADD_FAILURE() << "accepted; expected: " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(SafetensorsSharded, RefusesBrokenIndexes) {
  fs::path dir = temp_dir("sharded_bad");
  write_sharded_safetensors(dir, sample_list(), 150);
  const fs::path index_path = dir / "model.safetensors.index.json";
  const auto index = nlohmann::json::parse(read_text_file(index_path));
  auto write_index = [&](const nlohmann::json& j) { write_text_file_atomically(index_path, j.dump()); };

  auto listed_elsewhere = index;
  listed_elsewhere["weight_map"]["layer.0.weight"] = "model-00002-of-00005.safetensors";
  write_index(listed_elsewhere);
  expect_sharded_error(index_path,
                       "tensor 'layer.0.weight' is listed in shard model-00002-of-00005.safetensors but "
                       "that shard does not hold it");

  auto unlisted = index;
  unlisted["weight_map"].erase("layer.1.weight");
  write_index(unlisted);
  expect_sharded_error(index_path, "holds tensor 'layer.1.weight' which");

  auto escaping = index;
  escaping["weight_map"]["big"] = "../model-00005-of-00005.safetensors";
  write_index(escaping);
  expect_sharded_error(index_path, "is not a file name in the index's directory");

  write_index({{"metadata", {{"total_size", 1}}}, {"weight_map", {1, 2}}});
  expect_sharded_error(index_path, "\"weight_map\" must be an object");

  write_text_file_atomically(index_path, "{\"weight_map\": ");
  expect_sharded_error(index_path, "not valid JSON");

  write_index(index);
  fs::remove(dir / "model-00003-of-00005.safetensors");
  expect_sharded_error(index_path,
                       "shard model-00003-of-00005.safetensors (holding 'layer.4.weight' and 1 more) is "
                       "missing");
}

}  // namespace
}  // namespace vitpipe
