#include "core/stop_signals.h"

#include <atomic>
#include <csignal>

namespace zoo {
namespace {

std::atomic<int> g_stop_signal{0};

extern "C" void on_stop_signal(int signal) {
  if (g_stop_signal.exchange(signal) != 0) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
}

}  // namespace

StopSignals::StopSignals(bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  g_stop_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &saved_interrupt_);
  sigaction(SIGTERM, &action, &saved_terminate_);
}

StopSignals::~StopSignals() {
  if (!enabled_) return;
  sigaction(SIGINT, &saved_interrupt_, nullptr);
  sigaction(SIGTERM, &saved_terminate_, nullptr);
}

int stop_signal_received() { return g_stop_signal.load(); }

}  // namespace zoo
