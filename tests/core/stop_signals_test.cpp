#include "core/stop_signals.h"

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <gtest/gtest.h>

namespace zoo {
namespace {

int g_previous_handler_calls = 0;
extern "C" void count_call(int) { ++g_previous_handler_calls; }

// Installs count_call for `signal` as the handler a StopSignals finds; returns the one before.
struct sigaction install_counter(int signal) {
  struct sigaction counter {}, saved {};
  counter.sa_handler = count_call;
  sigemptyset(&counter.sa_mask);
  sigaction(signal, &counter, &saved);
  g_previous_handler_calls = 0;
  return saved;
}

TEST(StopSignals, TheFirstSignalIsOnlyRecordedAndTheHandlersAreRestoredAfter) {
  const struct sigaction saved = install_counter(SIGTERM);
  {
    StopSignals signals(true);
    EXPECT_EQ(stop_signal_received(), 0);
    std::raise(SIGTERM);  // the process goes on: the work polls the flag
    EXPECT_EQ(stop_signal_received(), SIGTERM);
    EXPECT_EQ(g_previous_handler_calls, 0);
  }
  std::raise(SIGTERM);  // the handler that was there before is back
  EXPECT_EQ(g_previous_handler_calls, 1);
  {
    StopSignals signals(true);  // a new scope starts with no stop requested
    EXPECT_EQ(stop_signal_received(), 0);
  }
  sigaction(SIGTERM, &saved, nullptr);
}

TEST(StopSignals, DisabledLeavesTheHandlersAlone) {
  const struct sigaction saved = install_counter(SIGINT);
  {
    StopSignals signals(false);
    std::raise(SIGINT);
    EXPECT_EQ(g_previous_handler_calls, 1);
  }
  sigaction(SIGINT, &saved, nullptr);
}

TEST(StopSignals, ASecondSignalEndsTheProcessAtOnce) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    StopSignals signals(true);
    std::raise(SIGINT);
    if (stop_signal_received() != SIGINT) _exit(2);
    std::raise(SIGINT);  // not waited on: the default action ends the process here
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGINT);
}

}  // namespace
}  // namespace zoo
