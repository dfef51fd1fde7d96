// The one overwrite rule of every command that writes a folder (export, train, explain, data prepare, init): it
// writes into a new or empty folder, into its own previous output, or, with --force, into any folder. Anything else
// is refused with one line naming the folder and the choices, before any work is done.
//
// "Its own previous output" is decided by a marker file, .vitpipe-output, that the command writes last: the command
// that wrote the folder and, for commands whose output is a fixed set of files, their names. A folder counts as the
// command's own when its marker names that command and it holds nothing the marker does not list (temporaries of an
// interrupted write, NAME.tmp-..., included). A --force write into another folder leaves no marker: files vitpipe
// did not write never become "its own".
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace vitpipe {

inline constexpr const char* kOutputMarkerName = ".vitpipe-output";

struct OutputFolder {
  std::filesystem::path dir;
  std::string command;                      // "export", "train", ...: what the marker records
  bool previous = false;                    // holds this command's own previous output
  bool forced = false;                      // holds other files, written into with --force
  std::vector<std::string> previous_files;  // what the previous output listed (empty: not a fixed set)
};

// Checks `dir` for `command` (flag: how the user named it, e.g. "--out"). known_files: names a previous output of
// the command may hold without a marker (written before markers existed); such a folder counts as its own.
OutputFolder check_output_folder(const std::filesystem::path& dir, const std::string& command, const std::string& flag,
                                 bool force, const std::vector<std::string>& known_files = {});

// Removes what the previous output listed (for a command that replaces its output rather than adding to it).
void remove_previous_output(const OutputFolder& folder);

// Creates the folder (and its parents) if needed.
void create_output_folder(const OutputFolder& folder);

// Records the folder as `command`'s output holding `files` (empty: not a fixed set), atomically. Not after a
// --force write into a folder holding other files.
void mark_output_folder(const OutputFolder& folder, const std::vector<std::string>& files = {});

// The names the folder holds now, its marker left out: a command whose files vary (shards) records them so.
std::vector<std::string> output_folder_files(const std::filesystem::path& dir);

}  // namespace vitpipe
