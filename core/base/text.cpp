#include "core/base/text.h"

#include "core/base/error.h"

#include <sstream>

namespace gsrq {

std::string joinInts(const std::vector<int>& values, char sep)
{
    std::string s;
    for (int x : values) {
        if (!s.empty())
            s += sep;
        s += std::to_string(x);
    }
    return s;
}

std::vector<std::string> splitTrimmed(const std::string& text)
{
    std::vector<std::string> out;
    std::stringstream ss(text);
    for (std::string item; std::getline(ss, item, ',');) {
        const auto first = item.find_first_not_of(" \t"), last = item.find_last_not_of(" \t");
        out.push_back(first == std::string::npos ? std::string() : item.substr(first, last - first + 1));
    }
    return out;
}

std::vector<int> parseIntList(const std::string& flag, const std::string& text, int atLeast)
{
    std::vector<int> out;
    for (const std::string& item : splitTrimmed(text)) {
        std::size_t used = 0;
        int v = 0;
        try {
            v = std::stoi(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used == 0 || used != item.size())
            throwInvalid(flag, ": '", item, "' is not an integer (expected a list like 16,32,64)");
        if (v < atLeast)
            throwInvalid(flag, ": ", v, " is below ", atLeast);
        out.push_back(v);
    }
    if (out.empty())
        throwInvalid(flag, ": give at least one value");
    return out;
}

std::string validUtf8(const std::string& text)
{
    std::string out;
    out.reserve(text.size());
    const auto* b = reinterpret_cast<const unsigned char*>(text.data());
    const std::size_t n = text.size();
    for (std::size_t i = 0; i < n;) {
        const unsigned char c = b[i];
        std::size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        bool ok = len > 0 && i + len <= n && !(c == 0xC0 || c == 0xC1 || c > 0xF4);
        for (std::size_t k = 1; ok && k < len; ++k)
            ok = (b[i + k] & 0xC0) == 0x80;
        if (ok && len == 3) { // no overlong forms, no surrogates
            const unsigned cp = ((c & 0x0Fu) << 12) | ((b[i + 1] & 0x3Fu) << 6);
            ok = cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF);
        }
        if (ok && len == 4) {
            const unsigned cp = ((c & 0x07u) << 18) | ((b[i + 1] & 0x3Fu) << 12);
            ok = cp >= 0x10000 && cp <= 0x10FFFF;
        }
        if (ok) {
            out.append(text, i, len);
            i += len;
        } else {
            out += "\xEF\xBF\xBD"; // U+FFFD
            ++i;
        }
    }
    return out;
}

} // namespace gsrq
