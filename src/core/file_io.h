// Files the user names: written atomically, read only when they are regular files.
//
// Every command that writes a file the user named (/save, convert -o, snapshots, GGUF and safetensors
// writers) goes through AtomicFile, so none of them can clobber what is not a regular file:
//   - a target that exists and is not a regular file (a device such as /dev/null or /dev/full, a FIFO,
//     a socket, a folder) is refused before anything is written: renaming over it would replace a
//     device node with a plain file (as root) or fail late after all the work;
//   - a symbolic link is followed: its target is replaced and the link stays;
//   - the bytes go to a private temporary file beside the target (same folder, so the rename is atomic;
//     created exclusively, so it never reuses an existing file), which is fsync'ed and renamed over the
//     target only on commit(); the folder is fsync'ed after the rename. A failure or an AtomicFile that
//     is never committed removes the temporary file and leaves the target as it was.
// Every message names the user's path, never the temporary one.
//
// read_regular_file refuses what is not a regular file before opening it (opening a FIFO for reading
// blocks until a writer comes; reading a folder fails inside the stream library).
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace deltabit {

// Error unless `path` can be the target of an atomic write: it is a regular file (or a link to one) or
// does not exist yet, and its folder exists. `what` prefixes the message ("save", "convert").
void check_replaceable(const std::filesystem::path& path, std::string_view what);

// Error unless `path` is an existing regular file (or a link to one); `hint` is appended to a
// "no such file" message.
void check_readable_file(const std::filesystem::path& path, std::string_view what, std::string_view hint = {});

class AtomicFile {
public:
    // Checks the target (check_replaceable) and creates the temporary file.
    AtomicFile(const std::filesystem::path& target, std::string_view what);
    ~AtomicFile();  // removes the temporary file unless committed
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;

    void write(const void* data, size_t bytes);
    void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
    // fsync + close the temporary file without renaming it (so it can be re-read and checked first,
    // as convert does); commit() calls it if needed.
    void finish_writing();
    // The temporary file: to hand to code that writes or re-reads by path. Messages should name target().
    const std::filesystem::path& temporary() const { return temporary_; }
    const std::filesystem::path& target() const { return target_; }
    // `message` with every mention of the temporary file replaced by the target's name.
    std::string name_target_in(std::string message) const;
    // Renames the temporary file over the target. The target is checked again first: something that
    // appeared there while writing (a FIFO, a folder) is refused, not replaced.
    void commit();

private:
    std::filesystem::path target_;
    std::filesystem::path temporary_;
    std::string what_;
    int fd_ = -1;
    bool committed_ = false;
};

// One-shot AtomicFile: the whole of `bytes`, then commit.
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes, std::string_view what);

// The whole of a regular file (check_readable_file first).
std::string read_regular_file(const std::filesystem::path& path, std::string_view what, std::string_view hint = {});

}  // namespace deltabit
