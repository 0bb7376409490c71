#!/usr/bin/env python3
"""Sums a libtorch profiler Chrome trace by op name: self time (time not spent
in nested ops) and calls, largest first. Usage: trace_summary.py TRACE [TOP]"""
import json
import sys
from collections import defaultdict


def main():
    events = [e for e in json.load(open(sys.argv[1])) if e.get("ph") == "X"]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    self_us, calls = defaultdict(float), defaultdict(int)
    by_thread = defaultdict(list)
    for e in events:
        by_thread[e["tid"]].append(e)
    for evs in by_thread.values():
        # Parents start no later and end no earlier than their children.
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                self_us[stack[-1]["name"]] -= e["dur"]
            self_us[e["name"]] += e["dur"]
            calls[e["name"]] += 1
            stack.append(e)
    total = sum(self_us.values())
    print(f"total {total / 1e6:.3f} s")
    for name, us in sorted(self_us.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{us / 1e6:9.4f} s {100 * us / total:5.1f}%  {calls[name]:6d}  {name}")


if __name__ == "__main__":
    main()
