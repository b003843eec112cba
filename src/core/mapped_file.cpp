#include "core/mapped_file.h"

#include "core/error.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace deltabit {

MappedFile MappedFile::open(const std::string& path, std::string_view format) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat below refuses it (no effect on files).
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) fail("{}: {}: cannot open: {}", format, path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        fail("{}: {}: not a regular file", format, path);
    }
    MappedFile file;
    file.size_ = static_cast<size_t>(st.st_size);
    if (file.size_ > 0) {
        void* address = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
        const int mmap_errno = errno;
        ::close(fd);  // the mapping keeps the file alive
        if (address == MAP_FAILED) fail("{}: {}: cannot map {} bytes: {}", format, path, file.size_, std::strerror(mmap_errno));
        file.address_ = address;
    } else {
        ::close(fd);
    }
    return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : address_(std::exchange(other.address_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
    if (this != &other) {
        release();
        address_ = std::exchange(other.address_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

MappedFile::~MappedFile() { release(); }

void MappedFile::release() {
    if (address_) ::munmap(address_, size_);
    address_ = nullptr;
    size_ = 0;
}

}  // namespace deltabit
