#include "core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace braid::files {

FILE* openOutput(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return nullptr;
  FILE* f = fdopen(fd, "w");
  if (f == nullptr) {
    const int err = errno;
    close(fd);
    errno = err;
  }
  return f;
}

ReadResult readRegular(const std::string& path, size_t maxBytes, std::string* text, std::string* why) {
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *why = strerror(errno);
    return ReadResult::kAbsent;
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    *why = std::string("cannot stat it: ") + strerror(errno);
    return ReadResult::kRefused;
  }
  if (!S_ISREG(st.st_mode)) {
    *why = S_ISFIFO(st.st_mode)  ? "it is a FIFO, not a regular file"
           : S_ISDIR(st.st_mode) ? "it is a directory, not a regular file"
           : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "it is a device, not a regular file"
                                                        : "it is not a regular file";
    return ReadResult::kRefused;
  }
  text->clear();
  char buf[65536];
  for (;;) {  // (the size read, not st_size: the file may grow meanwhile)
    const ssize_t got = read(fd, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      *why = std::string("cannot read it: ") + strerror(errno);
      return ReadResult::kRefused;
    }
    if (got == 0) return ReadResult::kRead;
    if (text->size() + static_cast<size_t>(got) > maxBytes) {
      *why = "it is larger than " + std::to_string(maxBytes) + " bytes";
      text->clear();
      return ReadResult::kRefused;
    }
    text->append(buf, static_cast<size_t>(got));
  }
}

}  // namespace braid::files
