// The engine's diagnostics (loading, placement, warnings): printed on stderr unless an
// embedder sends them elsewhere. Process-wide settings (the C API's pi_log_set and
// pi_log_set_level map onto them; the Python package routes them to its `logging` module).
#pragma once

namespace pi {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, Silent = 4 };

// Messages below `level` are dropped (default Info).
void set_log_level(LogLevel level);
LogLevel log_level();

// Where messages go instead of stderr: sink(level, message, user) with the message without
// prefix or final newline (a line, or a table of lines), from whichever thread logged (calls may overlap: the sink
// must be thread-safe). nullptr: stderr again. Replacing a sink waits for no call in flight:
// the old sink and its user data must stay valid.
using LogSink = void (*)(LogLevel level, const char* message, void* user);
void set_log_sink(LogSink sink, void* user);

}  // namespace pi
