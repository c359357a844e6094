#include "core/io/safetensors.h"

#include "core/base/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/stat.h>
#include <unistd.h>

namespace gsrq {

namespace {

// Headers beyond this are not dumps but damage; refusing them avoids a huge allocation.
constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20;

bool mulOverflows(std::uint64_t a, std::uint64_t b, std::uint64_t& out)
{
    return __builtin_mul_overflow(a, b, &out);
}

} // namespace

SafetensorsFile readSafetensors(const std::string& path)
{
    auto file = MappedFile::open(path);
    const std::size_t size = file->size();
    if (size < 8)
        throwInvalid(path, ": truncated safetensors file (", size, " bytes, the header length alone needs 8)");
    std::uint64_t headerLen = 0;
    std::memcpy(&headerLen, file->data(), 8);
    if (headerLen > kMaxHeaderBytes)
        throwInvalid(path, ": safetensors header length ", headerLen, " is implausible (limit ", kMaxHeaderBytes,
                     " bytes); not a safetensors file?");
    if (headerLen > size - 8)
        throwInvalid(path, ": truncated: header says ", headerLen, " bytes of JSON but only ", size - 8,
                     " bytes follow");

    nlohmann::json header;
    try {
        header = nlohmann::json::parse(reinterpret_cast<const char*>(file->data() + 8),
                                       reinterpret_cast<const char*>(file->data() + 8 + headerLen));
    } catch (const nlohmann::json::exception& e) {
        throwInvalid(path, ": safetensors header is not valid JSON: ", e.what());
    }
    if (!header.is_object())
        throwInvalid(path, ": safetensors header is not a JSON object");

    SafetensorsFile out;
    out.path = path;
    const std::byte* dataStart = file->data() + 8 + headerLen;
    const std::uint64_t dataSize = size - 8 - headerLen;

    for (auto it = header.begin(); it != header.end(); ++it) {
        const std::string& name = it.key();
        const auto& v = it.value();
        if (name == "__metadata__") {
            if (!v.is_object())
                throwInvalid(path, ": __metadata__ is not a JSON object");
            for (auto m = v.begin(); m != v.end(); ++m) {
                if (!m.value().is_string())
                    throwInvalid(path, ": __metadata__ value '", m.key(), "' is not a string");
                out.metadata[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        const std::string where = cat(path, ": tensor '", name, "'");
        if (!v.is_object())
            throwInvalid(where, ": entry is not a JSON object");
        if (!v.contains("dtype") || !v["dtype"].is_string())
            throwInvalid(where, ": missing string field 'dtype'");
        if (!v.contains("shape") || !v["shape"].is_array())
            throwInvalid(where, ": missing array field 'shape'");
        if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
            throwInvalid(where, ": missing field 'data_offsets' [begin, end]");

        const std::string dt = v["dtype"].get<std::string>();
        const auto dtype = dtypeFromName(dt);
        if (!dtype)
            throwInvalid(where, ": unknown dtype '", dt, "'");

        TensorView t;
        t.name = name;
        t.dtype = *dtype;
        t.file = file;
        std::uint64_t numel = 1;
        for (const auto& s : v["shape"]) {
            if (!s.is_number_integer() || s.get<std::int64_t>() < 0)
                throwInvalid(where, ": shape entries must be non-negative integers");
            const auto dim = s.get<std::uint64_t>();
            if (mulOverflows(numel, dim, numel))
                throwInvalid(where, ": shape overflows 64 bits");
            t.shape.push_back(static_cast<std::int64_t>(dim));
        }
        const auto& off = v["data_offsets"];
        if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
            throwInvalid(where, ": data_offsets must be non-negative integers");
        const auto begin = off[0].get<std::uint64_t>();
        const auto end = off[1].get<std::uint64_t>();
        if (begin > end)
            throwInvalid(where, ": data_offsets begin ", begin, " is after end ", end);
        if (end > dataSize)
            throwInvalid(where, ": data ends at byte ", end, " but the data section has only ", dataSize,
                         " bytes (truncated file?)");
        std::uint64_t expected = 0;
        if (mulOverflows(numel, dtypeSize(*dtype), expected) || expected != end - begin)
            throwInvalid(where, ": shape ", t.shapeString(), " × ", dtypeName(*dtype), " needs ", expected,
                         " bytes but data_offsets span ", end - begin);
        t.data = dataStart + begin;
        t.nbytes = end - begin;
        out.tensors.push_back(std::move(t));
    }

    std::sort(out.tensors.begin(), out.tensors.end(),
              [](const TensorView& a, const TensorView& b) { return a.data < b.data; });
    for (std::size_t i = 1; i < out.tensors.size(); ++i) {
        const auto& prev = out.tensors[i - 1];
        const auto& cur = out.tensors[i];
        if (cur.data < prev.data + prev.nbytes)
            throwInvalid(path, ": tensors '", prev.name, "' and '", cur.name, "' overlap in the data section");
    }
    return out;
}

TensorBlob makeFloatBlob(const std::string& name, const MatrixRF& m, DType dtype, std::vector<std::int64_t> shape)
{
    TensorBlob b;
    b.name = name;
    b.dtype = dtype;
    b.shape = shape.empty() ? std::vector<std::int64_t>{m.rows(), m.cols()} : std::move(shape);
    b.bytes = encodeFloats(m.data(), static_cast<std::size_t>(m.size()), dtype);
    return b;
}

void writeFileAtomic(const std::string& path, const std::vector<std::string_view>& parts)
{
    std::string tmp = path + ".tmp-XXXXXX";
    const int fd = ::mkstemp(tmp.data());
    if (fd < 0)
        throwInvalid(path, ": cannot create a file there: ", std::strerror(errno));
    auto failWith = [&](const char* what) {
        const int e = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        throwRuntime(path, ": ", what, ": ", std::strerror(e));
    };
    for (const auto& part : parts) {
        std::size_t done = 0;
        while (done < part.size()) {
            const ssize_t n = ::write(fd, part.data() + done, part.size() - done);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                failWith("write failed");
            }
            done += static_cast<std::size_t>(n);
        }
    }
    if (::fchmod(fd, 0644) != 0 || ::fsync(fd) != 0)
        failWith("cannot flush");
    if (::close(fd) != 0) {
        ::unlink(tmp.c_str());
        throwRuntime(path, ": close failed: ", std::strerror(errno));
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const int e = errno;
        ::unlink(tmp.c_str());
        throwRuntime(path, ": cannot move the finished file into place: ", std::strerror(e));
    }
}

void writeSafetensors(const std::string& path, const std::vector<TensorBlob>& tensors,
                      const std::map<std::string, std::string>& metadata)
{
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty())
        header["__metadata__"] = metadata;
    std::uint64_t offset = 0;
    for (const auto& t : tensors) {
        std::uint64_t numel = 1;
        for (auto s : t.shape)
            numel *= static_cast<std::uint64_t>(s);
        if (numel * dtypeSize(t.dtype) != t.bytes.size())
            throwRuntime(path, ": tensor '", t.name, "' has ", t.bytes.size(), " bytes, its shape needs ",
                         numel * dtypeSize(t.dtype));
        if (header.contains(t.name))
            throwRuntime(path, ": tensor '", t.name, "' given twice");
        header[t.name] = {
            {"dtype", dtypeName(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
        offset += t.bytes.size();
    }
    std::string json = header.dump();
    // Pad with spaces so the data section starts 8-byte aligned, as the reference writer does.
    while ((8 + json.size()) % 8 != 0)
        json.push_back(' ');
    const std::uint64_t len = json.size();
    std::string lenBytes(8, '\0');
    std::memcpy(lenBytes.data(), &len, 8);

    std::vector<std::string_view> parts{lenBytes, json};
    for (const auto& t : tensors)
        parts.emplace_back(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
    writeFileAtomic(path, parts);
}

} // namespace gsrq
