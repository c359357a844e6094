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

} // namespace gsrq
