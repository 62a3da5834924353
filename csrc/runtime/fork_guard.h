#pragma once
// A child forked after the runtime started has none of its worker threads
// (fork() copies only the calling thread), so device work there would hang.

namespace simhpu {

// Called when the first worker starts: from then on a fork() cannot carry the runtime.
void watch_for_fork();

// True in a child forked after the runtime started.
bool in_bad_fork();
// Raises a clear error (use multiprocessing's 'spawn') in such a child.
void check_not_forked();

} // namespace simhpu
