#pragma once
// A read-only memory mapping of a whole file. Multi-GB dumps open at once: pages are read on
// demand by the OS. Not copyable; shared between tensor views through std::shared_ptr.
// Thread-safety: immutable after construction, safe to read from any thread.

#include <cstddef>
#include <memory>
#include <string>

namespace gsrq {

class MappedFile {
public:
    // Throws Error(InvalidInput) naming the path when the file cannot be opened or is empty.
    static std::shared_ptr<const MappedFile> open(const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const std::byte* data() const { return m_data; }
    std::size_t size() const { return m_size; }
    const std::string& path() const { return m_path; }

private:
    MappedFile() = default;
    std::string m_path;
    const std::byte* m_data = nullptr;
    std::size_t m_size = 0;
};

} // namespace gsrq
