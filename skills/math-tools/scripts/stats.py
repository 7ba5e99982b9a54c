#!/usr/bin/env python3
"""Descriptive statistics of a list of numbers: stats.py INPUT|- OUTPUT.json"""

import json
import statistics
import sys


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: stats.py INPUT|- OUTPUT.json", file=sys.stderr)
        return 2
    source = sys.stdin if sys.argv[1] == "-" else open(sys.argv[1], encoding="utf-8")
    with source:
        try:
            numbers = [float(tok) for tok in source.read().split()]
        except ValueError as exc:
            print(f"not a number: {exc}", file=sys.stderr)
            return 1
    if not numbers:
        print("no numbers given", file=sys.stderr)
        return 1
    result = {
        "count": len(numbers),
        "sum": sum(numbers),
        "min": min(numbers),
        "max": max(numbers),
        "mean": statistics.fmean(numbers),
        "median": statistics.median(numbers),
        "stdev": statistics.stdev(numbers) if len(numbers) > 1 else 0.0,
    }
    with open(sys.argv[2], "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
    print(f"count={result['count']} mean={result['mean']:.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
