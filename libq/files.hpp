// Files q opens or creates by name beside a queue file or a target the user
// named (FILE-lock, FILE-wake, FILE.creating, TARGET.tmp-PID). Whoever may
// write such a directory may plant a symbolic link, a hard link or a FIFO at
// those names; q running as another user (root, a service) must then neither
// write through it nor create the file it points to. So these files are never
// opened through a link, and anything but a regular file with one name is
// refused with an Error(Io) that names the file and says what is wrong.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

namespace q::files {

std::string parent_dir(const std::string& path);  // "." for a bare name
std::string base_name(const std::string& path);

// Opens `path` read-write (or read-only), creating it with `mode` & ~umask
// when missing (with `create`). Never follows a symbolic link, never opens a
// device or FIFO, and refuses a file with more than one hard link. Returns -1
// with errno set for errors of access (EACCES, EPERM, EROFS, ENOENT), which
// the caller words; throws Error(Io) for a file that is not q's to use.
int open_companion(const std::string& path, bool writable, bool create, mode_t mode = 0666);

// Throws Error(Io) when `path` exists and is not a regular file with one link
// (looked at without following a link).
void refuse_unsafe_companion(const std::string& path);

// A temporary file beside `target`, TARGET.tmp-PID, for replacing `target`
// by rename: created exclusively with `mode` (never through a link) and
// flock'ed for as long as this process lives, so that a later call can tell
// a leftover of a killed process from a file in use. Returns the descriptor,
// or -1 with errno set.
int create_temp_beside(const std::string& target, mode_t mode, std::string& temp_path);

// Removes leftovers TARGET.tmp-PID of processes that are gone: only names of
// exactly that form, only regular files owned by this user, only when no
// process of that pid runs and nobody holds the file's lock. Quiet: a file
// that cannot be removed is left alone.
void remove_stale_temps(const std::string& target);

// Writes every byte of `data` to `fd`, again after EINTR and short writes.
// False with errno set when a write failed.
bool write_all(int fd, std::string_view data);

// A file that replaces `target` whole or not at all: written under a
// temporary name beside it (create_temp_beside, after remove_stale_temps) and
// renamed over it by commit(). Destroyed uncommitted (an error, an
// exception), the temporary file is removed and `target` is as it was.
class AtomicFile {
 public:
  // fd() < 0 with errno set when the temporary file could not be made.
  AtomicFile(std::string target, mode_t mode);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  int fd() const { return fd_; }
  const std::string& target() const { return target_; }
  bool write(std::string_view data) { return write_all(fd_, data); }
  // With `durable`, syncs the file before the rename and the directory after.
  // False with errno set when it failed; the temporary file is then gone.
  bool commit(bool durable);

 private:
  void abandon();
  std::string target_;
  std::string temporary_;
  int fd_ = -1;
};

}  // namespace q::files
