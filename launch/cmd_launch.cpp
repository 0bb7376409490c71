#include <stdexcept>
#include "launch/commands.h"
namespace trident::cli {
int cmd_launch(int, char**) { throw std::runtime_error("'launch' is not built yet"); }
}  // namespace trident::cli
