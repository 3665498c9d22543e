"""A soak of zoo serve: many clients for a long time, then what the server holds afterwards.

Usage: soak.py --port PORT --pid PID [--seconds 1200] [--clients 16] [--api-key KEY]
               [--long-prompt-words N] [--burst 80] [--report FILE] [--check]

Loopback only, bounded in count (--clients threads, one burst of --burst requests every 30 s)
and in time (--seconds, then every client stops and waits for its answers). Each client mixes,
from its own seeded generator: completions and chat, streamed and whole, n = 2, long prompts
that take chunked prefill, streams abandoned after a few events, and whole-answer requests
abandoned before their answer (the server cancels them: 499). A burst past the queue must get
503s, never another 5xx.

The server process is sampled every 2 s (/proc/PID: resident memory, open descriptors,
threads; /metrics: the prefix cache's bytes). Reported, and with --check required:
  - resident memory after warm-up (--warmup-seconds, a fifth of the run by default), less the
    prefix cache's keys (which fill toward their budget by design), grows by at most 5%
    (--max-rss-growth);
  - the prefix cache never holds more than --prefix-cache-mb, and, given one, it evicted blocks
    (the load reached its budget);
  - open descriptors at rest afterwards equal those at rest before;
  - threads never exceed those at rest plus the HTTP workers' bound (--max-threads-over-rest);
  - the p99 of the time between a stream's consecutive events in the last quarter of the run is
    within 1.5x that of the quarter after warm-up (--max-latency-ratio);
  - no request answered 5xx but 503 (with Retry-After: every row and the queue taken, which a
    burst must reach; a client then waits as told), and no other client error.
Prints one JSON object (and writes it to --report).
"""
import argparse
import http.client
import json
import os
import random
import socket
import statistics
import sys
import threading
import time

WORDS = ("the list of functions in a module returns a value when the interpreter reads its source "
         "and every object has a type an identity and a value errors should never pass silently").split()


def proc_status(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return {
        "rss_mb": int(fields["VmRSS"].split()[0]) / 1024,
        "threads": int(fields["Threads"]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
    }


class Soak:
    def __init__(self, a):
        self.a = a
        self.lock = threading.Lock()
        self.status_counts = {}
        self.errors = []
        self.gaps = []  # (time since start, seconds between consecutive stream events)
        self.samples = []  # (time since start, proc_status)
        self.requests = 0
        self.start = time.monotonic()
        self.deadline = self.start + a.seconds
        self.headers = {"Content-Type": "application/json"}
        if a.api_key:
            self.headers["Authorization"] = f"Bearer {a.api_key}"

    def now(self):
        return time.monotonic() - self.start

    def count(self, status):
        with self.lock:
            self.status_counts[status] = self.status_counts.get(status, 0) + 1
            self.requests += 1

    def error(self, what):
        with self.lock:
            self.errors.append(what)

    def connect(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.a.port, timeout=timeout)

    def prompt(self, rng, words):
        return " ".join(rng.choice(WORDS) for _ in range(words))

    def body(self, rng, kind):
        chat = kind in ("chat", "chat_stream")
        stream = kind in ("stream", "chat_stream", "abandon_stream")
        words = self.a.long_prompt_words if kind == "long" else rng.randint(1, 12)
        text = self.prompt(rng, words)
        b = {"max_tokens": rng.randint(4, 24), "temperature": rng.choice([0, 0.8]), "seed": rng.randint(0, 1000)}
        if chat:
            b["messages"] = [{"role": "user", "content": text}]
        else:
            b["prompt"] = text
        if kind == "n2":
            b["n"] = 2
        if stream:
            b["stream"] = True
        if kind == "abandon_stream":
            b["max_tokens"] = 40
        return ("/v1/chat/completions" if chat else "/v1/completions"), b

    def request(self, rng, kind):
        path, body = self.body(rng, kind)
        conn = self.connect(timeout=2 if kind == "abandon_whole" else 120)
        try:
            conn.request("POST", path, json.dumps(body), self.headers)
            if kind == "abandon_whole":
                # Gone before the answer: the server must cancel it (its rows free for others).
                time.sleep(rng.uniform(0.05, 0.3))
                conn.sock.shutdown(socket.SHUT_RDWR)
                self.count("abandoned")
                return
            r = conn.getresponse()
            self.count(r.status)
            if r.status == 503 and r.getheader("Retry-After"):
                r.read()  # every row and the queue taken (a burst): a client waits as told
                if kind != "burst":
                    time.sleep(float(r.getheader("Retry-After")))
                return
            if r.status != 200:
                self.error(f"{kind}: {r.status} {r.read()[:300]!r}")
                return
            if not body.get("stream"):
                answer = json.loads(r.read())
                if len(answer["choices"]) != body.get("n", 1):
                    self.error(f"{kind}: {len(answer['choices'])} choices")
                return
            last, events = None, 0
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    return
                event = json.loads(line[6:])
                if "error" in event:
                    self.error(f"{kind}: error event {event}")
                    return
                t = time.monotonic()
                if last is not None:
                    with self.lock:
                        self.gaps.append((t - self.start, t - last))
                last, events = t, events + 1
                if kind == "abandon_stream" and events >= 3:
                    return  # closing the connection cancels the rest
            self.error(f"{kind}: the stream ended without [DONE]")
        except Exception as e:  # a reset, a timeout: the server failed this client
            self.error(f"{kind}: {type(e).__name__}: {e}")
        finally:
            conn.close()

    def client(self, index):
        rng = random.Random(1000 + index)
        kinds = ["whole", "stream", "chat", "chat_stream", "n2", "long", "abandon_stream", "abandon_whole"]
        weights = [4, 4, 2, 2, 1, 1, 1, 1]
        while time.monotonic() < self.deadline:
            self.request(rng, rng.choices(kinds, weights)[0])

    def bursts(self):
        rng = random.Random(7)
        while time.monotonic() + 30 < self.deadline:
            time.sleep(30)
            threads = [threading.Thread(target=self.request, args=(random.Random(rng.random()), "burst"))
                       for _ in range(self.a.burst)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

    def sampler(self, stop):
        while not stop.is_set():
            status = proc_status(self.a.pid)
            cached = self.health().get("zoo_prefix_cache_bytes", 0) / 2**20
            status["prefix_cache_mb"] = cached
            status["rss_less_cache_mb"] = status["rss_mb"] - cached
            self.samples.append((self.now(), status))
            stop.wait(2)

    def health(self):
        conn = self.connect(timeout=10)
        try:
            conn.request("GET", "/metrics", headers=self.headers)
            text = conn.getresponse().read().decode()
        finally:
            conn.close()
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values

    def at_rest(self):
        """Waits until the scheduler holds nothing, then samples the process."""
        for _ in range(600):
            m = self.health()
            if m.get("zoo_batch_running", 1) == 0 and m.get("zoo_queue_length", 1) == 0:
                break
            time.sleep(0.1)
        time.sleep(1.5)  # keep-alive connections of the last clients closed on both ends
        return proc_status(self.a.pid)

    def run(self):
        # What the process holds at rest once it has served (its threads and pools started).
        rng = random.Random(0)
        for kind in ("whole", "stream", "chat", "long"):
            self.request(rng, kind)
        rest_before = self.at_rest()
        self.errors.clear()
        self.status_counts.clear()
        self.requests = 0
        stop = threading.Event()
        sampler = threading.Thread(target=self.sampler, args=(stop,))
        sampler.start()
        self.start = time.monotonic()
        self.deadline = self.start + self.a.seconds
        clients = [threading.Thread(target=self.client, args=(i,)) for i in range(self.a.clients)]
        clients.append(threading.Thread(target=self.bursts))
        for t in clients:
            t.start()
        for t in clients:
            t.join()
        stop.set()
        sampler.join()
        rest_after = self.at_rest()
        return self.report(rest_before, rest_after)

    def report(self, rest_before, rest_after):
        s = self.a.seconds
        w = self.a.warmup_seconds if self.a.warmup_seconds is not None else s / 5
        warm = [p for t, p in self.samples if t <= w]
        later = [p for t, p in self.samples if t > w]
        rss_warm = max(p["rss_less_cache_mb"] for p in warm) if warm else float("nan")
        rss_later = max(p["rss_less_cache_mb"] for p in later) if later else float("nan")
        first = sorted(g for t, g in self.gaps if w < t <= w + s / 4)
        last = sorted(g for t, g in self.gaps if t > s - s / 4)

        def p99(xs):
            return xs[min(len(xs) - 1, int(0.99 * len(xs)))] if xs else float("nan")

        r = {
            "seconds": s,
            "clients": self.a.clients,
            "requests": self.requests,
            "statuses": {str(k): v for k, v in sorted(self.status_counts.items(), key=lambda kv: str(kv[0]))},
            "client_errors": self.errors[:20],
            "client_error_count": len(self.errors),
            # Less the prefix cache's bytes at each sample.
            "rss_mb": {"rest_before": rest_before["rss_mb"], "end_of_warmup": rss_warm, "max_after_warmup": rss_later,
                       "growth": rss_later / rss_warm - 1 if warm and later else None},
            "prefix_cache_mb": {"max": max(p["prefix_cache_mb"] for _, p in self.samples),
                                "evicted_blocks": self.health().get("zoo_prefix_cache_evicted_blocks_total", 0)},
            "fds": {"rest_before": rest_before["fds"], "rest_after": rest_after["fds"],
                    "max": max(p["fds"] for _, p in self.samples)},
            "threads": {"rest_before": rest_before["threads"], "rest_after": rest_after["threads"],
                        "max": max(p["threads"] for _, p in self.samples)},
            "stream_event_gap_s": {"first_quarter_p99": p99(first), "last_quarter_p99": p99(last),
                                   "first_quarter_median": statistics.median(first) if first else None,
                                   "events": len(self.gaps)},
        }
        r["stream_event_gap_s"]["ratio"] = r["stream_event_gap_s"]["last_quarter_p99"] / r["stream_event_gap_s"][
            "first_quarter_p99"] if first and last else None
        failures = []
        if r["client_error_count"]:
            failures.append(f"{r['client_error_count']} client errors, first: {self.errors[:3]}")
        if r["rss_mb"]["growth"] is None or r["rss_mb"]["growth"] > self.a.max_rss_growth:
            failures.append(f"resident memory grew {r['rss_mb']} after warm-up")
        if r["prefix_cache_mb"]["max"] > self.a.prefix_cache_mb:
            failures.append(f"the prefix cache held {r['prefix_cache_mb']['max']:.2f} MB, past its "
                            f"{self.a.prefix_cache_mb} MB")
        if self.a.prefix_cache_mb > 0 and r["prefix_cache_mb"]["evicted_blocks"] == 0:
            failures.append("the prefix cache never reached its budget (no block evicted)")
        if rest_after["fds"] != rest_before["fds"]:
            failures.append(f"open descriptors at rest {rest_before['fds']} before, {rest_after['fds']} after")
        if r["threads"]["max"] > rest_before["threads"] + self.a.max_threads_over_rest:
            failures.append(f"threads reached {r['threads']['max']} (at rest {rest_before['threads']})")
        if rest_after["threads"] != rest_before["threads"]:
            failures.append(f"threads at rest {rest_before['threads']} before, {rest_after['threads']} after")
        if r["stream_event_gap_s"]["ratio"] is None or r["stream_event_gap_s"]["ratio"] > self.a.max_latency_ratio:
            failures.append(f"stream latency p99 drifted: {r['stream_event_gap_s']}")
        if not any(k == "503" for k in r["statuses"]):
            failures.append("no burst reached past the queue (no 503)")
        r["failures"] = failures
        return r


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--seconds", type=float, default=1200)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--api-key", default="")
    p.add_argument("--long-prompt-words", type=int, default=120)
    p.add_argument("--burst", type=int, default=80)
    p.add_argument("--max-threads-over-rest", type=int, default=0)
    p.add_argument("--prefix-cache-mb", type=float, default=0, help="the server's --prefix-cache-mb")
    p.add_argument("--max-rss-growth", type=float, default=0.05, help="after warm-up, as a fraction")
    p.add_argument("--max-latency-ratio", type=float, default=1.5, help="p99 stream gap, last quarter to first")
    p.add_argument("--warmup-seconds", type=float, help="memory and latency are judged after it (default: a fifth)")
    p.add_argument("--report")
    p.add_argument("--check", action="store_true")
    a = p.parse_args()
    r = Soak(a).run()
    text = json.dumps(r, indent=2)
    print(text)
    if a.report:
        with open(a.report, "w") as f:
            f.write(text + "\n")
    if a.check and r["failures"]:
        sys.exit("soak: " + "; ".join(r["failures"]))


if __name__ == "__main__":
    main()
