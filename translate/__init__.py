"""translate: encoder-decoder machine translation in PyTorch.

The package, a line a file or subpackage, each layer above the ones it may import (setup.cfg's
[importlinter] contracts, which tests/project/test_layers.py checks):

    __main__.py      `python -m translate` and the `translate` command: the allocator, then
                     the command below
    cli.py           the `translate` command: each command parses, then calls one function
    cli_errors.py    how a command fails: one `Error:` line, once across torchrun's ranks
    cli_options.py   options several commands share, and parameter types
    serve/           `translate serve`: the server, its batcher, its page, and the command run
                     in a subprocess
    api.py           the Python API: `Translator`, a trained model loaded once
    toy.py           copy and reverse: toy tasks whose right attention is known, trained in a
                     minute
    analysis/        comparison reports, attention maps, beam sweeps, time to quality, figures,
                     gold alignments and AER
    training/        `train()`: a recipe in, a run folder out
    evaluation.py    decode a split and score it, written once for every caller
    decode_io.py     `translate decode`'s input and output: lines in, translations out
    inference.py     raw sentences in, translations out: batched, n-best with scores
    ready.py         a model made ready to decode: its device, precision and engine, set once
    averaging.py     `translate average`: the mean of a run's last step checkpoints
    markup.py        inline tags kept through translation, carried by the word alignment
    export/          `translate export`: inference, CTranslate2 and transformers folders
    engine.py        the engines (textbook, plain, fast, gpu), applied once where a run is set up
    run_folder.py    a run folder's identity (run.json), claiming it, its lock
    alignment.py     word alignments read from attention
    loading.py       the loading room: a path located once, read by its format, checked once,
                     built into a model
    gpu/             the gpu engine's searches and the chunked loss
    checkpoint.py    self-describing checkpoints: the .pt format, read and written
    data/            the data path, a module a step: read, clean, encode, cache, batch
    fast/            the fast engine: the CPU speed work, applied to a built model
    search.py        greedy and beam search over any model of the seq2seq interface
    tokenizer.py     SentencePiece: train on the training split, save, encode
    locate.py        what a model path is (run, checkpoint, export) and its files, which no
                     output may be
    models/          the textbook: attention, the Transformer, the RNN, their interface
    metrics.py       the run's metrics log (metrics.jsonl), mirrored to TensorBoard
    model_folder.py  the exported model folder's format, read as a checkpoint
    hardware.py      the machine: the device, the precisions, what the CPU offers, the RAM guard
    config/          recipes: frozen dataclasses loaded strictly from YAML, and the names of
                     the runtime's choices (engines, precisions, activations) they take
    tokens.py        the special token ids
    utils.py         small helpers: logging, seeding and random states, stop signals, atomic
                     writes
    yaml_limits.py   YAML read with bounded work
    paths.py         data paths written relative to a folder and read back from it
    files.py         files opened only when they are what they should be (trusted reads: size
                     capped, digest streamed before reading), compared by identity
    allocator.py     `translate train` under jemalloc (or tcmalloc) where the system has one
    loss.py          label-smoothed cross-entropy
    scoring.py       sacreBLEU and chrF with signatures, legacy BLEU, paired bootstrap
    weights.py       a state dict checked before a model is built: fit, finiteness, old names

The names below load on first use, so that importing one light module (as the encoding worker
processes do with `translate.data.encode`) does not import torch and the models.
"""

import importlib

__version__ = "0.1.0"
_LAZY = {"Translator": "translate.api",
         "Recipe": "translate.config", "load_recipe": "translate.config",
         "MODELS": "translate.models", "RNNSeq2Seq": "translate.models",
         "Seq2Seq": "translate.models", "Transformer": "translate.models",
         "build_model": "translate.models"}
__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'translate' has no attribute {name!r}")
