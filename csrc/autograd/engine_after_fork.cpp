// A child forked after a backward pass has started PyTorch's autograd device
// threads inherits their count but not the threads, and the engine's destructor
// at exit waits up to 10 s (TORCH_AUTOGRAD_SHUTDOWN_WAIT_LIMIT) for them to stop.
// Registering the device runs a backward at import, so without this every forked
// child of every program paid those 10 s. PyTorch itself releases the count in a
// forked child, but only when the child runs a backward of its own.
#include <torch/csrc/autograd/engine.h>

#include <pthread.h>

namespace simhpu {
namespace {

void forget_inherited_autograd_threads() {
  torch::autograd::Engine::get_default_engine().release_workers();
}

const bool registered = [] {
  pthread_atfork(nullptr, nullptr, &forget_inherited_autograd_threads);
  return true;
}();

} // namespace
} // namespace simhpu
