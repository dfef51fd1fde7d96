// A file that shrinks while it is memory-mapped (another process truncates or rewrites it) makes the next read of
// a vanished page raise SIGBUS, which would kill the process with no word of why. Registered mappings turn that
// into one clear line naming the file and exit code 1; a SIGBUS anywhere else goes on to the handler before us
// (or the default action), so real crashes still crash.
#pragma once

#include <cstddef>
#include <string>

namespace vitpipe {

// `size` bytes at `begin` map `path`. At most 1024 mappings are watched at once; more are simply not watched.
void watch_mapping(const void* begin, size_t size, const std::string& path);
void unwatch_mapping(const void* begin);

}  // namespace vitpipe
