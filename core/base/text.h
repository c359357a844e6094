#pragma once
// Lists typed by a user, read the same by every face: "16,32,64" from a flag or a form field; and
// text made valid UTF-8.

#include <limits>
#include <string>
#include <vector>

namespace gsrq {

// The items of a comma-separated list, each without the spaces and tabs around it, in order (an
// empty item stays, as ""): what every list below and the comparison's methods are read from.
std::vector<std::string> splitTrimmed(const std::string& text);

// Comma-separated integers, spaces around each allowed; Error(InvalidInput) naming `flag` (the
// flag or the field) for an item that is not an integer or is below `atLeast`, or for no items.
std::vector<int> parseIntList(const std::string& flag, const std::string& text,
                              int atLeast = std::numeric_limits<int>::min());

// The text with each byte that does not belong to a well-formed UTF-8 sequence replaced by U+FFFD:
// a model's answer cut inside a character, or stray byte tokens, made printable and JSON-safe.
std::string validUtf8(const std::string& text);
// The integers written out, `sep` between them: "0,1,2" (a list of layers, as the lists above read it).
std::string joinInts(const std::vector<int>& values, char sep = ',');

} // namespace gsrq
