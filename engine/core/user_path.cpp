// Checks of the user's paths (see user_path.h).
#include "engine/core/user_path.h"

#include <filesystem>

#include "engine/core/status.h"

namespace zt {

namespace fs = std::filesystem;

namespace {
std::string lead(const std::string& what) { return what.empty() ? "" : what + ": "; }

// What is at `path`, for messages ("a file", "a directory", "a device"...).
std::string kind_of(const fs::file_status& st) {
  switch (st.type()) {
    case fs::file_type::regular: return "a file";
    case fs::file_type::directory: return "a directory";
    case fs::file_type::block:
    case fs::file_type::character: return "a device";
    case fs::file_type::fifo: return "a pipe";
    case fs::file_type::socket: return "a socket";
    default: return "not a regular file";
  }
}

// The status behind `path` (following symlinks); UserError for a symlink loop or an unreadable
// path. not_found when nothing is there.
fs::file_status status_of(const std::string& path, const std::string& what) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec && st.type() != fs::file_type::not_found)
    user_error("{}{}: {}", lead(what), path, ec.message());  // "Too many levels of symbolic links", EACCES
  return st;
}
}  // namespace

void check_dir_arg(const std::string& path, const std::string& what, bool create) {
  const fs::file_status st = status_of(path, what);
  if (st.type() == fs::file_type::directory) return;
  if (st.type() != fs::file_type::not_found) user_error("{}{} is {}, not a directory", lead(what), path, kind_of(st));
  if (!create) return;
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) user_error("{}{}: cannot create it: {}", lead(what), path, ec.message());
}

void check_output_file(const std::string& path, const std::string& what) {
  const fs::file_status st = status_of(path, what);
  if (st.type() != fs::file_type::not_found && st.type() != fs::file_type::regular)
    user_error("{}{} is {}, not a file ztrain can write", lead(what), path, kind_of(st));
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && status_of(parent.string(), what).type() != fs::file_type::directory)
    user_error("{}{}: {} is not an existing directory", lead(what), path, parent.string());
}

void check_input_file(const std::string& path, const std::string& what) {
  const fs::file_status st = status_of(path, what);
  if (st.type() == fs::file_type::not_found) user_error("{}{} does not exist", lead(what), path);
  if (st.type() != fs::file_type::regular) user_error("{}{} is {}, not a regular file", lead(what), path, kind_of(st));
}

}  // namespace zt
