// Module identity: the SHA-256 of a canonical text describing everything that shapes an entry's
// math (schema, spec values, shapes). Loaders compare it with what they would emit themselves.
#pragma once

#include <cstdio>
#include <string>

#include "core/sha256.h"
#include "stablehlo/builder.h"

namespace hlx::models {

// Doubles in identity descriptions: 17 significant digits, so distinct values never print alike.
inline std::string identity_number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

inline void set_identity(shlo::ModuleBuilder& mb, const std::string& description) {
  mb.set_attr(shlo::kIdentityAttr, shlo::Attr::string(sha256_hex(description)));
}

}  // namespace hlx::models
