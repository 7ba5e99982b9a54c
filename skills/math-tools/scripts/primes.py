#!/usr/bin/env python3
"""Write every prime below LIMIT to FILE, one per line (sieve of Eratosthenes)."""

import sys


def primes_below(limit: int) -> list[int]:
    if limit < 3:
        return []
    sieve = bytearray([1]) * limit
    sieve[0:2] = b"\x00\x00"
    for n in range(2, int(limit**0.5) + 1):
        if sieve[n]:
            sieve[n * n :: n] = bytearray(len(range(n * n, limit, n)))
    return [i for i, is_prime in enumerate(sieve) if is_prime]


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: primes.py LIMIT FILE", file=sys.stderr)
        return 2
    limit, path = int(sys.argv[1]), sys.argv[2]
    primes = primes_below(limit)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("".join(f"{p}\n" for p in primes))
    print(f"{len(primes)} primes below {limit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
