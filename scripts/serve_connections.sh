#!/usr/bin/env bash
# How many connections one `zoo serve` holds at once, on the loopback address: SLOW slowloris
# clients (a request's head sent a line every half second, never finished), IDLE keep-alive
# connections (one request answered, then silent) and as many streams as the batch and the queue
# take (--max-batch 8 + --max-queue 64), all open together; meanwhile /health's latency, and the
# server's resident memory, threads and descriptors against the same server with nothing open.
# Serves RUN_DIR, or trains a small model first (a minute or two) in a scratch folder, removed at
# the end.
# Usage: scripts/serve_connections.sh [SLOW [IDLE [RUN_DIR]]]   (default: 1000 1000)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
zoo=build/zoo
slow="${1:-1000}" idle="${2:-1000}" run="${3:-}"
work=$(mktemp -d "${TMPDIR:-/tmp}/zoo-connections.XXXXXX")
pid=""
trap '[[ -n "$pid" ]] && kill "$pid" 2> /dev/null; rm -rf "$work"' EXIT
if [[ -z "$run" ]]; then
  corpus=$("$zoo" corpus 2>/dev/null | sed -n 's/^wrote \([^ ]*\) .*/\1/p')
  [[ -n "$corpus" ]] || corpus="$zoo_cache/python-docs.txt"
  head -c 2000000 "$corpus" > "$work/slice.txt"
  run="$work/gpt"
  "$zoo" train gpt-tiny model.vocab_size=2000 steps=100 block_size=64 batch_size=16 \
    eval_every=0 precision=fp32 --data "$work/slice.txt" --run-dir "$run" > /dev/null 2>&1
fi
# Room for every connection; keep-alive long enough that the idle ones stay for the measurement.
"$zoo" --threads 1 serve "$run" --port 0 --max-connections $((slow + idle + 200)) --keep-alive 120 \
  --request-timeout 120 2> "$work/serve.log" &
pid=$!
port=""
for _ in $(seq 1 300); do
  port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\)$/\1/p' "$work/serve.log")
  [[ -n "$port" ]] && break
  sleep 0.1
done
[[ -n "$port" ]] || { echo "zoo serve did not start: $(cat "$work/serve.log")"; exit 1; }
"$zoo_python" - "$port" "$pid" "$slow" "$idle" <<'PY'
import http.client, json, os, resource, statistics, sys, time

sys.path.insert(0, "tests/cli")
from slow_clients import SlowClients

port, pid, slow_n, idle_n = (int(a) for a in sys.argv[1:5])
streams_n = 8 + 64  # --max-batch + --max-queue: each stream holds a worker to its end
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def server_state():
    status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status").read().splitlines() if ":" in line)
    return {"rss_mb": int(status["VmRSS"].split()[0]) / 1024, "threads": int(status["Threads"]),
            "descriptors": len(os.listdir(f"/proc/{pid}/fd"))}


def health_latencies(n=50):
    times = []
    for _ in range(n):
        start = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/health")
        r = conn.getresponse()
        r.read()
        conn.close()
        assert r.status == 200, r.status
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return {"p50_ms": statistics.median(times), "p99_ms": times[int(0.99 * (len(times) - 1))], "max_ms": times[-1]}


def metric(name):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    body = conn.getresponse().read().decode()
    conn.close()
    return next(float(l.split()[1]) for l in body.splitlines() if l.startswith(name + " "))


before = server_state() | health_latencies()

idle, streams = [], []
with SlowClients(port, slow_n):  # a header line every half second each
    for _ in range(idle_n):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/health")
        conn.getresponse().read()
        idle.append(conn)  # kept alive, silent
    for _ in range(streams_n):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/v1/completions", body=json.dumps({"prompt": "The", "max_tokens": 200,
                                                                 "ignore_eos": True, "stream": True}))
        streams.append(conn)
    statuses = sorted({c.getresponse().status for c in streams})
    time.sleep(1.5)  # several header lines from each slow client
    during = server_state() | health_latencies()
    open_connections, running, queued = (metric(m) for m in ("zoo_connections_open", "zoo_batch_running",
                                                               "zoo_queue_length"))
for c in idle + streams:
    c.close()
print(f"held at once: {slow_n} slow + {idle_n} idle + {streams_n} streams (statuses {statuses}); "
      f"zoo_connections_open {open_connections:.0f}, streams decoding {running:.0f} and queued {queued:.0f} "
      f"while /health was timed")
print("state    rss_mb threads descriptors health_p50_ms health_p99_ms health_max_ms")
for name, s in (("empty", before), ("loaded", during)):
    print(f"{name:8} {s['rss_mb']:6.1f} {s['threads']:7d} {s['descriptors']:11d} {s['p50_ms']:13.2f} "
          f"{s['p99_ms']:13.2f} {s['max_ms']:13.2f}")
print(f"per connection: {(during['rss_mb'] - before['rss_mb']) * 1024 / (slow_n + idle_n + streams_n):.1f} kB")
PY
grep -o 'avx512f\|amx_bf16\|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' '
echo "($(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
