#pragma once
// Shared by the fuzz targets: inputs reach the readers as files, through the same entry points the
// CLI and the app call (KvDump::open, readCodebookFile, loadLlama2cModel, ...), in a scratch
// directory of this process (on /dev/shm when it exists). Errors the readers raise (gsrq::Error) are
// the expected outcome of bad input; anything else escapes and the fuzzer reports it.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gsrq::fuzz {

// This process's scratch directory (created once, removed at exit).
const std::string& scratchDir();

// Writes bytes to scratchDir()/name, replacing it; returns the path.
std::string writeInput(const std::string& name, std::string_view bytes);

// Removes every file in scratchDir() (between inputs of directory targets).
void clearScratch();

// Draws values from the fuzzer's bytes, front to back; zeros once they run out. A small stand-in for
// LLVM's FuzzedDataProvider that also builds with GCC (the replay runners of the test suite).
class ByteSource {
public:
    ByteSource(const std::uint8_t* data, std::size_t size) : m_data(data), m_size(size) {}
    std::uint64_t u64()
    {
        std::uint64_t v = 0;
        const std::size_t n = std::min<std::size_t>(8, m_size - m_pos);
        std::memcpy(&v, m_data + m_pos, n);
        m_pos += n;
        return v;
    }
    std::uint8_t byte() { return m_pos < m_size ? m_data[m_pos++] : 0; }
    // An integer in [lo, hi].
    std::int64_t range(std::int64_t lo, std::int64_t hi)
    {
        const std::uint64_t span = std::uint64_t(hi) - std::uint64_t(lo);
        return span == UINT64_MAX ? std::int64_t(u64()) : lo + std::int64_t(u64() % (span + 1));
    }
    bool coin() { return byte() & 1; }
    template <class T> const T& pick(std::span<const T> v)
    {
        return v[std::size_t(range(0, std::int64_t(v.size()) - 1))];
    }
    template <class T, std::size_t N> const T& pick(const T (&v)[N]) { return v[std::size_t(range(0, N - 1))]; }
    std::string bytes(std::size_t n)
    {
        n = std::min(n, m_size - m_pos);
        std::string s(reinterpret_cast<const char*>(m_data + m_pos), n);
        m_pos += n;
        return s;
    }
    std::size_t remaining() const { return m_size - m_pos; }

private:
    const std::uint8_t* m_data;
    std::size_t m_size;
    std::size_t m_pos = 0;
};

// Values that break size arithmetic: zero, one, around 2^31, 2^32 and 2^63, and the largest.
inline constexpr std::int64_t kHostileSizes[] = {0,
                                                 1,
                                                 2,
                                                 3,
                                                 4,
                                                 7,
                                                 8,
                                                 16,
                                                 255,
                                                 256,
                                                 257,
                                                 65536,
                                                 (std::int64_t(1) << 31) - 1,
                                                 std::int64_t(1) << 31,
                                                 std::int64_t(1) << 32,
                                                 (std::int64_t(1) << 32) + 1,
                                                 std::int64_t(1) << 40,
                                                 std::int64_t(1) << 62,
                                                 INT64_MAX,
                                                 -1};

// Floats that break arithmetic: zeros, NaN, both infinities, the largest, the smallest subnormal.
inline const float kHostileFloats[] = {
    0.0f, 1.0f, -2.5f, __builtin_nanf(""), __builtin_inff(), -__builtin_inff(), 3.40282347e38f, 1.40129846e-45f};

// Bytes per element of a safetensors dtype name (1 for names that are not dtypes).
std::int64_t dtypeBytes(const std::string& dtype);

// The bytes a tensor of this dtype and shape needs, where that is a sane number (≤ 64 KB); 16 for
// hostile shapes (negative, overflowing, huge), so that the data section stays small.
std::int64_t dataBytes(const std::string& dtype, const std::vector<std::int64_t>& shape);

// A safetensors file: u64 header length, header JSON text, data.
std::string safetensorsBytes(const std::string& headerJson, std::string_view data);

} // namespace gsrq::fuzz

namespace gsrq::fuzz {
// What the CLI does with a dump it opens: every tensor converted for clustering (rows with NaN or
// Inf dropped), and the gradient weights of keys and values where gradients are present.
void exerciseDump(const std::string& path);
// What `gsrq eval` does with a codebooks file: read and validated, every entry's codes decoded.
void exerciseCodebooks(const std::string& path);
} // namespace gsrq::fuzz
