#include "engine/request.h"

namespace hlx::engine {

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::kNone:
      return "none";
    case Finish::kStop:
      return "stop";
    case Finish::kLength:
      return "length";
    case Finish::kCancelled:
      return "cancelled";
    case Finish::kError:
      return "error";
  }
  return "unknown";
}

}  // namespace hlx::engine
