"""The command line's shared vocabulary: options several commands take, and parameter types.

--device, --precision and --engine default to None: `translate.ready.Ready.load` decides what
None means, for the commands and the Python API alike.

Tests: tests/test_ready.py, tests/test_cli.py.
"""

from __future__ import annotations

import math

import click

from translate.config.names import ENGINE_NAMES, PRECISIONS

device_option = click.option("--device", default=None,
                             help="cpu, cuda, cuda:1, mps (default: the best available).")
precision_option = click.option(
    "--precision", type=click.Choice(list(PRECISIONS)), default=None,
    help="Decoding precision (default: the recipe's train.precision, as the Python API); auto: "
    "bf16 on a GPU and on CPUs with AMX (or AMD ones with AVX512-BF16), else fp32; int8 "
    "quantizes the linear layers, CPU only (the default device then).")
beam_option = click.option("--beam", type=click.IntRange(min=1), default=None,
                           help="Beam size; 1 = greedy (default: the recipe's decode.beam, 5).")
early_exit_option = click.option(
    "--early-exit/--no-early-exit", default=None,
    help="Beam search: stop a sentence once no live hypothesis, ended at the next step, would "
    "outscore the finished ones; --no-early-exit: once none could at any length, which gives "
    "what searching on to beam-size finished hypotheses would (default: the recipe's "
    "decode.early_exit, on).")
engine_option = click.option(
    "--engine", type=click.Choice(list(ENGINE_NAMES)), default=None,
    help="textbook: translate/models/ exactly as written, attention included (edit it and see); "
    "plain: the same model with PyTorch's fused attention; fast: the CPU speed work "
    "(translate.fast); gpu: plain with searches that read the device every few steps "
    "(translate.gpu); auto (the default): fast on the CPU, plain elsewhere. Translations agree "
    "to rounding.")


# `translate serve`'s limits, one option per `translate.serve.ServeConfig` field
SERVE_LIMITS = [
    click.option("--batch-wait-ms", type=click.FloatRange(min=0), default=5.0, show_default=True,
                 help="How long a request waits for others to be decoded with it (0: no wait)."),
    click.option("--max-batch", type=click.IntRange(min=1), default=64, show_default=True,
                 help="Sentences decoded in one call at most; 1 with --batch-wait-ms 0 turns "
                 "batching off (one request a call)."),
    click.option("--max-queue", type=click.IntRange(min=1), default=256, show_default=True,
                 help="Sentences waiting at most; past it requests get 429."),
    click.option("--max-texts", type=click.IntRange(min=1), default=64, show_default=True,
                 help="Sentences in one request at most; past it 400."),
    click.option("--max-beam", type=click.IntRange(min=1), default=16, show_default=True,
                 help="Largest beam a request may ask for; past it 400."),
    click.option("--max-request-bytes", type=click.IntRange(min=1), default=65536,
                 show_default=True, help="Request body size at most; past it 413."),
    click.option("--max-attention-pieces", type=click.IntRange(min=1), default=128,
                 show_default=True, help="Source pieces /attention draws at most; past it 400."),
    click.option("--max-call-work", type=click.IntRange(min=1), default=8192, show_default=True,
                 help="Work (source pieces x beam) in one decoding call at most: a request over "
                 "it is decoded in parts, with other requests served between them."),
    click.option("--max-request-work", type=click.IntRange(min=1), default=65536,
                 show_default=True, help="Work (source pieces x beam) in one request at most; "
                 "past it 413."),
    click.option("--deadline-s", type=click.FloatRange(min=0, min_open=True), default=120.0,
                 show_default=True, help="Seconds a request may take; past them 503."),
    click.option("--head-timeout-s", type=click.FloatRange(min=0, min_open=True), default=10.0,
                 show_default=True, help="Seconds a client has to send a request's headers; "
                 "then its connection is closed."),
    click.option("--body-timeout-s", type=click.FloatRange(min=0, min_open=True), default=10.0,
                 show_default=True, help="Seconds a client has to send a request's body; past "
                 "them 408."),
    click.option("--max-connections", type=click.IntRange(min=1), default=None,
                 help="Connections open at most; past it the one idle longest is closed "
                 "(default: what the descriptor limit, ulimit -n, leaves room for, at most "
                 "1024)."),
    click.option("--allow-host", "allowed_hosts", multiple=True, metavar="NAME",
                 help="A name clients may reach the server by besides its address and localhost "
                 "(repeatable); others are refused (421), so a web page cannot reach it through a "
                 "DNS name of its own. With --host 0.0.0.0 and none given, any name is accepted."),
]


def serve_limit_options(command):
    """Add the SERVE_LIMITS options to `command`, in their order."""
    for option in reversed(SERVE_LIMITS):
        command = option(command)
    return command


class NumberList(click.ParamType):
    """Comma-separated numbers, each from lowest to highest (never NaN): `1,2,4,8`."""

    name = "list"

    def __init__(self, kind: type, lowest: float, highest: float = math.inf):
        self.kind, self.lowest, self.highest = kind, lowest, highest

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            numbers = tuple(self.kind(v) for v in str(value).split(",") if v.strip())
        except ValueError:
            self.fail(f"{value!r} is not a comma-separated list of {self.kind.__name__}s",
                      param, ctx)
        if not numbers or not all(self.lowest <= n <= self.highest for n in numbers):
            bounds = (f"at least {self.lowest}" if self.highest == math.inf
                      else f"from {self.lowest} to {self.highest}")
            self.fail(f"{value!r}: give one or more values, each {bounds}", param, ctx)
        return numbers
