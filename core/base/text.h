#pragma once
// Lists typed by a user, read the same by every face: "16,32,64" from a flag or a form field.

#include <limits>
#include <string>
#include <vector>

namespace gsrq {

// Comma-separated integers, spaces around each allowed; Error(InvalidInput) naming `flag` (the
// flag or the field) for an item that is not an integer or is below `atLeast`, or for no items.
std::vector<int> parseIntList(const std::string& flag, const std::string& text,
                              int atLeast = std::numeric_limits<int>::min());

} // namespace gsrq
