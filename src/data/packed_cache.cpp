#include "data/packed_cache.h"

#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_set>

#include "data/archive_staging.h"
#include "data/data_spec.h"
#include "data/image_processor.h"
#include "data/pillow_resize.h"
#include "data/source_fingerprint.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_error_detail.h"
#include "util/json_integer.h"
#include "util/log.h"
#include "util/output_folder.h"
#include "util/progress.h"
#include "util/size_limits.h"
#include "util/threads.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kFormatName = "vitpipe-packed-cache";
constexpr const char* kPixelsName = "pixels.u8";
constexpr const char* kIndexName = "index.json";
constexpr size_t kPixelsPadding = 64;
// staging/: what a prepare from archives has decoded so far (data/archive_staging.h), removed once it is done.
constexpr const char* kStagingName = "staging";
constexpr const char* kCacheFiles[] = {kPixelsName, kIndexName, kPackedCacheManifestName, kStagingName};

// One decoded image resized and cropped as the processor does; a colour image whose channels are all equal is kept
// as gray.
void process(const DecodedImage& image, const ImageProcessor& processor, std::vector<uint8_t>* out, int* channels) {
  int64_t w = 0, h = 0;
  processor.geometry(image.pixels.data(), image.width, image.height, image.channels, out, &w, &h);
  const auto pixels = static_cast<size_t>(w * h);
  *channels = image.channels;
  if (image.channels == 3) {
    const uint8_t* p = out->data();
    bool gray = true;
    for (size_t k = 0; k < pixels && gray; ++k) gray = p[3 * k] == p[3 * k + 1] && p[3 * k] == p[3 * k + 2];
    if (gray) {
      for (size_t k = 0; k < pixels; ++k) (*out)[k] = p[3 * k];
      out->resize(pixels);
      *channels = 1;
    }
  }
}

void decode_and_process(const fs::path& path, const ImageReadOptions& reading, const ImageProcessor& processor,
                        std::vector<uint8_t>* out, int* channels) {
  process(decode_image_file_keep_gray(path, reading), processor, out, channels);
}

// Images inside archives: streams them all into DIR/staging first (resuming what an earlier run staged), so that
// writing the cache below reads them in the source's order. Throws naming a broken archive once the others are done.
std::unique_ptr<ArchiveStaging> stage_archives(const FileDataset::Source& source, const fs::path& dir,
                                               const PreprocessorConfig& preprocessing, const ImageReadOptions& reading,
                                               const ImageProcessor& processor, int64_t image_size, int threads,
                                               const PrepareCacheOptions& options) {
  const std::string settings =
      concat("vitpipe archive staging 1\nimage_size ", image_size, "\ngeometry ", preprocessing.geometry(),
             "\nimage_read ", image_read_options_json(reading).dump(), "\n");
  auto staging =
      std::make_unique<ArchiveStaging>(dir / kStagingName, settings, static_cast<size_t>(image_size * image_size));
  std::unordered_set<std::string> wanted;
  for (const auto& entry : source.entries) wanted.insert(entry.item.name);
  auto decode = [&](const uint8_t* bytes, size_t size, const std::string& name, std::vector<uint8_t>* out,
                    int* channels) {
    process(decode_image_memory_keep_gray(bytes, size, name, reading), processor, out, channels);
  };
  info("reading ", source.archives.size(), " archives (", source.archives.front().filename().string(),
       source.archives.size() > 1 ? " .. " + source.archives.back().filename().string() : "", ") on ", threads,
       " threads, decoded images staged in ", staging->directory().string());
  const ArchiveStagingResult staged = stage_image_archives(source.archives, wanted, *staging, decode, threads,
                                                           !options.skip_unreadable, options.progress);
  const std::string kept = concat("no cache written; the ", staging->size(), " images decoded so far are kept in ",
                                  staging->directory().string(), " and the same command goes on from there");
  if (staged.reused > 0) info(staged.reused, " images were already staged by an earlier run; not decoded again");
  VP_REQUIRE(staged.write_error.empty(), staged.write_error, "; ", kept);
  if (!staged.broken.empty()) {
    std::string all;
    for (const auto& b : staged.broken) all += (all.empty() ? "" : "; ") + b;
    fail(all, "; replace the archive (", kept, ")");
  }
  if (!options.skip_unreadable && !staged.unreadable.empty())
    fail(staged.unreadable.begin()->second, " (pass --skip-unreadable to leave such images out; ", kept, ")");
  for (const auto& [name, why] : staged.unreadable) warn("skipping unreadable image: ", why);
  // Listed in the CSV, in no archive: said once, here, rather than image by image below.
  std::vector<std::string> absent;
  for (const auto& entry : source.entries)
    if (!staging->contains(entry.item.name) && !staged.unreadable.contains(entry.item.name))
      absent.push_back(entry.item.name);
  if (!absent.empty()) {
    const std::string examples =
        concat(absent[0], absent.size() > 1 ? ", " + absent[1] : "", absent.size() > 2 ? ", ..." : "");
    VP_REQUIRE(options.skip_unreadable, source.spec, ": ", absent.size(), " of ", source.entries.size(),
               " listed images are in none of the ", source.archives.size(), " archives (", examples,
               "); add the missing archive, or pass --skip-unreadable to go on without them (", kept, ")");
    warn(source.spec, ": skipping ", absent.size(), " listed images that are in none of the archives (", examples, ")");
  }
  return staging;
}

uint32_t record_checksum(const uint8_t* pixels, size_t size) {
  return static_cast<uint32_t>(crc32(0, pixels, static_cast<uInt>(size)));
}

json fingerprint_json(const SourceFingerprint& fp) {
  return {
      {"metadata_sha256", fp.metadata_sha256}, {"images_sha256", fp.images_sha256}, {"image_count", fp.image_count}};
}

const char* source_split_code(SourceSplit split) {
  switch (split) {
    case SourceSplit::train_val:
      return "train_val";
    case SourceSplit::train:
      return "train";
    case SourceSplit::val:
      return "val";
    case SourceSplit::test:
      return "test";
    case SourceSplit::none:
      return "none";
  }
  return "none";
}

SourceSplit parse_source_split(const std::string& text, const std::string& where) {
  for (auto s : {SourceSplit::train_val, SourceSplit::train, SourceSplit::val, SourceSplit::test, SourceSplit::none})
    if (text == source_split_code(s)) return s;
  fail(where, ": unknown split \"", text, "\"");
}

}  // namespace

PrepareCacheReport prepare_packed_cache(const FileDataset& dataset, const fs::path& dir,
                                        const PrepareCacheOptions& options) {
  const auto start_time = std::chrono::steady_clock::now();
  const FileDataset::Source& source = dataset.source();
  PreprocessorConfig preprocessing = default_preprocessor_config(options.image_size);
  preprocessing.resample = options.resample;
  if (options.preprocessor) preprocessing = *options.preprocessor;
  const auto [out_width, out_height] = preprocessing.fixed_output_size();
  VP_REQUIRE(out_width == out_height && out_width > 0, "data prepare: the preprocessing (", preprocessing.geometry(),
             ") must produce square images of one size");
  const int64_t image_size = out_width;
  VP_REQUIRE(image_size >= 8 && image_size <= 4096, "--image-size ", image_size, " is out of range (expected 8..4096)");
  const ImageProcessor processor(preprocessing);
  // Ours: empty, a cache (marked, or from before markers: its files), or what an interrupted prepare left (its
  // files' temporaries "NAME.tmp-PID").
  const std::vector<std::string> cache_files = packed_cache_files();
  const OutputFolder folder = check_output_folder(dir, "data prepare", "--out", options.force, cache_files);
  create_output_folder(folder);
  fs::remove(dir / kPackedCacheManifestName);  // from here on, no valid-looking cache until we finish
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().find(".tmp-") != std::string::npos) fs::remove(entry.path());

  // Fingerprint first: a source edited while we decode makes the cache stale, never silently wrong.
  const ImageReadOptions& reading = dataset.image_read_options();
  const SourceFingerprint fingerprint = fingerprint_source(source, describe_image_read_options(reading));
  const size_t n = source.entries.size();
  const int threads = std::max(1, options.threads > 0 ? options.threads : available_cores());
  std::unique_ptr<ArchiveStaging> staging;
  if (!source.archives.empty())
    staging = stage_archives(source, dir, preprocessing, reading, processor, image_size, threads, options);
  const size_t window = static_cast<size_t>(std::max(16, 8 * threads));

  struct Slot {
    std::vector<uint8_t> pixels;
    int channels = 0;
    bool done = false;
    std::string error;
  };
  std::vector<Slot> slots(window);
  std::mutex mutex;
  std::condition_variable work_ready, result_ready;
  size_t next = 0, written = 0;
  bool stop = false;

  auto worker = [&] {
    std::vector<uint8_t> pixels;
    while (true) {
      size_t i;
      {
        std::unique_lock lock(mutex);
        work_ready.wait(lock, [&] { return stop || next >= n || next < written + window; });
        if (stop || next >= n) return;
        i = next++;
      }
      int channels = 0;
      std::string error;
      try {
        if (!staging) {
          decode_and_process(source.paths[i], reading, processor, &pixels, &channels);
        } else if (!staging->load(source.entries[i].item.name, &pixels, &channels)) {
          error = concat(source.entries[i].item.name, ": in none of the ", source.archives.size(),
                         " archives, or unreadable there");
        }
      } catch (const std::exception& e) {
        error = e.what();
        if (error.empty()) error = (staging ? source.entries[i].item.name : source.paths[i].string()) + ": unreadable";
      }
      std::lock_guard lock(mutex);
      Slot& slot = slots[i % window];
      slot.pixels.swap(pixels);
      slot.channels = channels;
      slot.error = std::move(error);
      slot.done = true;
      result_ready.notify_all();
    }
  };

  AtomicFileWriter pixels_file(dir / kPixelsName);
  json names = json::array(), labels = json::array(), splits = json::array(), patients = json::array(),
       views = json::array(), sexes = json::array(), ages = json::array(), offsets = json::array(),
       channels = json::array(), uncertain = json::array(), unmentioned = json::array(), checksums = json::array();
  PrepareCacheReport report;
  std::string fatal;        // an unreadable image
  std::string write_error;  // pixels.u8 could not be written
  {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
    ProgressBar progress(concat("prepare ", image_size, "x", image_size), static_cast<int64_t>(n), "img");
    for (; written < n;) {
      Slot slot;
      {
        std::unique_lock lock(mutex);
        result_ready.wait(lock, [&] { return slots[written % window].done; });
        std::swap(slot, slots[written % window]);
      }
      const SourceEntry& entry = source.entries[written];
      if (!slot.error.empty()) {
        if (!options.skip_unreadable) {
          fatal = slot.error;
          break;
        }
        if (!staging) warn("skipping unreadable image: ", slot.error);  // from archives: said once staged
        report.skipped.push_back(entry.item.name);
      } else {
        names.push_back(entry.item.name);
        labels.push_back(entry.item.labels);
        uncertain.push_back(entry.item.uncertain);
        unmentioned.push_back(entry.item.unmentioned);
        splits.push_back(source_split_code(entry.source_split));
        patients.push_back(entry.item.patient);
        views.push_back(entry.item.view);
        sexes.push_back(entry.item.sex);
        ages.push_back(entry.item.age_years);
        offsets.push_back(pixels_file.bytes_written());
        channels.push_back(slot.channels);
        checksums.push_back(record_checksum(slot.pixels.data(), slot.pixels.size()));
        try {
          pixels_file.write(slot.pixels.data(), slot.pixels.size());
        } catch (const Error& e) {  // a full or failing disk: stop the workers before reporting it
          write_error = e.what();
          break;
        }
        report.images++;
        if (slot.channels == 1) report.gray_images++;
      }
      {
        std::lock_guard lock(mutex);
        ++written;
        // The finished slot is free again: hand its buffer back so workers do not reallocate.
        work_ready.notify_all();
      }
      if (options.progress && written < n) progress.update(static_cast<int64_t>(written));
    }
    {
      std::lock_guard lock(mutex);
      stop = true;
      work_ready.notify_all();
    }
    for (auto& t : pool) t.join();
    if (options.progress && fatal.empty() && write_error.empty())
      progress.finish(format_bytes(static_cast<double>(pixels_file.bytes_written())));
  }
  VP_REQUIRE(fatal.empty(), fatal, " (no cache written; pass --skip-unreadable to leave such images out)");
  VP_REQUIRE(write_error.empty(), write_error, " (no cache written)");
  // Padding after the last record: vector code may read a few bytes past an image.
  const std::vector<uint8_t> padding(kPixelsPadding, 0);
  pixels_file.write(padding.data(), padding.size());
  report.pixel_bytes = pixels_file.bytes_written();
  pixels_file.commit();

  json index = {
      {"names", names},         {"labels", labels},     {"uncertain", uncertain}, {"unmentioned", unmentioned},
      {"source_split", splits}, {"patients", patients}, {"views", views},         {"sexes", sexes},
      {"ages", ages},           {"offsets", offsets},   {"channels", channels},   {"crc32", checksums}};
  const std::string index_text = index.dump();
  write_text_file_atomically(dir / kIndexName, index_text);

  json missing = json::array();
  for (const auto& m : source.missing) missing.push_back(m.item.name);
  json manifest = {{"format", kFormatName},
                   {"version", kPackedCacheFormatVersion},
                   {"source", source.spec},
                   {"kind", source.kind},
                   {"image_size", image_size},
                   {"resample", preprocessing.resample},
                   {"geometry", preprocessing.geometry()},
                   {"image_read", image_read_options_json(reading)},
                   {"listing_options", source.listing_options},
                   {"label_names", source.label_names},
                   {"multi_label", source.multi_label},
                   {"no_finding_allowed", source.no_finding_allowed},
                   {"fingerprint", fingerprint_json(fingerprint)},
                   {"images", report.images},
                   {"gray_images", report.gray_images},
                   {"pixels_bytes", report.pixel_bytes},
                   {"index_bytes", index_text.size()},
                   {"index_sha256", sha256_hex(index_text.data(), index_text.size())},
                   {"skipped_unreadable", report.skipped},
                   {"missing", missing}};
  write_text_file_atomically(dir / kPackedCacheManifestName, manifest.dump(2) + "\n");
  mark_output_folder(folder, cache_files);
  if (staging) staging->remove();  // the cache holds it all now
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  return report;
}

std::vector<std::string> packed_cache_files() { return {std::begin(kCacheFiles), std::end(kCacheFiles)}; }

// A function-try-block: a field of manifest.json of the wrong type, read by json::value() outside the checks
// below, becomes an error naming the file instead of nlohmann's bare message.
std::shared_ptr<PackedCacheDataset> open_packed_cache(const fs::path& dir_in, const DatasetOptions& options) try {
  const fs::path dir = fs::absolute(dir_in).lexically_normal();
  const fs::path manifest_path = dir / kPackedCacheManifestName;
  VP_REQUIRE(fs::is_regular_file(manifest_path), "cache:", dir.string(), ": no ", kPackedCacheManifestName,
             " (not a finished cache: run `vitpipe data prepare --out ", dir.string(), "`)");
  json manifest;
  const std::string manifest_text = read_text_file(manifest_path);
  try {
    manifest = json::parse(manifest_text);
  } catch (const json::exception& e) {
    fail(manifest_path.string(), ": not valid JSON", json_error_detail(e, manifest_text));
  }
  const std::string where = manifest_path.string();
  VP_REQUIRE(manifest.is_object() && manifest.value("format", "") == kFormatName, where,
             ": not a vitpipe packed cache manifest");
  const int version = json_integer_or<int>(manifest, "version", 0, where);
  VP_REQUIRE(version == kPackedCacheFormatVersion || version == kPackedCacheOldestReadVersion, where,
             ": cache format version ", version, ", this vitpipe reads versions ", kPackedCacheOldestReadVersion,
             " and ", kPackedCacheFormatVersion, "; run `vitpipe data prepare` again");
  const bool has_demographics = version >= 4;  // sex and age per image, for subgroups without the source

  auto cache = std::shared_ptr<PackedCacheDataset>(new PackedCacheDataset());
  try {
    cache->dir_ = dir;
    cache->source_spec_ = manifest.at("source").get<std::string>();
    cache->image_size_ = json_integer<int64_t>(manifest.at("image_size"), where + " field \"image_size\"");
    VP_REQUIRE(cache->image_size_ >= 1 && cache->image_size_ <= max_image_pixels() / cache->image_size_, where,
               ": field \"image_size\" must be >= 1 with image_size^2 <= ", max_image_pixels(),
               " (VITPIPE_MAX_IMAGE_PIXELS), got ", cache->image_size_);
    cache->resample_ = json_integer<int>(manifest.at("resample"), where + " field \"resample\"");
    // Caches written before crops were recorded hold plain S x S resizes.
    PreprocessorConfig plain = default_preprocessor_config(cache->image_size_);
    plain.resample = cache->resample_;
    cache->geometry_ = manifest.value("geometry", plain.geometry());
    cache->kind_ = "cache";
    cache->spec_ = "cache:" + dir.string();
    cache->label_names_ = manifest.at("label_names").get<std::vector<std::string>>();
    cache->multi_label_ = manifest.at("multi_label").get<bool>();
  } catch (const json::exception& e) {
    fail(where, ": missing or malformed field (", e.what(), ")");
  }
  std::map<std::string, std::string> listing_options;
  try {
    cache->image_read_ = parse_image_read_options_json(manifest.at("image_read"), where + " field \"image_read\"");
    listing_options = manifest.at("listing_options").get<std::map<std::string, std::string>>();
  } catch (const json::exception& e) {
    fail(where, ": missing or malformed field (", e.what(), ")");
  }
  const bool no_finding_allowed = manifest.value("no_finding_allowed", false);
  const std::string rerun = concat("; run `vitpipe data prepare --data ", cache->source_spec_, " --image-size ",
                                   cache->image_size_, " --out ", dir.string(), "` again");

  const std::string index_text = read_text_file(dir / kIndexName);
  VP_REQUIRE(index_text.size() == json_integer_or<uint64_t>(manifest, "index_bytes", 0, where) &&
                 sha256_hex(index_text.data(), index_text.size()) == manifest.value("index_sha256", ""),
             (dir / kIndexName).string(), ": does not match ", kPackedCacheManifestName, " (edited or half-written)",
             rerun);
  cache->pixels_ = MappedFile::open(dir / kPixelsName);
  const auto pixels_bytes = json_integer_or<uint64_t>(manifest, "pixels_bytes", 0, where);
  VP_REQUIRE(cache->pixels_->size() == pixels_bytes, (dir / kPixelsName).string(), ": ", cache->pixels_->size(),
             " bytes, the manifest says ", pixels_bytes, rerun);

  // Options that shaped the source's listing (VinDr-CXR's label vote, ...) cannot change afterwards.
  DataSpec source_spec = parse_data_spec(cache->source_spec_);
  for (const auto& [key, wanted] : listing_options_for(source_spec.kind, options)) {
    const auto then = listing_options.find(key);
    std::string flag = key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    VP_REQUIRE(then != listing_options.end() && then->second == wanted, "cache:", dir.string(), " was prepared with --",
               flag, " ", then == listing_options.end() ? "(unknown)" : then->second, ", not ", wanted,
               ": pass that, or run `vitpipe data prepare --data ", cache->source_spec_, " --", flag, " ", wanted,
               "` again");
  }
  // Stale? Compare the source as it is now with the fingerprint taken when the cache was made.
  if (source_spec.kind == "cache" || !fs::exists(source_spec.path)) {
    warn("cache:", dir.string(), ": its source ", cache->source_spec_,
         " is not here, so it cannot be checked for changes; using it as it is");
  } else {
    DatasetOptions listing = options;
    listing.allow_missing = true;
    listing.skip_unreadable = false;
    listing.view.clear();
    listing.add_no_finding = false;
    std::shared_ptr<FileDataset> now = open_file_dataset(source_spec, listing);
    const SourceFingerprint current =
        fingerprint_source(now->source(), describe_image_read_options(cache->image_read_));
    const json& then = manifest.at("fingerprint");
    if (current.metadata_sha256 != then.value("metadata_sha256", ""))
      fail("cache:", dir.string(), " is stale: the label / split files of ", cache->source_spec_,
           " changed since it was prepared", rerun);
    if (current.images_sha256 != then.value("images_sha256", ""))
      fail("cache:", dir.string(), " is stale: the image files of ", cache->source_spec_,
           " changed since it was prepared (", json_integer_or<int64_t>(then, "image_count", 0, where),
           " images then, ", current.image_count, " now, or files modified)", rerun);
  }

  json index;
  try {
    index = json::parse(index_text);
  } catch (const json::exception& e) {
    fail((dir / kIndexName).string(), ": not valid JSON", json_error_detail(e, index_text));
  }
  std::vector<SourceEntry> entries;
  std::vector<uint64_t> offsets;
  std::vector<uint8_t> channels;
  std::vector<uint32_t> checksums;
  const std::string index_where = (dir / kIndexName).string();
  try {
    const auto& names = index.at("names");
    const size_t n = names.size();
    const auto& labels = index.at("labels");
    const auto& splits = index.at("source_split");
    const auto& patients = index.at("patients");
    const auto& views = index.at("views");
    static const json no_values = json::array();
    const auto& sexes = has_demographics ? index.at("sexes") : no_values;
    const auto& ages = has_demographics ? index.at("ages") : no_values;
    const auto& offs = index.at("offsets");
    const auto& chans = index.at("channels");
    const auto& crcs = index.at("crc32");
    const auto& uncertain = index.at("uncertain");
    const auto& unmentioned = index.at("unmentioned");
    VP_REQUIRE(labels.size() == n && splits.size() == n && patients.size() == n && views.size() == n &&
                   offs.size() == n && chans.size() == n && crcs.size() == n && uncertain.size() == n &&
                   unmentioned.size() == n && (!has_demographics || (sexes.size() == n && ages.size() == n)),
               (dir / kIndexName).string(), ": columns of different lengths");
    entries.resize(n);
    offsets.resize(n);
    channels.resize(n);
    checksums.resize(n);
    const auto pixel_count = static_cast<uint64_t>(cache->image_size_ * cache->image_size_);
    for (size_t i = 0; i < n; ++i) {
      entries[i].item.name = names[i].get<std::string>();
      const std::string record = concat(index_where, " record ", i);
      entries[i].item.labels = json_integers<int32_t>(labels[i], record + " \"labels\"");
      entries[i].item.uncertain = json_integers<int32_t>(uncertain[i], record + " \"uncertain\"");
      entries[i].item.unmentioned = json_integers<int32_t>(unmentioned[i], record + " \"unmentioned\"");
      for (const auto* list : {&entries[i].item.labels, &entries[i].item.uncertain, &entries[i].item.unmentioned})
        for (int32_t l : *list)
          VP_REQUIRE(l >= 0 && l < static_cast<int32_t>(cache->label_names_.size()), (dir / kIndexName).string(),
                     ": label index out of range for ", entries[i].item.name);
      entries[i].source_split = parse_source_split(splits[i].get<std::string>(), (dir / kIndexName).string());
      entries[i].item.patient = patients[i].get<std::string>();
      entries[i].item.view = views[i].get<std::string>();
      if (has_demographics) {
        entries[i].item.sex = sexes[i].get<std::string>();
        entries[i].item.age_years = ages[i].get<double>();
      }
      offsets[i] = json_integer<uint64_t>(offs[i], record + " \"offsets\"");
      channels[i] = json_integer<uint8_t>(chans[i], record + " \"channels\"");
      checksums[i] = json_integer<uint32_t>(crcs[i], record + " \"crc32\"");
      VP_REQUIRE((channels[i] == 1 || channels[i] == 3) && offsets[i] <= cache->pixels_->size() &&
                     pixel_count * channels[i] <= cache->pixels_->size() - offsets[i],
                 (dir / kIndexName).string(), ": record of ", entries[i].item.name, " lies outside ", kPixelsName);
    }
  } catch (const json::exception& e) {
    fail((dir / kIndexName).string(), ": malformed (", e.what(), ")");
  }

  std::vector<size_t> kept =
      apply_dataset_options(entries, cache->label_names_, no_finding_allowed, options, cache->spec_);
  cache->items_.reserve(kept.size());
  for (size_t k : kept) {
    cache->items_.push_back(std::move(entries[k].item));
    cache->offsets_.push_back(offsets[k]);
    cache->channels_.push_back(channels[k]);
    cache->checksums_.push_back(checksums[k]);
  }
  cache->rerun_ = rerun;
  if (!has_demographics)
    warn("cache:", dir.string(), ": format version ", version,
         " keeps no patient sex or age, so subgroups by sex and age are not reported from it", rerun, " to add them");
  cache->missing_ = manifest.value("missing", std::vector<std::string>{});
  return cache;
} catch (const json::exception& e) {
  fail("cache:", fs::absolute(dir_in).lexically_normal().string(), ": malformed ", kPackedCacheManifestName, " (",
       e.what(), ")");
}

bool PackedCacheDataset::stored(int64_t i, StoredImage* out) const {
  const auto k = static_cast<size_t>(i);
  out->pixels = reinterpret_cast<const uint8_t*>(pixels_->data()) + offsets_[k];
  out->width = image_size_;
  out->height = image_size_;
  out->channels = channels_[k];
  out->padded = true;  // the file ends with kPixelsPadding bytes
  // Every read is checked against the checksum `prepare` recorded: pixels.u8 edited in place since then is an
  // unreadable image (an error, or skipped and counted with --skip-unreadable), never silently wrong pixels.
  const size_t bytes = static_cast<size_t>(out->width * out->height * out->channels);
  VP_REQUIRE(record_checksum(out->pixels, bytes) == checksums_[k], "cache:", dir_.string(), ": the pixels of ",
             items_[k].name, " in ", kPixelsName,
             " do not match the checksum recorded by `vitpipe data prepare` (the "
             "file was modified after it was prepared)",
             rerun_);
  return true;
}

DecodedImage PackedCacheDataset::load_decoded(int64_t i) const {
  StoredImage view;
  stored(i, &view);
  DecodedImage image;
  image.width = view.width;
  image.height = view.height;
  image.channels = view.channels;
  image.pixels.assign(view.pixels, view.pixels + view.width * view.height * view.channels);
  return image;
}

}  // namespace vitpipe
