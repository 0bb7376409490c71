#include <stdexcept>
#include "launch/commands.h"
namespace trident::cli {
int cmd_data(int, char**) { throw std::runtime_error("'data' is not built yet"); }
}  // namespace trident::cli
