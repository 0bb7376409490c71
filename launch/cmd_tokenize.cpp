#include <stdexcept>
#include "launch/commands.h"
namespace trident::cli {
int cmd_tokenize(int, char**) { throw std::runtime_error("'tokenize' is not built yet"); }
}  // namespace trident::cli
