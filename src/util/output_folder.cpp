#include "util/output_folder.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "util/atomic_file.h"
#include "util/error.h"

namespace vitpipe {

namespace fs = std::filesystem;

namespace {

bool listed(const std::string& name, const std::vector<std::string>& files) {
  // NAME.tmp-...: what an interrupted atomic write of NAME left.
  return std::any_of(files.begin(), files.end(),
                     [&](const std::string& f) { return name == f || name.starts_with(f + ".tmp-"); });
}

}  // namespace

OutputFolder check_output_folder(const fs::path& dir, const std::string& command, const std::string& flag, bool force,
                                 const std::vector<std::string>& known_files) {
  OutputFolder folder;
  folder.dir = dir;
  folder.command = command;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return folder;
  VP_REQUIRE(fs::is_directory(dir, ec), flag, " ", dir.string(), ": exists and is not a folder");

  std::string marked_by;  // the command the marker names, if any
  bool fixed_set = false;
  if (std::ifstream in(dir / kOutputMarkerName); in) {
    const nlohmann::json marker = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (marker.is_object() && marker.value("command", nlohmann::json()).is_string()) {
      marked_by = marker["command"].get<std::string>();
      if (marker.contains("files") && marker["files"].is_array()) {
        fixed_set = true;
        for (const auto& f : marker["files"])
          if (f.is_string()) folder.previous_files.push_back(f.get<std::string>());
      }
    }
  }
  std::string foreign;  // the first entry that is not this command's
  bool empty = true;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == kOutputMarkerName) continue;
    empty = false;
    const bool ours = marked_by == command ? (!fixed_set || listed(name, folder.previous_files))
                                           : marked_by.empty() && !known_files.empty() && listed(name, known_files);
    if (!ours && (foreign.empty() || name < foreign)) foreign = name;  // the same example on every file system
  }
  VP_REQUIRE(!ec, flag, " ", dir.string(), ": cannot list the folder (", ec.message(), ")");
  if (empty && marked_by.empty()) return folder;
  if (foreign.empty()) {
    folder.previous = true;
    if (marked_by.empty()) folder.previous_files = known_files;
    return folder;
  }
  const std::string holds = !marked_by.empty() && marked_by != command
                                ? concat("holds the output of vitpipe ", marked_by)
                                : concat("holds files vitpipe ", command, " did not write (", foreign, ")");
  VP_REQUIRE(force, flag, " ", dir.string(), ": ", holds,
             "; choose a new or empty folder, or pass --force to write into it anyway");
  folder.forced = true;
  return folder;
}

void remove_previous_output(const OutputFolder& folder) {
  if (!folder.previous) return;
  for (const auto& entry : fs::directory_iterator(folder.dir)) {
    const std::string name = entry.path().filename().string();
    if (name != kOutputMarkerName && listed(name, folder.previous_files)) fs::remove_all(entry.path());
  }
}

void create_output_folder(const OutputFolder& folder) {
  std::error_code ec;
  fs::create_directories(folder.dir, ec);
  VP_REQUIRE(!ec, folder.dir.string(), ": cannot create the folder (", ec.message(), ")");
}

std::vector<std::string> output_folder_files(const fs::path& dir) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename() != kOutputMarkerName) files.push_back(entry.path().filename().string());
  std::sort(files.begin(), files.end());
  return files;
}

void mark_output_folder(const OutputFolder& folder, const std::vector<std::string>& files) {
  if (folder.forced) return;
  nlohmann::json marker = {{"command", folder.command}};
  if (!files.empty()) marker["files"] = files;
  write_text_file_atomically(folder.dir / kOutputMarkerName, marker.dump(2) + "\n");
}

}  // namespace vitpipe
