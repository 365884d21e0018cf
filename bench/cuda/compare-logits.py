#!/usr/bin/env python3
"""Compares two files of logits (raw float32, one row of n_vocab per position), as `gmlx logits`
and bench/llamacpp/dump-logits.c write them: the largest absolute difference over every position,
the position it is at, and at how many positions the top-1 token agrees (counting a position
whose two best logits in A are within TIE of each other as indecisive, not a disagreement).
  compare-logits.py A.f32 B.f32 N_POSITIONS [TIE]      (numpy)"""
import sys

import numpy as np


def main():
    a = np.fromfile(sys.argv[1], dtype="<f4")
    b = np.fromfile(sys.argv[2], dtype="<f4")
    n = int(sys.argv[3])
    tie = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-3
    if a.size != b.size or a.size % n:
        sys.exit(f"compare-logits: {a.size} and {b.size} values for {n} positions")
    a = a.reshape(n, -1)
    b = b.reshape(n, -1)
    d = np.abs(a - b).max(axis=1)
    top_a, top_b = a.argmax(axis=1), b.argmax(axis=1)
    srt = np.sort(a, axis=1)
    decisive = (srt[:, -1] - srt[:, -2]) > tie
    agree = int(((top_a == top_b) & decisive).sum())
    print(f"max |diff| {d.max():.3e} (position {int(d.argmax())}), mean of the per-position max {d.mean():.3e}; "
          f"top-1 agrees at {agree} of {int(decisive.sum())} decisive positions ({n} in all)")


if __name__ == "__main__":
    main()
