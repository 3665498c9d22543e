#pragma once
// A graceful stop on SIGINT/SIGTERM for long work (training now, serving later): the first
// signal only sets a flag that the work polls at a safe point (a step boundary), so it can save
// and exit; a second signal is not waited on and ends the process at once.

#include <csignal>

namespace zoo {

// Handles SIGINT and SIGTERM while it lives (when enabled) and restores the previous handlers
// after. Constructing one clears any earlier stop request.
class StopSignals {
 public:
  explicit StopSignals(bool enabled);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  bool enabled_;
  struct sigaction saved_interrupt_ {}, saved_terminate_ {};
};

// The signal that asked for a stop while a StopSignals was handling them; 0 if none.
int stop_signal_received();

}  // namespace zoo
