#!/usr/bin/env python3
"""What a profiled step did, from its Chrome trace: zoo's (`zoo bench --trace DIR`, Kineto through
LibTorch) and PyTorch's (torch.profiler's export_chrome_trace) read the same way.

    trace_summary.py TRACE... --steps N [--top K] [--json]
    trace_summary.py --self-test

For each trace, per step (the trace holds N of them: 1 for a training row, the generated tokens for
a generate-* row): the ATen ops dispatched, the GPU kernels run and launched, the time the GPU was
busy and idle between the first and the last of its kernels (gaps above 10 us counted, the largest
named), and the K kernels with the most time (on a CPU-only trace, the K ops with the most self
time). scripts/gpu_check.sh --profile writes it for zoo and PyTorch side by side.
"""
import argparse
import json
import sys
from collections import defaultdict

GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch")
GAP_US = 10.0


def complete_events(trace):
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return [e for e in events if e.get("ph") == "X" and "dur" in e and "ts" in e]


def self_times(ops):
    """Each op's duration less the ops that ran inside it on the same thread, by name."""
    by_thread = defaultdict(list)
    for e in ops:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    totals = defaultdict(lambda: [0, 0.0])
    for events in by_thread.values():
        events.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        stack = []  # [end, event, children's time]
        def close(entry):
            totals[entry[1]["name"]][0] += 1
            totals[entry[1]["name"]][1] += float(entry[1]["dur"]) - entry[2]
        for e in events:
            start = float(e["ts"])
            while stack and stack[-1][0] <= start:
                close(stack.pop())
            if stack:
                stack[-1][2] += float(e["dur"])
            stack.append([start + float(e["dur"]), e, 0.0])
        while stack:
            close(stack.pop())
    return totals


def busy_and_gaps(intervals):
    """The union of [start, end) intervals: its length, and the gaps between its pieces."""
    busy, gaps, end = 0.0, [], None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            if end is not None:
                gaps.append(start - end)
            busy += stop - start
            end = stop
        elif stop > end:
            busy += stop - end
            end = stop
    return busy, gaps


def summarize(trace, steps, top):
    events = complete_events(trace)
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    gpu = [e for e in events if e.get("cat") in GPU_WORK]
    kernels = [e for e in gpu if e.get("cat") == "kernel"]
    launches = [e for e in events if e.get("cat") == "cuda_runtime" and e["name"] in LAUNCHES]
    aten = sum(1 for e in ops if e["name"].startswith("aten::"))
    summary = {
        "steps": steps,
        "aten_ops_per_step": aten / steps,
        "kernels_per_step": len(kernels) / steps,
        "launches_per_step": len(launches) / steps,
    }
    if events:
        first = min(float(e["ts"]) for e in events)
        last = max(float(e["ts"]) + float(e["dur"]) for e in events)
        summary["wall_ms_per_step"] = (last - first) / 1000.0 / steps
    if gpu:
        busy, gaps = busy_and_gaps([(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in gpu])
        summary["gpu_busy_ms_per_step"] = busy / 1000.0 / steps
        summary["gpu_idle_ms_per_step"] = sum(gaps) / 1000.0 / steps
        summary["gaps_over_10us_per_step"] = sum(1 for g in gaps if g > GAP_US) / steps
        summary["largest_gap_ms"] = max(gaps, default=0.0) / 1000.0
        per_kernel = defaultdict(lambda: [0, 0.0])
        for e in kernels:
            per_kernel[e["name"]][0] += 1
            per_kernel[e["name"]][1] += float(e["dur"])
        rows, whole = per_kernel, sum(float(e["dur"]) for e in kernels)
        summary["top_by"] = "kernel time"
    else:
        rows = self_times(ops)
        whole = sum(total for _, total in rows.values())
        summary["top_by"] = "op self time"
    ranked = sorted(rows.items(), key=lambda item: -item[1][1])[:top]
    summary["top"] = [{"name": name, "calls_per_step": calls / steps, "ms_per_step": us / 1000.0 / steps,
                       "share": us / whole if whole > 0 else 0.0} for name, (calls, us) in ranked]
    return summary


def describe(path, s):
    lines = [f"{path}: per step of {s['steps']}: {s['aten_ops_per_step']:.0f} ATen ops, "
             f"{s['kernels_per_step']:.0f} kernels, {s['launches_per_step']:.0f} launches"
             + (f", {s['wall_ms_per_step']:.3f} ms traced" if "wall_ms_per_step" in s else "")]
    if "gpu_busy_ms_per_step" in s:
        lines.append(f"  GPU busy {s['gpu_busy_ms_per_step']:.3f} ms, idle {s['gpu_idle_ms_per_step']:.3f} ms between "
                     f"kernels ({s['gaps_over_10us_per_step']:.1f} gaps over 10 us, the largest "
                     f"{s['largest_gap_ms']:.3f} ms)")
    lines.append(f"  top by {s['top_by']}:")
    for row in s["top"]:
        name = row["name"] if len(row["name"]) <= 90 else row["name"][:87] + "..."
        lines.append(f"    {row['ms_per_step']:9.3f} ms {100 * row['share']:5.1f}% {row['calls_per_step']:7.1f}x  {name}")
    return "\n".join(lines)


def self_test():
    """A worked example: three nested ops on one thread, four pieces of GPU work with gaps of 10,
    100 and 20 us, three launches."""
    def event(cat, name, ts, dur, tid=1):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}
    trace = {"traceEvents": [
        event("cpu_op", "aten::linear", 0, 100), event("cpu_op", "aten::t", 10, 30), event("cpu_op", "aten::mm", 50, 20),
        event("cpu_op", "aten::add", 5, 2, tid=2),
        event("cuda_runtime", "cudaLaunchKernel", 20, 5), event("cuda_runtime", "cudaLaunchKernel", 60, 5),
        event("cuda_runtime", "cudaLaunchKernel", 70, 5), event("cuda_runtime", "cudaMemcpyAsync", 80, 5),
        event("kernel", "gemm", 100, 50, tid=7), event("kernel", "add", 160, 40, tid=7),
        event("kernel", "gemm", 300, 100, tid=7), event("gpu_memcpy", "Memcpy DtoH", 420, 5, tid=7),
        {"ph": "i", "name": "marker", "ts": 1000},
    ]}
    s = summarize(trace, steps=1, top=5)
    expected = {"aten_ops_per_step": 4, "kernels_per_step": 3, "launches_per_step": 3, "wall_ms_per_step": 0.425,
                "gpu_busy_ms_per_step": 0.195, "gpu_idle_ms_per_step": 0.130, "gaps_over_10us_per_step": 2,
                "largest_gap_ms": 0.100}
    for key, value in expected.items():
        assert abs(s[key] - value) < 1e-9, (key, s[key], value)
    assert [(r["name"], r["calls_per_step"]) for r in s["top"]] == [("gemm", 2), ("add", 1)], s["top"]
    assert abs(s["top"][0]["share"] - 150 / 190) < 1e-9
    # Without GPU work, the ops by self time: linear 100 - 30 - 20, t 30, mm 20, add 2.
    cpu = summarize({"traceEvents": trace["traceEvents"][:4]}, steps=2, top=3)
    assert "gpu_busy_ms_per_step" not in cpu and cpu["top_by"] == "op self time"
    assert [r["name"] for r in cpu["top"]] == ["aten::linear", "aten::t", "aten::mm"], cpu["top"]
    assert all(abs(r["ms_per_step"] - ms) < 1e-12 for r, ms in zip(cpu["top"], (0.025, 0.015, 0.010))), cpu["top"]
    assert cpu["aten_ops_per_step"] == 2
    print("trace_summary: self-test passed")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*")
    parser.add_argument("--steps", type=int, default=1, help="steps the trace holds (default 1)")
    parser.add_argument("--top", type=int, default=15, help="kernels or ops to list (default 15)")
    parser.add_argument("--json", action="store_true", help="one JSON object per trace instead of text")
    parser.add_argument("--self-test", action="store_true", help="check the summary on a worked example")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return
    if not args.traces:
        parser.error("name at least one trace")
    if args.steps <= 0:
        parser.error(f"--steps must be positive, got {args.steps}")
    for path in args.traces:
        try:
            with open(path, encoding="utf-8") as f:
                trace = json.load(f)
            summary = summarize(trace, args.steps, args.top)
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"trace_summary: {path}: not a Chrome trace this can read ({e})")
        print(json.dumps({"trace": path, **summary}) if args.json else describe(path, summary))


if __name__ == "__main__":
    main()
