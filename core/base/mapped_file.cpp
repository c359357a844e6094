#include "core/base/mapped_file.h"

#include "core/base/error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gsrq {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        throwInvalid(path, ": cannot open: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        throwInvalid(path, ": cannot stat: ", std::strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        ::close(fd);
        throwInvalid(path, ": is a directory, expected a file");
    }
    if (st.st_size == 0) {
        ::close(fd);
        throwInvalid(path, ": file is empty");
    }
    void* p = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    const int e = errno;
    ::close(fd);
    if (p == MAP_FAILED)
        throwInvalid(path, ": cannot map into memory: ", std::strerror(e));
    std::shared_ptr<MappedFile> f(new MappedFile());
    f->m_path = path;
    f->m_data = static_cast<const std::byte*>(p);
    f->m_size = static_cast<std::size_t>(st.st_size);
    return f;
}

MappedFile::~MappedFile()
{
    if (m_data)
        ::munmap(const_cast<std::byte*>(m_data), m_size);
}

} // namespace gsrq
