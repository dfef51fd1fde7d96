// The packed cache's index.json and manifest.json (`--data cache:DIR`), then every record's pixels. Mode (first
// byte): 0 the input is index.json under a manifest that matches it; 1 the input is manifest.json as is; 2 the
// input is manifest.json with its index size and digest corrected, so the checks behind them are reached. Every
// pixel byte is 0x7f; kIndex's CRC-32s are those of its two records (48 and 16 such bytes).
#include <nlohmann/json.hpp>

#include "data/packed_cache.h"
#include "data/source_fingerprint.h"
#include "fuzz_common.h"

namespace {

constexpr int64_t kImageSize = 4;
constexpr size_t kPixelBytes = 6 * kImageSize * kImageSize * 3 + 64;  // room for six colour records + padding

const char* const kIndex =
    R"({"names":["a.png","b.png"],"labels":[[0],[1]],"source_split":["train","test"],"patients":["1","2"],)"
    R"("views":["PA","AP"],"sexes":["M","F"],"ages":[40,81.5],"offsets":[0,48],"channels":[3,1],)"
    R"("crc32":[749828157,931807011]})";

nlohmann::json manifest_for(const std::string& index) {
  return {{"format", "vitpipe-packed-cache"},
          {"version", vitpipe::kPackedCacheFormatVersion},
          {"source", "csv:" + (vitpipe::fuzz::scratch_directory() / "absent.csv").string()},
          {"kind", "csv"},
          {"image_size", kImageSize},
          {"resample", 2},
          {"label_names", {"x", "y"}},
          {"multi_label", true},
          {"no_finding_allowed", true},
          {"fingerprint", {{"metadata_sha256", ""}, {"images_sha256", ""}, {"image_count", 2}}},
          {"images", 2},
          {"gray_images", 1},
          {"pixels_bytes", kPixelBytes},
          {"index_bytes", index.size()},
          {"index_sha256", vitpipe::sha256_hex(index.data(), index.size())},
          {"skipped_unreadable", nlohmann::json::array()},
          {"missing", nlohmann::json::array()}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto dir = vitpipe::fuzz::scratch_directory() / "cache";
  static const bool ready = [&] {
    std::filesystem::create_directories(dir);
    vitpipe::fuzz::write_file(dir / "pixels.u8", std::string(kPixelBytes, '\x7f'));
    return true;
  }();
  (void)ready;
  const std::string input(vitpipe::fuzz::as_text(data + 1, size - 1));
  const int mode = data[0] % 3;
  if (mode == 0) {
    vitpipe::fuzz::write_file(dir / "index.json", input);
    vitpipe::fuzz::write_file(dir / "manifest.json", manifest_for(input).dump());
  } else {
    vitpipe::fuzz::write_file(dir / "index.json", kIndex);
    std::string manifest = input;
    if (mode == 2) {
      nlohmann::json json = nlohmann::json::parse(input, nullptr, false);
      if (json.is_object()) {
        const nlohmann::json fixed = manifest_for(kIndex);
        json["index_bytes"] = fixed["index_bytes"];
        json["index_sha256"] = fixed["index_sha256"];
        manifest = json.dump();
      }
    }
    vitpipe::fuzz::write_file(dir / "manifest.json", manifest);
  }
  vitpipe::fuzz::expect_parse_or_refusal([&] {
    vitpipe::DatasetOptions options;
    options.val_fraction = 0.5;
    const auto cache = vitpipe::open_packed_cache(dir, options);
    unsigned sum = 0;
    for (int64_t i = 0; i < std::min<int64_t>(cache->size(), 64); ++i) {
      vitpipe::StoredImage view;
      if (!cache->stored(i, &view)) continue;
      for (int64_t k = 0; k < view.width * view.height * view.channels; ++k) sum += view.pixels[k];
      sum += static_cast<unsigned>(cache->load_decoded(i).pixels.size());
    }
    volatile unsigned observed = sum;
    (void)observed;
  });
  return 0;
}
