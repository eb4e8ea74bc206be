#include "interrupt.h"

#include <csignal>
#include <cstring>

namespace pi::cli {
namespace {

// Set by the handler, which does nothing else.
volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_sigint(int) { g_interrupted = 1; }

}  // namespace

void install_sigint_flag() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
}

bool interrupted() { return g_interrupted != 0; }

void clear_interrupt() { g_interrupted = 0; }

}  // namespace pi::cli
