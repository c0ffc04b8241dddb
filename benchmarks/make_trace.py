"""Write a seeded, skewed trace of sequence lengths for `onnxcc simulate` / `--bucket SYM=auto`.

Most requests are short (log-normal body) with a long tail of long ones, as chat / search
traffic looks:

    python benchmarks/make_trace.py -o trace.txt                 # 1000 requests, one per line
    python benchmarks/make_trace.py -n 5000 --counts -o t.csv    # VALUE,COUNT lines

The same arguments always give the same file.
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np


def make_trace(n: int = 1000, seed: int = 0, median: float = 20.0, sigma: float = 0.8, tail: float = 0.08,
               max_len: int = 512) -> list[int]:
    """n lengths in [1, max_len]: (1 - tail) log-normal around `median`, `tail` log-uniform
    between 4 * median and max_len."""
    rng = np.random.default_rng(seed)
    body = rng.lognormal(np.log(median), sigma, size=n)
    long = np.exp(rng.uniform(np.log(4 * median), np.log(max_len), size=n))
    lengths = np.where(rng.random(n) < tail, long, body)
    return [int(v) for v in np.clip(np.round(lengths), 1, max_len)]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=1000, help="requests (default 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--median", type=float, default=20.0, help="median length of the short body")
    p.add_argument("--sigma", type=float, default=0.8, help="log-normal sigma of the body")
    p.add_argument("--tail", type=float, default=0.08, help="fraction of long-tail requests")
    p.add_argument("--max", dest="max_len", type=int, default=512, help="longest length")
    p.add_argument("--counts", action="store_true", help="write VALUE,COUNT lines instead of one per request")
    p.add_argument("-o", "--output", default="-", help="file to write (default stdout)")
    a = p.parse_args(argv)
    values = make_trace(a.n, a.seed, a.median, a.sigma, a.tail, a.max_len)
    if a.counts:
        text = "".join(f"{v},{c}\n" for v, c in sorted(Counter(values).items()))
    else:
        text = "".join(f"{v}\n" for v in values)
    if a.output == "-":
        print(text, end="")
    else:
        with open(a.output, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
