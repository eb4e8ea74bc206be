// Ctrl-C as a flag: after install_sigint_flag(), SIGINT only sets a flag that long loops
// (generation, perplexity chunks, batched-bench cells) poll between steps, so they stop at
// a step boundary and print what was finished. The handler is installed without SA_RESTART,
// so a blocking read (an interactive turn) returns with EINTR.
#pragma once

namespace pi::cli {

void install_sigint_flag();
bool interrupted();
void clear_interrupt();

// The exit code after an interruption (128 + SIGINT, as a shell reports it).
inline constexpr int kInterruptedExit = 130;

}  // namespace pi::cli
