"""Compression of the messages of any algorithm (docs/compression.md).

compressors.py  the compressors: C(x), unbiasedness, omega, wire bits with the encoding named
channel.py      uplink / downlink compression with EF / EF21 memories, as the engine uses it
codec.py        the lossless coder (zstd / lzma) the ledger measures messages with
"""
from fedrepro.compression.channel import FEEDBACK, Channel, Feedback, Sent, build_channel
from fedrepro.compression.compressors import (KINDS, QSGD, Bernoulli, Compressed, Compressor, Identity, Natural,
                                              RandK, Sign, TernGrad, Threshold, TopK, index_bits,
                                              make_compressor)

__all__ = ["FEEDBACK", "KINDS", "Bernoulli", "Channel", "Compressed", "Compressor", "Feedback", "Identity",
           "Natural", "QSGD", "RandK", "Sent", "Sign", "TernGrad", "Threshold", "TopK", "build_channel", "index_bits",
           "make_compressor"]
