#include "interrupt.h"

#include <csignal>

#include "core/os.h"

namespace pi::cli {
namespace {

// Set by the handler, which does nothing else.
volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_sigint(int) { g_interrupted = 1; }

}  // namespace

void install_sigint_flag() { os::on_interrupt(on_sigint); }

bool interrupted() { return g_interrupted != 0; }

void clear_interrupt() { g_interrupted = 0; }

}  // namespace pi::cli
