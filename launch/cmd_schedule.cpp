#include <stdexcept>
#include "launch/commands.h"
namespace trident::cli {
int cmd_schedule(int, char**) { throw std::runtime_error("'schedule' is not built yet"); }
}  // namespace trident::cli
