#!/usr/bin/env python3
"""Print the first N Fibonacci numbers (exact integers), or write them as JSON."""

import argparse
import json
import sys


def fibonacci(count: int) -> list[int]:
    values, a, b = [], 0, 1
    for _ in range(count):
        values.append(a)
        a, b = b, a + b
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("count", type=int)
    parser.add_argument("--json", metavar="FILE", help="write a JSON array to FILE instead of printing")
    args = parser.parse_args()
    if args.count < 0:
        parser.error("count must be >= 0")
    values = fibonacci(args.count)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(values, handle)
        print(f"wrote {len(values)} Fibonacci numbers to {args.json}", file=sys.stderr)
    else:
        print("\n".join(str(v) for v in values))
    return 0


if __name__ == "__main__":
    sys.exit(main())
