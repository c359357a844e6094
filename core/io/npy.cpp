#include "core/io/npy.h"

#include "core/base/error.h"
#include "core/io/safetensors.h"

#include <cctype>
#include <cstring>
#include <filesystem>

namespace gsrq {

namespace {

// The header is a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2048, 32), }
// This parser accepts exactly that grammar: string keys; values are strings, True/False or
// tuples of integers.
class HeaderParser {
public:
    HeaderParser(std::string_view s, std::string path) : m_s(s), m_path(std::move(path)) {}

    void parse(std::string& descr, bool& fortran, std::vector<std::int64_t>& shape)
    {
        bool haveDescr = false, haveFortran = false, haveShape = false;
        expect('{');
        while (true) {
            skipSpace();
            if (peek() == '}')
                break;
            const std::string key = parseString();
            expect(':');
            skipSpace();
            if (key == "descr") {
                descr = parseString();
                haveDescr = true;
            } else if (key == "fortran_order") {
                fortran = parseBool();
                haveFortran = true;
            } else if (key == "shape") {
                shape = parseTuple();
                haveShape = true;
            } else {
                fail(cat("unexpected key '", key, "'"));
            }
            skipSpace();
            if (peek() == ',') {
                ++m_pos;
                continue;
            }
            skipSpace();
            if (peek() != '}')
                fail("expected ',' or '}'");
        }
        if (!haveDescr || !haveFortran || !haveShape)
            fail("needs the keys 'descr', 'fortran_order' and 'shape'");
    }

private:
    [[noreturn]] void fail(const std::string& what) const
    {
        throwInvalid(m_path, ": malformed .npy header (", what, " at character ", m_pos, ")");
    }
    char peek() const { return m_pos < m_s.size() ? m_s[m_pos] : '\0'; }
    void skipSpace()
    {
        while (m_pos < m_s.size() && std::isspace(static_cast<unsigned char>(m_s[m_pos])))
            ++m_pos;
    }
    void expect(char c)
    {
        skipSpace();
        if (peek() != c)
            fail(cat("expected '", c, "'"));
        ++m_pos;
    }
    std::string parseString()
    {
        skipSpace();
        const char q = peek();
        if (q != '\'' && q != '"')
            fail("expected a quoted string");
        const auto end = m_s.find(q, m_pos + 1);
        if (end == std::string_view::npos)
            fail("unterminated string");
        std::string out(m_s.substr(m_pos + 1, end - m_pos - 1));
        m_pos = end + 1;
        return out;
    }
    bool parseBool()
    {
        if (m_s.substr(m_pos, 4) == "True") {
            m_pos += 4;
            return true;
        }
        if (m_s.substr(m_pos, 5) == "False") {
            m_pos += 5;
            return false;
        }
        fail("expected True or False");
    }
    std::vector<std::int64_t> parseTuple()
    {
        std::vector<std::int64_t> out;
        expect('(');
        while (true) {
            skipSpace();
            if (peek() == ')') {
                ++m_pos;
                return out;
            }
            if (!std::isdigit(static_cast<unsigned char>(peek())))
                fail("shape entries must be non-negative integers");
            std::int64_t v = 0;
            while (std::isdigit(static_cast<unsigned char>(peek()))) {
                if (v > (std::int64_t{1} << 50))
                    fail("shape entry too large");
                v = v * 10 + (m_s[m_pos++] - '0');
            }
            out.push_back(v);
            skipSpace();
            if (peek() == ',')
                ++m_pos;
            else if (peek() != ')')
                fail("expected ',' or ')' in shape");
        }
    }

    std::string_view m_s;
    std::string m_path;
    std::size_t m_pos = 0;
};

} // namespace

TensorView readNpy(const std::string& path, const std::string& name)
{
    auto file = MappedFile::open(path);
    const auto* p = reinterpret_cast<const unsigned char*>(file->data());
    const std::size_t size = file->size();
    if (size < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0)
        throwInvalid(path, ": not a .npy file (missing the \\x93NUMPY magic)");
    const int major = p[6];
    std::size_t headerLen = 0, prefix = 0;
    if (major == 1) {
        headerLen = p[8] | (p[9] << 8);
        prefix = 10;
    } else if (major == 2 || major == 3) {
        if (size < 12)
            throwInvalid(path, ": truncated .npy header");
        headerLen = static_cast<std::size_t>(p[8]) | (static_cast<std::size_t>(p[9]) << 8) |
                    (static_cast<std::size_t>(p[10]) << 16) | (static_cast<std::size_t>(p[11]) << 24);
        prefix = 12;
    } else {
        throwInvalid(path, ": .npy format version ", major, ".", int(p[7]), " is not supported (1.0, 2.0, 3.0 are)");
    }
    if (prefix + headerLen > size)
        throwInvalid(path, ": truncated: .npy header says ", headerLen, " bytes but the file has ", size - prefix);

    std::string descr;
    bool fortran = false;
    TensorView t;
    HeaderParser(std::string_view(reinterpret_cast<const char*>(p + prefix), headerLen), path)
        .parse(descr, fortran, t.shape);

    if (descr == "<f2" || descr == "=f2")
        t.dtype = DType::F16;
    else if (descr == "<f4" || descr == "=f4")
        t.dtype = DType::F32;
    else if (descr == "<f8" || descr == "=f8")
        t.dtype = DType::F64;
    else if (!descr.empty() && descr[0] == '>')
        throwInvalid(path, ": big-endian dtype '", descr, "' is not supported; save with a little-endian dtype");
    else
        throwInvalid(path, ": dtype '", descr, "' is not supported (float16, float32 or float64 are)");
    if (fortran)
        throwInvalid(path, ": array is in Fortran order; save it with np.ascontiguousarray first");

    t.name = name.empty() ? std::filesystem::path(path).stem().string() : name;
    t.file = file;
    t.data = file->data() + prefix + headerLen;
    std::uint64_t bytes = dtypeSize(t.dtype);
    for (auto s : t.shape)
        if (__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(s), &bytes))
            throwInvalid(path, ": shape overflows 64 bits");
    const std::size_t available = size - prefix - headerLen;
    if (bytes > available)
        throwInvalid(path, ": truncated: shape ", t.shapeString(), " needs ", bytes, " bytes of data, the file has ",
                     available);
    if (bytes < available)
        throwInvalid(path, ": header and file disagree: shape ", t.shapeString(), " needs ", bytes,
                     " bytes of data, the file has ", available);
    t.nbytes = bytes;
    return t;
}

void writeNpy(const std::string& path, const MatrixRF& m, DType dtype)
{
    const char* descr = dtype == DType::F16 ? "<f2" : dtype == DType::F64 ? "<f8" : "<f4";
    if (dtype != DType::F16 && dtype != DType::F32 && dtype != DType::F64)
        throwInvalid(path, ": .npy can be written as F16, F32 or F64, not ", dtypeName(dtype));
    std::string header =
        cat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (", m.rows(), ", ", m.cols(), "), }");
    // Pad so that magic + length + header is a multiple of 64 and ends with '\n', as NumPy does.
    const std::size_t total = ((10 + header.size() + 1 + 63) / 64) * 64;
    header.append(total - 10 - header.size() - 1, ' ');
    header.push_back('\n');
    std::string prefix = "\x93NUMPY";
    prefix.push_back('\x01');
    prefix.push_back('\x00');
    prefix.push_back(static_cast<char>(header.size() & 0xff));
    prefix.push_back(static_cast<char>((header.size() >> 8) & 0xff));
    const auto data = encodeFloats(m.data(), static_cast<std::size_t>(m.size()), dtype);
    writeFileAtomic(path, {prefix, header, std::string_view(reinterpret_cast<const char*>(data.data()), data.size())});
}

} // namespace gsrq
