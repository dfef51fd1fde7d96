#include "io/pytorch_bin.h"

#include <zip.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "io/restricted_unpickler.h"
#include "io/weight_index.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/log.h"
#include "util/mapped_file.h"

namespace vitpipe {
namespace {

// Raw bytes of one storage, 64-byte aligned so tensor views of it are as aligned as fresh tensors.
struct StorageBytes {
  std::shared_ptr<std::byte> data;
  size_t size = 0;
};

StorageBytes allocate_storage(size_t size, const std::string& what) {
  size_t rounded = (size + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  void* memory = std::aligned_alloc(kTensorAlignment, rounded == 0 ? kTensorAlignment : rounded);
  VP_REQUIRE(memory != nullptr, "out of memory allocating ", size, " bytes for ", what);
  return {std::shared_ptr<std::byte>(static_cast<std::byte*>(memory), [](std::byte* p) { std::free(p); }), size};
}

// Where the storages of a checkpoint come from: zip records or the tail of a legacy file.
class StorageSource {
 public:
  virtual ~StorageSource() = default;
  virtual StorageBytes load(const PickledStorage& storage) = 0;
};

bool multiply_overflows(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }

bool is_row_major(const std::vector<int64_t>& size, const std::vector<int64_t>& stride) {
  int64_t expected = 1;
  for (size_t i = size.size(); i-- > 0;) {
    if (size[i] != 1 && stride[i] != expected) return false;
    expected *= size[i];
  }
  return true;
}

// Copies a strided view into a fresh row-major tensor.
void gather_strided(const std::byte* base, size_t element_size, const std::vector<int64_t>& size,
                    const std::vector<int64_t>& stride, std::byte* out) {
  size_t rank = size.size();
  std::vector<int64_t> index(rank, 0);
  int64_t numel = 1;
  for (int64_t d : size) numel *= d;
  int64_t offset = 0;  // in elements, follows `index`
  for (int64_t n = 0; n < numel; ++n) {
    std::memcpy(out + static_cast<size_t>(n) * element_size, base + static_cast<size_t>(offset) * element_size,
                element_size);
    for (size_t axis = rank; axis-- > 0;) {  // odometer increment
      if (++index[axis] < size[axis]) {
        offset += stride[axis];
        break;
      }
      offset -= stride[axis] * (size[axis] - 1);
      index[axis] = 0;
    }
  }
}

class TensorBuilder {
 public:
  TensorBuilder(const std::string& source, const PickleResult& pickle, StorageSource& storages)
      : source_(source), pickle_(pickle), storages_(storages) {}

  Tensor build(const std::string& name, const PickledTensor& pickled) {
    const PickledStorage& storage = pickle_.storages.at(pickled.storage);
    StorageBytes& bytes = root_bytes(storage);
    size_t element_size = dtype_size(storage.dtype);
    int64_t storage_numel = storage.is_view ? storage.view_numel : storage.numel;
    const std::byte* base = bytes.data.get() + (storage.is_view ? storage.view_offset : 0) * element_size;
    std::string where = concat(source_, ": tensor '", name, "'");

    VP_REQUIRE(pickled.storage_offset >= 0, where, ": negative storage offset ", pickled.storage_offset);
    int64_t numel = 1;
    int64_t last = pickled.storage_offset;  // highest element index the view touches
    for (size_t i = 0; i < pickled.size.size(); ++i) {
      int64_t extent = pickled.size[i];
      int64_t step = pickled.stride[i];
      VP_REQUIRE(extent >= 0 && step >= 0, where, ": negative size or stride in size ", shape_string(pickled.size),
                 " stride ", shape_string(pickled.stride));
      VP_REQUIRE(!multiply_overflows(numel, extent, &numel), where, ": size ", shape_string(pickled.size),
                 " overflows");
      int64_t reach = 0;
      if (extent > 0 && (multiply_overflows(extent - 1, step, &reach) || __builtin_add_overflow(last, reach, &last))) {
        fail(where, ": size ", shape_string(pickled.size), " with stride ", shape_string(pickled.stride), " overflows");
      }
    }
    Shape shape(pickled.size.begin(), pickled.size.end());
    if (numel == 0) return Tensor::empty(shape, storage.dtype);
    VP_REQUIRE(last < storage_numel, where, ": size ", shape_string(pickled.size), " stride ",
               shape_string(pickled.stride), " at offset ", pickled.storage_offset, " reaches element ", last,
               " but its storage '", storage.key, "' holds only ", storage_numel, " elements");

    const std::byte* first = base + static_cast<size_t>(pickled.storage_offset) * element_size;
    if (is_row_major(pickled.size, pickled.stride)) {
      // A view: tensors that shared a storage keep sharing it.
      std::shared_ptr<const void> keep_alive = bytes.data;
      return Tensor::wrap(const_cast<std::byte*>(first), shape, storage.dtype, keep_alive);
    }
    // Non-contiguous (a saved transpose): materialise. Bounded so a hostile file cannot make a few bytes of storage
    // expand into terabytes through stride-0 dimensions.
    size_t copy_bytes = static_cast<size_t>(numel) * element_size;
    copied_bytes_ += copy_bytes;
    VP_REQUIRE(copied_bytes_ <= 2 * loaded_bytes_ + (64u << 20), where, ": materialising strided tensors would take ",
               copied_bytes_, " bytes, more than twice the ", loaded_bytes_, " bytes of storage in the file");
    Tensor tensor = Tensor::empty(shape, storage.dtype);
    gather_strided(first, element_size, pickled.size, pickled.stride, static_cast<std::byte*>(tensor.raw()));
    return tensor;
  }

 private:
  StorageBytes& root_bytes(const PickledStorage& storage) {
    auto it = loaded_.find(storage.key);
    if (it != loaded_.end()) {
      VP_REQUIRE(it->second.first == storage.dtype &&
                     it->second.second.size == static_cast<size_t>(storage.numel) * dtype_size(storage.dtype),
                 source_, ": storage '", storage.key, "' is described twice with different types or sizes");
      return it->second.second;
    }
    StorageBytes bytes = storages_.load(storage);
    loaded_bytes_ += bytes.size;
    return loaded_.emplace(storage.key, std::make_pair(storage.dtype, std::move(bytes))).first->second.second;
  }

  const std::string& source_;
  const PickleResult& pickle_;
  StorageSource& storages_;
  std::map<std::string, std::pair<DType, StorageBytes>> loaded_;
  size_t loaded_bytes_ = 0;
  size_t copied_bytes_ = 0;
};

// The pickle's root must be a dict of name -> tensor.
TensorMap collect_state_dict(const std::string& source, const PickleResult& pickle, StorageSource& storages) {
  const PickleObject& root = pickle.root_object();
  if (root.kind != PickleObject::Kind::dict) {
    fail(source, ": holds ", pickle.describe(pickle.root), ", not a state dict (a dict of tensor names to tensors)");
  }
  TensorBuilder builder(source, pickle, storages);
  TensorMap tensors;
  for (size_t i = 0; i + 1 < root.items.size(); i += 2) {
    const PickleObject& key = pickle.at(root.items[i]);
    const PickleObject& value = pickle.at(root.items[i + 1]);
    VP_REQUIRE(key.kind == PickleObject::Kind::string, source, ": a state dict key is ", pickle.describe(root.items[i]),
               ", expected a tensor name");
    if (value.kind != PickleObject::Kind::tensor) {
      std::string hint;
      if ((key.text == "state_dict" || key.text == "model") && value.kind == PickleObject::Kind::dict) {
        hint = concat(" (this looks like a training checkpoint with the weights under '", key.text,
                      "'; save that state dict on its own)");
      }
      fail(source, ": entry '", key.text, "' is ", pickle.describe(root.items[i + 1]), ", not a tensor", hint);
    }
    tensors[key.text] = builder.build(key.text, pickle.tensors[static_cast<size_t>(value.integer)]);
  }
  return tensors;
}

// --- the zip format ---

class ZipArchive {
 public:
  explicit ZipArchive(const std::filesystem::path& path) : path_(path) {
    std::error_code size_error;
    archive_bytes_ = std::filesystem::file_size(path, size_error);
    VP_REQUIRE(!size_error, "cannot read ", path.string(), ": ", size_error.message());
    int error_code = 0;
    archive_ = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &error_code);
    if (archive_ == nullptr) {
      zip_error_t error;
      zip_error_init_with_code(&error, error_code);
      std::string reason = zip_error_strerror(&error);
      zip_error_fini(&error);
      fail(path.string(), ": not a readable zip archive (truncated or corrupted?): ", reason);
    }
  }
  ~ZipArchive() {
    if (archive_ != nullptr) zip_discard(archive_);
  }
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;

  std::vector<std::string> names() const {
    std::vector<std::string> result;
    zip_int64_t count = zip_get_num_entries(archive_, 0);
    for (zip_int64_t i = 0; i < count; ++i) {
      const char* name = zip_get_name(archive_, static_cast<zip_uint64_t>(i), ZIP_FL_ENC_RAW);
      if (name != nullptr) result.emplace_back(name);
    }
    return result;
  }

  bool contains(const std::string& name) const { return zip_name_locate(archive_, name.c_str(), 0) >= 0; }

  // Reads a whole record into aligned memory; `expected_size` (if >= 0) must match.
  StorageBytes read(const std::string& name, int64_t expected_size = -1) const {
    zip_int64_t index = zip_name_locate(archive_, name.c_str(), 0);
    VP_REQUIRE(index >= 0, path_.string(), ": record '", name, "' is missing");
    zip_stat_t stat;
    zip_stat_init(&stat);
    VP_REQUIRE(
        zip_stat_index(archive_, static_cast<zip_uint64_t>(index), 0, &stat) == 0 && (stat.valid & ZIP_STAT_SIZE),
        path_.string(), ": cannot read the size of record '", name, "'");
    if (expected_size >= 0) {
      VP_REQUIRE(stat.size == static_cast<zip_uint64_t>(expected_size), path_.string(), ": record '", name, "' holds ",
                 stat.size, " bytes but the pickle describes ", expected_size);
    }
    // torch stores records uncompressed: one cannot hold more bytes than the archive. A compressed one must lie
    // inside the archive and not claim an absurd expansion (zip bomb). Checked before the buffer is allocated.
    const bool compressed =
        (stat.valid & ZIP_STAT_COMP_METHOD) && (stat.valid & ZIP_STAT_COMP_SIZE) && stat.comp_method != ZIP_CM_STORE;
    if (compressed) {
      VP_REQUIRE(stat.comp_size <= archive_bytes_ && stat.size <= stat.comp_size * 1100 + (1u << 20), path_.string(),
                 ": record '", name, "' claims to expand from ", stat.comp_size, " to ", stat.size,
                 " bytes in an archive of ", archive_bytes_);
    } else {
      VP_REQUIRE(stat.size <= archive_bytes_, path_.string(), ": record '", name, "' claims ", stat.size,
                 " bytes, more than the whole archive (", archive_bytes_, " bytes)");
    }
    StorageBytes bytes = allocate_storage(stat.size, concat("record '", name, "'"));
    zip_file_t* file = zip_fopen_index(archive_, static_cast<zip_uint64_t>(index), 0);
    VP_REQUIRE(file != nullptr, path_.string(), ": cannot open record '", name, "': ", zip_strerror(archive_));
    zip_uint64_t done = 0;
    while (done < stat.size) {
      zip_int64_t n = zip_fread(file, bytes.data.get() + done, stat.size - done);
      if (n <= 0) {
        std::string reason = n < 0 ? zip_file_strerror(file) : "unexpected end of data";
        zip_fclose(file);
        fail(path_.string(), ": cannot read record '", name, "' (truncated or corrupted?): ", reason);
      }
      done += static_cast<zip_uint64_t>(n);
    }
    // Reading past the end makes libzip check the CRC.
    char probe;
    zip_int64_t extra = zip_fread(file, &probe, 1);
    std::string reason = extra < 0 ? zip_file_strerror(file) : "";
    zip_fclose(file);
    VP_REQUIRE(extra == 0, path_.string(), ": record '", name,
               "' is corrupted: ", extra < 0 ? reason : std::string("longer than its stated size"));
    return bytes;
  }

 private:
  std::filesystem::path path_;
  uint64_t archive_bytes_ = 0;
  zip_t* archive_ = nullptr;
};

class ZipStorageSource : public StorageSource {
 public:
  ZipStorageSource(const ZipArchive& archive, std::string prefix) : archive_(archive), prefix_(std::move(prefix)) {}
  StorageBytes load(const PickledStorage& storage) override {
    int64_t bytes = 0;
    VP_REQUIRE(!multiply_overflows(storage.numel, static_cast<int64_t>(dtype_size(storage.dtype)), &bytes), "storage '",
               storage.key, "' is impossibly large");
    return archive_.read(prefix_ + "data/" + storage.key, bytes);
  }

 private:
  const ZipArchive& archive_;
  std::string prefix_;
};

TensorMap read_zip_checkpoint(const std::filesystem::path& path) {
  ZipArchive archive(path);
  // Every record sits under one top-level folder whose name torch picks ("archive", or the file's stem).
  std::string prefix;
  int found = 0;
  for (const std::string& name : archive.names()) {
    if (name == "data.pkl" || (name.ends_with("/data.pkl") && name.find('/') == name.size() - 9)) {
      prefix = name.substr(0, name.size() - 8);
      ++found;
    }
  }
  VP_REQUIRE(found == 1, path.string(),
             ": a zip archive but not a PyTorch checkpoint (expected one <folder>/data.pkl, found ", found, ")");
  if (archive.contains(prefix + "byteorder")) {
    StorageBytes order = archive.read(prefix + "byteorder");
    std::string text(reinterpret_cast<const char*>(order.data.get()), order.size);
    VP_REQUIRE(text == "little", path.string(), ": saved on a ", text,
               "-endian machine; only little-endian is supported");
  }
  StorageBytes pickle_bytes = archive.read(prefix + "data.pkl");
  std::string source = concat(path.string(), ": ", prefix, "data.pkl");
  PickleResult pickle = restricted_unpickle(
      std::string_view(reinterpret_cast<const char*>(pickle_bytes.data.get()), pickle_bytes.size), source);
  ZipStorageSource storages(archive, prefix);
  return collect_state_dict(path.string(), pickle, storages);
}

// --- the legacy format: magic, protocol, sys_info, the state dict, storage keys, then each storage's bytes ---

class LegacyStorageSource : public StorageSource {
 public:
  LegacyStorageSource(std::string source, std::map<std::string, StorageBytes> storages)
      : source_(std::move(source)), storages_(std::move(storages)) {}
  StorageBytes load(const PickledStorage& storage) override {
    auto it = storages_.find(storage.key);
    VP_REQUIRE(it != storages_.end(), source_, ": storage '", storage.key, "' is not in the file");
    return it->second;
  }

 private:
  std::string source_;
  std::map<std::string, StorageBytes> storages_;
};

TensorMap read_legacy_checkpoint(const std::filesystem::path& path, const MappedFile& file) {
  std::string source = path.string();
  std::string_view rest(reinterpret_cast<const char*>(file.data()), file.size());
  auto next_pickle = [&](const char* what) {
    PickleResult result = restricted_unpickle(rest, concat(source, " (legacy format, ", what, ")"));
    rest.remove_prefix(result.consumed);
    return result;
  };
  PickleResult magic = next_pickle("magic number");
  static const unsigned char kMagic[] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9,
                                         0x20, 0x6a, 0xa8, 0x50, 0x19};  // 0x1950a86a20f9469cfc6c
  const PickleObject& magic_value = magic.root_object();
  VP_REQUIRE(magic_value.kind == PickleObject::Kind::big_integer &&
                 magic_value.text == std::string(reinterpret_cast<const char*>(kMagic), sizeof(kMagic)),
             source, ": not a PyTorch checkpoint (a pickle without torch's magic number)");
  PickleResult protocol = next_pickle("protocol version");
  VP_REQUIRE(protocol.root_object().kind == PickleObject::Kind::integer && protocol.root_object().integer == 1001,
             source, ": unsupported legacy protocol version (expected 1001)");
  PickleResult sys_info = next_pickle("sys_info");
  const PickleObject& info = sys_info.root_object();
  VP_REQUIRE(info.kind == PickleObject::Kind::dict, source, ": malformed sys_info");
  for (size_t i = 0; i + 1 < info.items.size(); i += 2) {
    const PickleObject& key = sys_info.at(info.items[i]);
    const PickleObject& value = sys_info.at(info.items[i + 1]);
    if (key.kind == PickleObject::Kind::string && key.text == "little_endian") {
      VP_REQUIRE(value.kind == PickleObject::Kind::boolean && value.integer == 1, source,
                 ": saved on a big-endian machine; only little-endian is supported");
    }
  }
  PickleResult state = next_pickle("state dict");
  PickleResult keys = next_pickle("storage keys");
  VP_REQUIRE(keys.root_object().kind == PickleObject::Kind::list, source, ": malformed storage key list");

  // The element size of each key comes from the state dict's persistent ids.
  std::map<std::string, DType> key_dtype;
  for (const PickledStorage& storage : state.storages) key_dtype[storage.key] = storage.dtype;
  std::map<std::string, StorageBytes> storages;
  for (PickleId id : keys.root_object().items) {
    const PickleObject& key = keys.at(id);
    VP_REQUIRE(key.kind == PickleObject::Kind::string, source, ": a storage key is not a string");
    auto dtype = key_dtype.find(key.text);
    VP_REQUIRE(dtype != key_dtype.end(), source, ": storage '", key.text, "' is listed but no tensor uses it");
    VP_REQUIRE(rest.size() >= 8, source, ": truncated before storage '", key.text, "'");
    uint64_t count = 0;
    for (int i = 7; i >= 0; --i) count = (count << 8) | static_cast<uint8_t>(rest[static_cast<size_t>(i)]);
    rest.remove_prefix(8);
    size_t element_size = dtype_size(dtype->second);
    VP_REQUIRE(count <= rest.size() / element_size, source, ": truncated: storage '", key.text, "' needs ", count,
               " elements of ", element_size, " bytes but only ", rest.size(), " bytes remain");
    size_t size = static_cast<size_t>(count) * element_size;
    StorageBytes bytes = allocate_storage(size, concat("storage '", key.text, "'"));
    std::memcpy(bytes.data.get(), rest.data(), size);
    rest.remove_prefix(size);
    storages.emplace(key.text, std::move(bytes));
  }
  for (const PickledStorage& storage : state.storages) {
    auto it = storages.find(storage.key);
    VP_REQUIRE(it != storages.end(), source, ": storage '", storage.key, "' is used but not in the file");
    VP_REQUIRE(it->second.size == static_cast<size_t>(storage.numel) * dtype_size(storage.dtype), source, ": storage '",
               storage.key, "' holds ", it->second.size, " bytes but the pickle describes ", storage.numel,
               " elements");
  }
  LegacyStorageSource source_storages(source, std::move(storages));
  return collect_state_dict(source, state, source_storages);
}

}  // namespace

TensorMap read_pytorch_bin(const std::filesystem::path& path) {
  VP_REQUIRE(std::filesystem::is_regular_file(path), path.string(), ": no such file");
  std::shared_ptr<MappedFile> file = MappedFile::open(path);
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(file->data());
  if (file->size() >= 4 && bytes[0] == 'P' && bytes[1] == 'K' && bytes[2] == 3 && bytes[3] == 4) {
    file.reset();
    return read_zip_checkpoint(path);
  }
  if (file->size() >= 2 && bytes[0] == 0x80 && bytes[1] <= 5) return read_legacy_checkpoint(path, *file);
  if (file->size() >= 262 && std::memcmp(bytes + 257, "ustar", 5) == 0) {
    fail(path.string(), ": a tar-format checkpoint (PyTorch < 0.4) is not supported; re-save it with a newer torch");
  }
  fail(path.string(), ": not a PyTorch checkpoint (neither a zip archive nor a legacy pickle)");
}

TensorMap read_pytorch_bin_index(const std::filesystem::path& index_path, StringMap* shard_of) {
  const auto names_by_shard = read_weight_index(index_path).tensors_by_shard;
  TensorMap tensors;
  for (const auto& [file, names] : names_by_shard) {
    std::filesystem::path shard_path = index_path.parent_path() / file;
    TensorMap shard = read_pytorch_bin(shard_path);
    std::set<std::string> listed(names.begin(), names.end());
    for (const std::string& name : names) {
      auto it = shard.find(name);
      VP_REQUIRE(it != shard.end(), index_path.string(), ": tensor '", name, "' is listed in ", file,
                 " but that shard does not hold it");
      tensors[name] = it->second;
      if (shard_of != nullptr) (*shard_of)[name] = file;
    }
    for (const auto& [name, tensor] : shard) {
      if (!listed.count(name)) warn(shard_path.string(), ": tensor '", name, "' is not in the index; ignored");
    }
  }
  return tensors;
}

}  // namespace vitpipe
