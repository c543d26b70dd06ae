"""The network between clients and server: every message through a compressor, with error
feedback where configured.

    uplink    client k's message `name` in round t: C_up(x), or with error feedback
              EF    client keeps e_k:  sends C(e_k + x);  e_k <- e_k + x - C(e_k + x);
                    the server uses what it decoded, C(e_k + x)
              EF21  client keeps g_k:  sends c = C(x - g_k);  g_k <- g_k + c; the server keeps
                    the same g_k (it saw every c) and uses g_k -- the L2GD paper's section 7.2
                    shifted-difference schema for FedAvg
    downlink  the server's broadcast `name` in round t, compressed once: every selected client
              receives the same bits (C_M of the L2GD paper); EF / EF21 memories are the
              server's, one row. Downlink EF21 needs every client to hear every broadcast
              (full participation; config.validate enforces it).

The memories are (senders, d) tensors, one per (direction, message name), allocated at the
first message and saved in checkpoints (state_dict). Random draws come from a generator
seeded by (run seed, "compress", direction, round, client or "server", name): a resumed run
draws what an uninterrupted one draws. An identity compressor passes the message through
untouched (error feedback with it would be exact anyway, so none is kept).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from fedrepro.compression.compressors import Compressed, Compressor, Identity, make_compressor
from fedrepro.seeding import generator

FEEDBACK = ("none", "ef", "ef21")
DIRECTIONS = ("up", "down")


@dataclass
class Sent:
    """One message after the channel."""

    message: torch.Tensor  # the values that cross the network (what the receiver decodes)
    used: torch.Tensor  # what the receiver uses: the message, or EF21's updated estimate g
    compressed: Optional[Compressed]  # None: sent as it is (dense float32, no compressor)


class Feedback:
    """The EF / EF21 memory of one message stream (a name in one direction), a row a sender."""

    def __init__(self, mode: str, compressor: Compressor, rows: int):
        if mode not in FEEDBACK[1:]:
            raise ValueError(f"error feedback must be one of {FEEDBACK[1:]}, got {mode!r}")
        self.mode, self.compressor, self.rows = mode, compressor, rows
        self.memory: Optional[torch.Tensor] = None  # EF: the error e; EF21: the estimate g

    def send(self, row: int, x: torch.Tensor, gen: Optional[torch.Generator]) -> tuple[Compressed, torch.Tensor]:
        if self.memory is None:
            self.memory = torch.zeros(self.rows, x.numel(), dtype=x.dtype, device=x.device)
        m = self.memory[row]
        if self.mode == "ef":
            p = m + x
            c = self.compressor.compress(p, gen)
            m.copy_(p - c.values)
            return c, c.values
        c = self.compressor.compress(x - m, gen)
        m.add_(c.values)
        return c, m.clone()


class Channel:
    """Uplink and downlink compressors with their error-feedback memories."""

    def __init__(self, uplink: Optional[Compressor] = None, downlink: Optional[Compressor] = None, *,
                 uplink_feedback: str = "none", downlink_feedback: str = "none",
                 num_clients: int = 1, seed: int = 0):
        for mode in (uplink_feedback, downlink_feedback):
            if mode not in FEEDBACK:
                raise ValueError(f"error feedback must be one of {FEEDBACK}, got {mode!r}")
        self.compressors = {"up": uplink or Identity(), "down": downlink or Identity()}
        self.feedback = {"up": uplink_feedback, "down": downlink_feedback}
        self.rows = {"up": int(num_clients), "down": 1}
        self.seed = seed
        self.streams: dict[str, Feedback] = {}  # "up/delta" -> its memory

    def compresses(self, direction: str) -> bool:
        return not isinstance(self.compressors[direction], Identity)

    def upload(self, t: int, k: int, name: str, x: torch.Tensor) -> Sent:
        """Client k's message `name` in round t (0-based)."""
        return self._send("up", t, k, name, x)

    def broadcast(self, t: int, name: str, x: torch.Tensor) -> Sent:
        """The server's message `name` to the round's clients (compressed once)."""
        return self._send("down", t, None, name, x)

    def _send(self, direction: str, t: int, k: Optional[int], name: str, x: torch.Tensor) -> Sent:
        comp = self.compressors[direction]
        if isinstance(comp, Identity):
            return Sent(x, x, None)
        gen = generator(self.seed, "compress", direction, t, "server" if k is None else k, name, device=x.device)
        mode = self.feedback[direction]
        if mode == "none":
            c = comp.compress(x, gen)
            return Sent(c.values, c.values, c)
        key = f"{direction}/{name}"
        stream = self.streams.get(key)
        if stream is None:
            stream = self.streams[key] = Feedback(mode, comp, self.rows[direction])
        c, used = stream.send(0 if k is None else k, x, gen)
        return Sent(c.values, used, c)

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {key: s.memory for key, s in self.streams.items() if s.memory is not None}

    def load_state_dict(self, state: dict) -> None:
        self.streams = {}
        for key, memory in state.items():
            direction = key.split("/", 1)[0]
            if self.feedback.get(direction, "none") == "none" or not self.compresses(direction):
                raise ValueError(f"checkpoint holds error-feedback memory {key!r} but this channel keeps "
                                 f"none for direction {direction!r}; resume with the run's original compressor")
            stream = self.streams[key] = Feedback(self.feedback[direction], self.compressors[direction],
                                                  self.rows[direction])
            stream.memory = memory.clone()

    def memory_bytes(self) -> int:
        return sum(m.numel() * m.element_size() for m in self.state_dict().values())

    def describe(self) -> str:
        parts = []
        for d in DIRECTIONS:
            c = self.compressors[d]
            fb = "" if self.feedback[d] == "none" or isinstance(c, Identity) else f" + {self.feedback[d]}"
            parts.append(f"{d}link {c.name}{fb}")
        return ", ".join(parts)


def build_channel(cfg, num_clients: int, seed: int) -> Channel:
    """The channel of a CompressorConfig node (`cfg.compressor`): name = the uplink compressor."""
    return Channel(make_compressor(cfg.name, cfg), make_compressor(cfg.downlink, cfg),
                   uplink_feedback=cfg.error_feedback, downlink_feedback=cfg.downlink_error_feedback,
                   num_clients=num_clients, seed=seed)
