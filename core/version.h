#pragma once
namespace gsrq {
inline constexpr const char* kVersion = "0.1.0";
}
