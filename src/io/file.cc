#include "io/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace hlx {

namespace {

Status errno_error(const std::string& what, const std::string& path, int err) {
  ErrorKind kind = err == ENOENT ? ErrorKind::kNotFound : ErrorKind::kIo;
  return make_error(kind, what, " '", path, "': ", std::strerror(err));
}

// Closes a file descriptor on scope exit.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// A read-only descriptor of a regular file (not a directory, fifo or device), and its stat.
Result<int> open_regular_file(const std::string& path, struct stat* st) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_error("cannot open", path, errno);
  Status error;
  if (::fstat(fd, st) != 0)
    error = errno_error("cannot stat", path, errno);
  else if (!S_ISREG(st->st_mode))
    error = make_error(ErrorKind::kIo, "'", path, "' is not a regular file");
  if (error.ok()) return fd;
  ::close(fd);
  return error;
}

}  // namespace

Result<std::shared_ptr<const MappedFile>> MappedFile::open(const std::string& path) {
  struct stat st;
  HLX_ASSIGN_OR_RETURN(int fd, open_regular_file(path, &st));
  FdCloser closer{fd};

  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = size_t(st.st_size);
  if (file->size_ == 0) return std::shared_ptr<const MappedFile>(std::move(file));  // mmap rejects length 0
  void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) return errno_error("cannot mmap", path, errno);
  file->data_ = static_cast<const uint8_t*>(p);
  return std::shared_ptr<const MappedFile>(std::move(file));
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::release_pages(const void* p, size_t bytes) const {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (uintptr_t(p) + page - 1) / page * page, hi = (uintptr_t(p) + bytes) / page * page;
  if (hi <= lo || lo < uintptr_t(data_) || hi > uintptr_t(data_) + size_) return;
  madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

Result<std::string> read_file(const std::string& path, size_t max_bytes) {
  struct stat st;
  HLX_ASSIGN_OR_RETURN(int fd, open_regular_file(path, &st));
  FdCloser closer{fd};
  if (size_t(st.st_size) > max_bytes)
    return make_error(ErrorKind::kIo, "'", path, "' has ", st.st_size, " bytes, more than the limit of ", max_bytes);
  std::string bytes(size_t(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("cannot read", path, errno);
    if (n == 0)
      return make_error(ErrorKind::kIo, "'", path, "' shrank while reading: got ", done, " of ", bytes.size(),
                        " bytes");
    done += size_t(n);
  }
  return bytes;
}

Status write_file_pieces(const std::string& path, const std::string_view* pieces, size_t count) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_error("cannot create", tmp, errno);
  for (size_t i = 0; i < count; ++i) {
    const char* p = pieces[i].data();
    size_t left = pieces[i].size();
    while (left > 0) {
      ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        return errno_error("cannot write", tmp, err);
      }
      p += n;
      left -= size_t(n);
    }
  }
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return errno_error("cannot close", tmp, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return errno_error("cannot rename to", path, err);
  }
  return ok_status();
}

Status write_file(const std::string& path, std::string_view bytes) { return write_file_pieces(path, &bytes, 1); }

}  // namespace hlx
