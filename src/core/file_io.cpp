#include "core/file_io.h"

#include "core/error.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <system_error>

namespace deltabit {
namespace {

namespace fs = std::filesystem;

// "a character device" etc.: what a non-regular file is, for messages.
std::string_view kind_of(const fs::file_status& status) {
    switch (status.type()) {
        case fs::file_type::directory: return "a folder";
        case fs::file_type::character: return "a character device";
        case fs::file_type::block: return "a block device";
        case fs::file_type::fifo: return "a FIFO (named pipe)";
        case fs::file_type::socket: return "a socket";
        default: return "not a regular file";
    }
}

// The file an atomic write replaces: a link's final target, so the link survives the rename.
fs::path resolve_target(const fs::path& path) {
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(path, ec))) return path;
    const fs::path resolved = fs::weakly_canonical(path, ec);
    return ec ? path : resolved;
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

void check_replaceable(const fs::path& path, std::string_view what) {
    if (path.empty()) fail("{}: the file name is empty", what);
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (fs::exists(status)) {
        if (!fs::is_regular_file(status))
            fail("{}: {} is {}, not a regular file; give the name of a file to write", what, path.string(),
                 kind_of(status));
        return;
    }
    if (fs::is_symlink(fs::symlink_status(path, ec))) return;  // a dangling link: its target gets created
    const fs::path parent = path.has_parent_path() ? path.parent_path() : fs::path(".");
    if (!fs::is_directory(parent, ec))
        fail("{}: cannot write {}: folder {} does not exist", what, path.string(), parent.string());
}

void check_readable_file(const fs::path& path, std::string_view what, std::string_view hint) {
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (!fs::exists(status)) fail("{}: {}: no such file{}{}", what, path.string(), hint.empty() ? "" : "; ", hint);
    if (!fs::is_regular_file(status))
        fail("{}: {} is {}, not a regular file; give the name of a file to read", what, path.string(), kind_of(status));
}

AtomicFile::AtomicFile(const fs::path& target, std::string_view what) : target_(target), what_(what) {
    check_replaceable(target_, what_);
    const fs::path real = resolve_target(target_);
    static std::atomic<unsigned> counter{0};
    // Hidden, beside the target, unique to this process and call; O_EXCL never reuses an existing file.
    temporary_ = real.parent_path() /
                 fmt::format(".{}.deltabit-{}-{}.tmp", real.filename().string(), ::getpid(), counter++);
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("{}: cannot write {}: {}", what_, target_.string(), errno_text());
}

AtomicFile::~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) {
        std::error_code ignored;
        fs::remove(temporary_, ignored);
    }
}

void AtomicFile::write(const void* data, size_t bytes) {
    if (fd_ < 0) fail("{}: {}: written after it was finished", what_, target_.string());
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
        const ssize_t k = ::write(fd_, p, bytes);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) fail("{}: cannot write {}: {}", what_, target_.string(), k < 0 ? errno_text() : "no progress");
        p += k;
        bytes -= size_t(k);
    }
}

void AtomicFile::finish_writing() {
    if (fd_ < 0) return;
    // fsync, then close: the data is on disk before the rename makes it visible.
    const int fd = fd_;
    fd_ = -1;
    if (::fsync(fd) != 0) {
        const std::string reason = errno_text();
        ::close(fd);
        fail("{}: cannot write {}: {}", what_, target_.string(), reason);
    }
    if (::close(fd) != 0) fail("{}: cannot write {}: {}", what_, target_.string(), errno_text());
}

void AtomicFile::commit() {
    finish_writing();
    check_replaceable(target_, what_);
    const fs::path real = resolve_target(target_);
    std::error_code ec;
    fs::rename(temporary_, real, ec);
    if (ec) fail("{}: cannot write {}: {}", what_, target_.string(), ec.message());
    committed_ = true;
    const fs::path folder = real.has_parent_path() ? real.parent_path() : fs::path(".");
    const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {  // a folder that cannot be opened only loses durability; the rename is done
        ::fsync(dir);
        ::close(dir);
    }
}

std::string AtomicFile::name_target_in(std::string message) const {
    const std::string temporary = temporary_.string(), target = target_.string();
    for (size_t at = message.find(temporary); at != std::string::npos; at = message.find(temporary, at + target.size()))
        message.replace(at, temporary.size(), target);
    return message;
}

void write_file_atomically(const fs::path& path, std::string_view bytes, std::string_view what) {
    AtomicFile file(path, what);
    file.write(bytes);
    file.commit();
}

std::string read_regular_file(const fs::path& path, std::string_view what, std::string_view hint) {
    check_readable_file(path, what, hint);
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open {}: {}", what, path.string(), errno_text());
    try {
        std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (in.bad()) fail("{}: cannot read {}", what, path.string());
        return bytes;
    } catch (const std::ios_base::failure& e) {  // libstdc++ throws from underflow on a read error
        fail("{}: cannot read {}: {}", what, path.string(), e.code().message());
    }
}

}  // namespace deltabit
