// Trident's version, recorded in checkpoints and exported models.
#pragma once

namespace trident {
inline constexpr const char* kTridentVersion = "0.1.0";
}  // namespace trident
