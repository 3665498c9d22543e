#include "bench/workers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <utility>

namespace zoo::bench {
namespace {

using json = nlohmann::json;

// Starts `argv` with `env` added, its standard output on the returned pipe.
FILE* start_child(const std::vector<std::string>& argv, const std::vector<std::string>& env, std::string& command) {
  command.clear();
  for (const auto& e : env) command += e + " ";
  for (const auto& arg : argv) command += "'" + arg + "' ";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("zoo bench: cannot run " + command);
  return pipe;
}

// Waits for a child start_child started and returns the JSON object on the last line of its
// standard output.
json finish_child(FILE* pipe, const std::string& command) {
  std::string out;
  char buffer[4096];
  while (size_t got = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, got);
  const int status = ::pclose(pipe);
  if (status != 0) throw std::runtime_error("zoo bench: '" + command + "' failed (exit " + std::to_string(WEXITSTATUS(status)) + ")");
  // The result is the last line (a library may have printed before it).
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const auto start = out.rfind('\n');
  try {
    return json::parse(out.substr(start == std::string::npos ? 0 : start + 1));
  } catch (const json::exception&) {
    throw std::runtime_error("zoo bench: '" + command + "' printed no result: " + out);
  }
}

// A TCP port free on loopback now: the ring rows' rendezvous.
int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) throw std::runtime_error("zoo bench: cannot open a socket for the ranks' rendezvous");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const bool ok = ::bind(s, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  ::getsockname(s, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  ::close(s);
  if (!ok) throw std::runtime_error("zoo bench: no free port on loopback for the ranks' rendezvous");
  return ntohs(address.sin_port);
}

}  // namespace

// Runs `argv` and returns the JSON object on the last line of its standard output.
json run_child(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::string command;
  FILE* pipe = start_child(argv, env, command);
  return finish_child(pipe, command);
}

// A ring row: its ranks as worker processes started together (the environment torchrun would
// set), the machine's threads shared among them. The row is rank 0's, with every rank's peak
// memory and the largest as the row's.
json run_ranks(const std::string& self, const std::string& name, int64_t ranks, int64_t threads,
               const std::string& steps) {
  const std::string port = std::to_string(free_port());
  const std::string per_rank = std::to_string(std::max<int64_t>(1, threads / ranks));
  std::vector<std::pair<FILE*, std::string>> children;
  for (int64_t r = 0; r < ranks; ++r) {
    std::string command;
    FILE* pipe = start_child({self, "--threads", per_rank, "bench", "--worker", name, "--steps", steps},
                             {"WORLD_SIZE=" + std::to_string(ranks), "RANK=" + std::to_string(r),
                              "LOCAL_WORLD_SIZE=" + std::to_string(ranks), "LOCAL_RANK=" + std::to_string(r),
                              "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port},
                             command);
    children.emplace_back(pipe, command);
  }
  std::vector<json> rows;
  for (const auto& [pipe, command] : children) rows.push_back(finish_child(pipe, command));
  json row = rows.front();
  json memory = json::array();
  double largest = 0;
  for (const auto& r : rows) {
    memory.push_back(r["peak_rss_mb"]);
    largest = std::max(largest, r["peak_rss_mb"].get<double>());
  }
  row["rank_peak_rss_mb"] = memory;
  row["peak_rss_mb"] = largest;
  return row;
}

}  // namespace zoo::bench
