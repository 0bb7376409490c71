// A free TCP port (pure POSIX), for whatever must hand a rendezvous port to
// ranks it starts: the launcher's --master-port 0, `trident plan profile`'s
// pipelined run.
#pragma once

namespace trident {

// Binds a TCP socket to port 0 and returns the port the kernel chose. The port
// is free now; another process could still take it before rank 0 binds it.
// Throws std::runtime_error naming the failed call and errno's text.
int pick_free_port();

}  // namespace trident
