// Hostile sizes in model files, refused before anything is allocated for them: a safetensors header declaring
// 100 GB, pickles nested a million deep, a config.json with 10^9 layers (or a model too big in total), a
// preprocessor asking for 10^6 x 10^6 pixels; and the environment variable that raises the parameter limit.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "io/hf_config.h"
#include "io/preprocessor_config.h"
#include "io/restricted_unpickler.h"
#include "io/safetensors.h"
#include "util/error.h"

namespace vitpipe {
namespace {

using namespace std::string_literals;

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_message(const std::function<void()>& body, std::initializer_list<std::string> parts) {
  const std::string message = error_of(body);
  for (const auto& part : parts) EXPECT_NE(message.find(part), std::string::npos) << "message: " << message;
}

std::string little_endian_u64(uint64_t value) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((value >> (8 * i)) & 0xFF);
  return out;
}

SafetensorsFile read(const std::string& bytes) {
  return read_safetensors_memory(bytes.data(), bytes.size(), "hostile.safetensors");
}

TEST(HostileSizes, SafetensorsHeaderLengthOf100GigabytesIsRefused) {
  const std::string file = little_endian_u64(100'000'000'000ull) + "{}";
  expect_message([&] { read(file); }, {"hostile.safetensors: header length 100000000000 exceeds the limit of "
                                       "100000000 bytes"});
}

TEST(HostileSizes, SafetensorsTensorOf100GigabytesIsRefusedWithoutTheData) {
  // A tensor of 25 x 10^9 F32 = 100 GB whose offsets say so, in a file of a few bytes.
  std::string header = R"({"w":{"dtype":"F32","shape":[25000000000],"data_offsets":[0,100000000000]}})";
  header += std::string((8 - header.size() % 8) % 8, ' ');
  const std::string file = little_endian_u64(header.size()) + header + "abcd";
  expect_message([&] { read(file); }, {"tensor 'w': data_offsets [0, 100000000000) run past the end of the data "
                                       "section (4 bytes)"});
}

TEST(HostileSizes, PicklesNestedAMillionDeepAreRefusedWithoutRecursing) {
  const size_t depth = 1'000'000;
  expect_message([&] { restricted_unpickle("\x80\x02"s + std::string(depth, '(') + ".", "marks.pkl"); },
                 {"marks.pkl", "MARKs nested more than 10000 deep"});
  // A million lists, each appended into the one below: built in the arena, never walked recursively.
  const PickleResult nested =
      restricted_unpickle("\x80\x02"s + std::string(depth, ']') + std::string(depth - 1, 'a') + ".", "lists.pkl");
  EXPECT_EQ(nested.root_object().kind, PickleObject::Kind::list);
  EXPECT_EQ(nested.describe(nested.root), "a list");
  // More objects than the arena allows.
  UnpicklerLimits limits;
  limits.max_objects = 1000;
  expect_message([&] { restricted_unpickle("\x80\x02"s + std::string(2000, ']') + ".", "many.pkl", limits); },
                 {"many.pkl", "builds more than 1000 objects"});
}

std::string vit_base_with(const std::string& key, const nlohmann::json& value) {
  nlohmann::json json = {{"model_type", "vit"},       {"hidden_size", 768},        {"num_hidden_layers", 12},
                         {"num_attention_heads", 12}, {"intermediate_size", 3072}, {"image_size", 224},
                         {"patch_size", 16},          {"num_channels", 3},         {"layer_norm_eps", 1e-12},
                         {"hidden_act", "gelu"},      {"qkv_bias", true},          {"initializer_range", 0.02}};
  json[key] = value;
  return json.dump();
}

TEST(HostileSizes, ConfigWithABillionLayersIsRefused) {
  expect_message([&] { parse_hf_config_text(vit_base_with("num_hidden_layers", 1'000'000'000), "config.json"); },
                 {"config.json: field \"num_hidden_layers\" is 1000000000, more than the limit of 1024"});
  expect_message([&] { parse_hf_config_text(vit_base_with("hidden_size", int64_t{1} << 40), "config.json"); },
                 {"field \"hidden_size\" is 1099511627776, more than the limit of 65536"});
  expect_message([&] { parse_hf_config_text(vit_base_with("image_size", 1'000'000), "config.json"); },
                 {"field \"image_size\" is 1000000, more than the limit of 16384"});
}

TEST(HostileSizes, ModelTooLargeInTotalIsRefusedUnlessTheLimitIsRaised) {
  // Every field within its bound, together ~3.2 x 10^12 parameters (13 TB in fp32).
  nlohmann::json json = nlohmann::json::parse(vit_base_with("num_hidden_layers", 1000));
  json["hidden_size"] = 16384;
  json["num_attention_heads"] = 128;
  json["intermediate_size"] = 65536;
  expect_message([&] { parse_hf_config_text(json.dump(), "config.json"); },
                 {"config.json: describes a model of", "parameters, more than the limit of 20000000000",
                  "set VITPIPE_MAX_PARAMETERS to raise it"});
  ::setenv("VITPIPE_MAX_PARAMETERS", "10000000000000", 1);
  EXPECT_EQ(parse_hf_config_text(json.dump(), "config.json").config.num_hidden_layers, 1000);
  ::unsetenv("VITPIPE_MAX_PARAMETERS");
  // ViT-Base is far below the default.
  EXPECT_NEAR(parse_hf_config_text(vit_base_with("model_type", "vit"), "c").config.approximate_parameter_count(),
              85.8e6, 0.2e6);
}

TEST(HostileSizes, PreprocessorAskingForATrillionPixelsIsRefused) {
  const std::string text = R"({"size": {"height": 1000000, "width": 1000000}})";
  expect_message([&] { parse_preprocessor_config_text(text, "preprocessor_config.json"); },
                 {"preprocessor_config.json: field \"size\" asks for 1000000x1000000 pixels, more than the limit of "
                  "268435456 (set VITPIPE_MAX_IMAGE_PIXELS to raise it)"});
}

}  // namespace
}  // namespace vitpipe
