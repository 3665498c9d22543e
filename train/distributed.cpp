#include "train/distributed.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <thread>

#include <torch/torch.h>

#include "core/runtime.h"
#include "kernels/ring_attention.h"
#include "train/run_config.h"

#ifdef ZOO_WITH_GLOO
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef ZOO_WITH_NCCL
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#endif

namespace zoo {
namespace {

// A process group larger than any cluster zoo trains on: past it a value is a typo or an attack,
// and refusing it here comes before any connection is tried (or a table per rank allocated).
constexpr int64_t kMaxWorldSize = int64_t{1} << 16;

int64_t env_int(const char* name, int64_t fallback, int64_t lowest, int64_t highest) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(value, &end, 10);
  if (*end != '\0' || errno == ERANGE || n < lowest || n > highest) {
    throw std::invalid_argument(std::string(name) + " must be an integer from " + std::to_string(lowest) + " to " +
                                std::to_string(highest) + ", got '" + value + "'");
  }
  return n;
}

std::string first_line(const std::string& text) {
  auto end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end);
}

}  // namespace

DistributedEnv distributed_env() {
  DistributedEnv e;
  e.world_size = env_int("WORLD_SIZE", 1, 1, kMaxWorldSize);
  if (e.world_size == 1) return e;
  if (std::getenv("RANK") == nullptr) throw std::invalid_argument("WORLD_SIZE is set but RANK is not");
  e.rank = env_int("RANK", 0, 0, kMaxWorldSize);
  if (e.rank >= e.world_size) {
    throw std::invalid_argument("RANK (" + std::to_string(e.rank) + ") must be below WORLD_SIZE (" +
                                std::to_string(e.world_size) + ")");
  }
  e.local_world_size = env_int("LOCAL_WORLD_SIZE", e.world_size, 1, e.world_size);
  // LOCAL_RANK picks the CUDA device: one past the node's processes would be another's.
  e.local_rank = env_int("LOCAL_RANK", e.rank % e.local_world_size, 0, e.local_world_size - 1);
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') e.master_addr = addr;
  e.master_port = env_int("MASTER_PORT", 29500, 1, 65535);
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  e.agent_store = agent != nullptr && std::string(agent) == "True";
  e.store_prefix = "zoo/" + std::to_string(env_int("TORCHELASTIC_RESTART_COUNT", 0, 0, std::numeric_limits<int32_t>::max()));
  return e;
}

#ifdef ZOO_WITH_GLOO

namespace {

c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> gloo_options(const DistributedEnv& env,
                                                                 std::chrono::milliseconds timeout) {
  auto o = c10d::ProcessGroupGloo::Options::create(timeout);
  if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME"); interface != nullptr && *interface != '\0') {
    o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(interface));
  } else if (env.master_addr == "localhost" || env.master_addr.rfind("127.", 0) == 0) {
    o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  } else {
    o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return o;
}

// One context-parallel group's ring: receives from the previous rank and sends to the next,
// both started at once, on the group's own Gloo process group; the tag is the channel.
class GlooRing : public RingExchange {
 public:
  GlooRing(DataParallel& owner, c10::intrusive_ptr<c10d::ProcessGroupGloo> group, int64_t ranks, int64_t rank,
           std::chrono::milliseconds timeout)
      : owner_(owner), group_(std::move(group)), ranks_(ranks), rank_(rank), timeout_(timeout) {}
  int64_t ranks() const override { return ranks_; }
  int64_t rank() const override { return rank_; }
  std::function<void()> pass(const torch::Tensor& send, const torch::Tensor& receive, int64_t channel) override {
    TORCH_CHECK(receive.is_contiguous() && receive.sizes() == send.sizes() && receive.dtype() == send.dtype(),
                "ring transfer: the receive buffer must be contiguous and match ", send.sizes());
    std::vector<torch::Tensor> in = {receive}, out = {send.contiguous()};
    c10::intrusive_ptr<c10d::Work> received, sent;
    try {
      received = group_->recv(in, static_cast<int>((rank_ + ranks_ - 1) % ranks_), static_cast<int>(channel));
      sent = group_->send(out, static_cast<int>((rank_ + 1) % ranks_), static_cast<int>(channel));
    } catch (const std::exception& e) {
      owner_.fail("a ring attention transfer", e);
    }
    return [this, received, sent, out] {
      try {
        sent->wait(timeout_);
        received->wait(timeout_);
      } catch (const std::exception& e) {
        owner_.fail("a ring attention transfer", e);
      }
    };
  }

 private:
  DataParallel& owner_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  int64_t ranks_, rank_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

struct DataParallel::Impl {
  c10::intrusive_ptr<c10d::Store> store;  // prefixed
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
#ifdef ZOO_WITH_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;
#endif
  std::string backend = "gloo";
  torch::Device device{torch::kCPU};  // where collectives want their tensors (NCCL: the GPU)

  // Heartbeat: alive/<rank> counts seconds while the process runs.
  std::thread heartbeat;
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;

  // Gradient buckets, in launch order (parameters in reverse registration order, the order
  // backward tends to produce them).
  struct Bucket {
    std::vector<size_t> params;
    torch::Tensor buffer;
    int64_t pending = 0;
    c10::intrusive_ptr<c10d::Work> work;
  };
  std::vector<torch::Tensor> params;
  // Whatever pointer LibTorch hands out for a leaf's accumulator (it went from shared_ptr to intrusive_ptr).
  std::vector<decltype(torch::autograd::impl::grad_accumulator(std::declval<torch::Tensor>()))> accumulators;
  std::vector<size_t> bucket_of;
  std::vector<bool> ready;
  std::vector<Bucket> buckets;
  size_t next_launch = 0;

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<torch::Tensor>& tensors) {
#ifdef ZOO_WITH_NCCL
    if (nccl) return nccl->allreduce(tensors);
#endif
    return gloo->allreduce(tensors);
  }
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<torch::Tensor>& tensors) {
#ifdef ZOO_WITH_NCCL
    if (nccl) return nccl->broadcast(tensors);
#endif
    return gloo->broadcast(tensors);
  }
};

DataParallel::DataParallel(const DistributedEnv& env, const torch::Device& device, DataParallelOptions options)
    : env_(env), options_(options), impl_(std::make_unique<Impl>()) {
  const std::string where = "rank " + std::to_string(env_.rank) + " of " + std::to_string(env_.world_size);
  try {
    c10d::TCPStoreOptions o;
    o.port = static_cast<std::uint16_t>(env_.master_port);
    o.isServer = !env_.agent_store && env_.rank == 0;
    if (o.isServer) o.numWorkers = static_cast<std::size_t>(env_.world_size);
    o.waitWorkers = false;
    o.timeout = options_.timeout;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(env_.master_addr, o);
    impl_->store = c10::make_intrusive<c10d::PrefixStore>(env_.store_prefix, tcp);
    impl_->store->setTimeout(options_.timeout);
  } catch (const std::exception& e) {
    throw DistributedError(where + ": cannot reach the rendezvous store at " + env_.master_addr + ":" +
                           std::to_string(env_.master_port) + " (" + first_line(e.what()) + ")");
  }
  try {
    if (device.is_cuda()) {
#ifdef ZOO_WITH_NCCL
      auto o = c10d::ProcessGroupNCCL::Options::create();
      o->timeout = options_.timeout;
      impl_->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl_->store, env_.rank, env_.world_size, o);
      impl_->backend = "nccl";
      impl_->device = device;
#else
      throw DistributedError("training on CUDA across processes needs NCCL, and this LibTorch build has no c10d NCCL");
#endif
    }
  } catch (const DistributedError&) {
    throw;
  } catch (const std::exception& e) {
    throw DistributedError(where + ": the NCCL process group did not form (" + first_line(e.what()) + ")");
  }
  if (!device.is_cuda()) try {
    impl_->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, env_.rank, env_.world_size,
                                                               gloo_options(env_, options_.timeout));
  } catch (const DistributedError&) {
    throw;
  } catch (const std::exception& e) {
    throw DistributedError(where + ": the process group did not form within " +
                           std::to_string(options_.timeout.count() / 1000) + " s (" + first_line(e.what()) +
                           "); are all " + std::to_string(env_.world_size) + " ranks started?");
  }
  impl_->heartbeat = std::thread([this] {
    const std::string key = "alive/" + std::to_string(env_.rank);
    while (true) {
      try {
        impl_->store->add(key, 1);  // not under the lock: a dead store may block until its timeout
      } catch (...) {
        // The store is gone (its host died); the next collective reports it.
      }
      std::unique_lock<std::mutex> lock(impl_->mutex);
      if (impl_->wake.wait_for(lock, std::chrono::seconds(1), [this] { return impl_->stopping; })) return;
    }
  });
}

DataParallel::~DataParallel() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  if (impl_->heartbeat.joinable()) impl_->heartbeat.join();
}

std::string DataParallel::backend() const { return impl_->backend; }

void DataParallel::fail(const std::string& what, const std::exception& error) {
  // Which ranks stopped bumping their counters over a few heartbeats?
  std::string verdict;
  try {
    auto counts = [&] {
      std::vector<int64_t> c;
      for (int64_t r = 0; r < env_.world_size; ++r) c.push_back(impl_->store->add("alive/" + std::to_string(r), 0));
      return c;
    };
    const auto before = counts();
    std::this_thread::sleep_for(std::chrono::milliseconds(3500));
    const auto after = counts();
    std::vector<std::string> stopped;
    for (int64_t r = 0; r < env_.world_size; ++r)
      if (r != env_.rank && after[r] == before[r]) stopped.push_back(std::to_string(r));
    if (stopped.empty()) {
      verdict = "every rank is still alive (one may be slower than the timeout, " +
                std::to_string(options_.timeout.count() / 1000) + " s)";
    } else {
      std::string list;
      for (const auto& s : stopped) list += (list.empty() ? "" : ", ") + s;
      verdict = (stopped.size() == 1 ? "rank " : "ranks ") + list + " stopped responding (exited, killed or hung)";
    }
  } catch (...) {
    verdict = env_.agent_store ? "the torchrun agent's store is unreachable"
                               : "rank 0 (which hosts the rendezvous store) is gone";
  }
  throw DistributedError("rank " + std::to_string(env_.rank) + ": " + what + " failed: " + verdict + " [" +
                         first_line(error.what()) + "]");
}

void DataParallel::broadcast(const std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat;
  for (const auto& t : tensors) flat.push_back(t.detach().reshape(-1).to(torch::kFloat));
  std::vector<torch::Tensor> buffer = {torch::cat(flat).to(impl_->device)};
  try {
    impl_->broadcast(buffer)->wait();
  } catch (const std::exception& e) {
    fail("broadcasting the parameters", e);
  }
  int64_t offset = 0;
  for (const auto& t : tensors) {
    t.detach().copy_(buffer[0].narrow(0, offset, t.numel()).view(t.sizes()).to(t.device()));
    offset += t.numel();
  }
}

torch::Tensor DataParallel::all_reduce_sum(torch::Tensor values) {
  std::vector<torch::Tensor> v = {values.to(impl_->device)};
  try {
    impl_->allreduce(v)->wait();
  } catch (const std::exception& e) {
    fail("an all-reduce", e);
  }
  if (!v[0].is_same(values)) values.copy_(v[0]);
  return values;
}

void DataParallel::barrier() { all_reduce_sum(torch::zeros({1})); }

std::string DataParallel::share(const std::string& key, const std::string& value) {
  const std::string k = "share/" + key;
  try {
    if (env_.rank == 0) {
      impl_->store->set(k, std::vector<uint8_t>(value.begin(), value.end()));
      return value;
    }
    auto bytes = impl_->store->get(k);
    return std::string(bytes.begin(), bytes.end());
  } catch (const std::exception& e) {
    fail("sharing " + key, e);
  }
}

std::shared_ptr<RingExchange> DataParallel::ring(int64_t size) {
  if (size < 1 || env_.world_size % size != 0) {
    throw std::invalid_argument("context_parallel (" + std::to_string(size) + ") must divide the number of processes (" +
                                std::to_string(env_.world_size) + ")");
  }
  const int64_t group = env_.rank / size, place = env_.rank % size;
  try {
    auto store = c10::make_intrusive<c10d::PrefixStore>("ring/" + std::to_string(group), impl_->store);
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, place, size, gloo_options(env_, options_.timeout));
    return std::make_shared<GlooRing>(*this, std::move(pg), size, place, options_.timeout);
  } catch (const DistributedError&) {
    throw;
  } catch (const std::exception& e) {
    fail("forming the context-parallel ring of ranks " + std::to_string(group * size) + ".." +
             std::to_string(group * size + size - 1),
         e);
  }
}

void DataParallel::attach(const std::vector<torch::Tensor>& params) {
  auto& m = *impl_;
  m.params = params;
  m.bucket_of.assign(params.size(), 0);
  m.ready.assign(params.size(), false);
  m.buckets.clear();
  const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(options_.bucket_mb * 1024 * 1024 / 4));
  int64_t filled = 0;
  for (size_t k = params.size(); k-- > 0;) {
    if (m.buckets.empty() || filled + params[k].numel() > cap) {
      m.buckets.emplace_back();
      filled = 0;
    }
    m.buckets.back().params.push_back(k);
    m.bucket_of[k] = m.buckets.size() - 1;
    filled += params[k].numel();
  }
  for (auto& b : m.buckets) {
    int64_t n = 0;
    for (size_t k : b.params) n += params[k].numel();
    b.buffer = torch::zeros({n}, params[b.params.front()].options().dtype(torch::kFloat));
    b.pending = static_cast<int64_t>(b.params.size());
  }
  for (size_t k = 0; k < params.size(); ++k) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params[k]);
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          if (sync_) on_gradient_ready(k);
          return outputs;
        }));
    m.accumulators.push_back(std::move(accumulator));  // the hooks live as long as these
  }
}

void DataParallel::on_gradient_ready(size_t k) {
  auto& m = *impl_;
  if (m.ready[k]) return;
  m.ready[k] = true;
  --m.buckets[m.bucket_of[k]].pending;
  launch_ready_buckets();
}

void DataParallel::launch_ready_buckets() {
  auto& m = *impl_;
  torch::NoGradGuard no_grad;
  // In bucket order only, so every rank issues the same collectives in the same order.
  while (m.next_launch < m.buckets.size() && m.buckets[m.next_launch].pending == 0) {
    auto& b = m.buckets[m.next_launch++];
    int64_t offset = 0;
    for (size_t k : b.params) {
      const auto& grad = m.params[k].grad();
      auto slot = b.buffer.narrow(0, offset, m.params[k].numel());
      if (grad.defined()) slot.copy_(grad.reshape(-1));
      else slot.zero_();
      offset += m.params[k].numel();
    }
    std::vector<torch::Tensor> v = {b.buffer};
    try {
      b.work = m.allreduce(v);
    } catch (const std::exception& e) {
      fail("a gradient all-reduce", e);
    }
  }
}

void DataParallel::finish_gradients() {
  auto& m = *impl_;
  torch::NoGradGuard no_grad;
  // Parameters no backward reached (unused heads) count as zero gradients.
  for (auto& b : m.buckets) b.pending = 0;
  launch_ready_buckets();
  const double inverse = 1.0 / static_cast<double>(env_.world_size);
  for (auto& b : m.buckets) {
    try {
      b.work->wait();
    } catch (const std::exception& e) {
      fail("a gradient all-reduce", e);
    }
    b.work.reset();
    b.buffer.mul_(inverse);
    int64_t offset = 0;
    for (size_t k : b.params) {
      auto& p = m.params[k];
      auto average = b.buffer.narrow(0, offset, p.numel()).view(p.sizes());
      offset += p.numel();
      if (!p.grad().defined()) {
        if (!average.any().item<bool>()) continue;  // no rank had one: stays undefined, as alone
        p.mutable_grad() = torch::zeros_like(p);
      }
      p.mutable_grad().copy_(average);
    }
  }
  discard_gradients();
}

void DataParallel::discard_gradients() {
  auto& m = *impl_;
  std::fill(m.ready.begin(), m.ready.end(), false);
  for (auto& b : m.buckets) {
    b.pending = static_cast<int64_t>(b.params.size());
    b.work.reset();
  }
  m.next_launch = 0;
  sync_ = false;
}

#else  // no c10d Gloo in this LibTorch build

struct DataParallel::Impl {};

DataParallel::DataParallel(const DistributedEnv& env, const torch::Device&, DataParallelOptions options)
    : env_(env), options_(options) {
  throw DistributedError("WORLD_SIZE=" + std::to_string(env.world_size) +
                         ": this zoo was built without c10d Gloo (install libgloo-dev and rebuild)");
}
DataParallel::~DataParallel() = default;
std::string DataParallel::backend() const { return "none"; }
void DataParallel::fail(const std::string& what, const std::exception& error) { throw DistributedError(what); }
void DataParallel::broadcast(const std::vector<torch::Tensor>&) {}
torch::Tensor DataParallel::all_reduce_sum(torch::Tensor values) { return values; }
void DataParallel::barrier() {}
std::string DataParallel::share(const std::string&, const std::string& value) { return value; }
std::shared_ptr<RingExchange> DataParallel::ring(int64_t) { return nullptr; }
void DataParallel::attach(const std::vector<torch::Tensor>&) {}
void DataParallel::on_gradient_ready(size_t) {}
void DataParallel::launch_ready_buckets() {}
void DataParallel::finish_gradients() {}
void DataParallel::discard_gradients() {}

#endif

GlobalLoss reduce_loss(DataParallel* parallel, const torch::Tensor& loss, int64_t targets, int64_t tokens) {
  torch::NoGradGuard no_grad;
  const auto value = loss.detach().to(torch::kDouble);
  if (parallel == nullptr) return {value, {}, {}};
  const auto finite = torch::isfinite(value);
  const auto counts = torch::tensor({static_cast<double>(targets), static_cast<double>(tokens)},
                                    value.options());
  auto sums = torch::cat({torch::where(finite, value * static_cast<double>(targets), 0.0).view({1}),
                          counts.narrow(0, 0, 1), finite.logical_not().to(torch::kDouble).view({1}),
                          counts.narrow(0, 1, 1)});
  parallel->all_reduce_sum(sums);
  const auto all_targets = sums[1];
  GlobalLoss global;
  global.tokens = sums[3];
  // Any rank's non-finite loss is everyone's; no target anywhere keeps the local loss (0).
  global.value = torch::where(sums[2] > 0, torch::full({}, NAN, value.options()),
                              torch::where(all_targets > 0, sums[0] / all_targets.clamp_min(1.0), value));
  global.share = torch::where(all_targets > 0,
                              static_cast<double>(targets) * static_cast<double>(parallel->world_size()) /
                                  all_targets.clamp_min(1.0),
                              torch::ones_like(all_targets));
  return global;
}

EvalResult reduce_ring_evaluation(DataParallel& parallel, EvalResult r, int64_t groups) {
  const bool scored = r.targets > 0;
  const double targets = static_cast<double>(r.targets);
  auto sums = torch::tensor({scored ? r.loss * targets : 0.0, targets, scored ? r.accuracy * targets : 0.0},
                            torch::kDouble);
  parallel.all_reduce_sum(sums);
  r.targets = std::llround(sums[1].item<double>() / static_cast<double>(groups));
  if (r.targets > 0) {
    r.loss = sums[0].item<double>() / sums[1].item<double>();
    r.perplexity = std::exp(r.loss);
    r.accuracy = sums[2].item<double>() / sums[1].item<double>();
  }
  return r;
}

std::unique_ptr<DataParallel> join_data_parallel(const RunConfig& config, DataParallelOptions options) {
  const DistributedEnv env = distributed_env();
  config.validate_world(env.world_size);
  if (!env.enabled()) return nullptr;
  torch::Device device = resolve_device(config.device);
  if (device.is_cuda() && !device.has_index()) device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
  return std::make_unique<DataParallel>(env, device, options);
}

}  // namespace zoo
