"""`translate decode`'s input and output: lines in, translations out, nothing lost.

The input is read lazily in chunks (or a line at a time when interactive), so a file of millions
of lines never sits in memory. An output file is written beside its final path and renamed over
it only when every line is translated: an error half-way (an invalid byte on line 90,000, Ctrl-C)
leaves the old file, if any, as it was; an output that is a link is written at the file it links
to, the link kept. A FIFO or a character device (`-o /dev/stdout`) is written into as it is,
never replaced. An output that is the same file as the input, standard input, the checkpoint
or a checkpoint of any name is refused before anything is opened for writing, as is standard
output that is the input file (`> input.en`, `>> input.en`). `decode_file` is the whole
command: load, check, translate.

Tests: tests/test_cli.py, tests/test_loading.py, tests/reliability/test_named_files.py.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO, Iterator, TextIO

from translate.alignment import Reading, pharaoh
from translate.config import decode_options
from translate.data import DataError
from translate.data.read import iter_lines
from translate.files import output_clash, output_kind
from translate.inference import decode_sentences
from translate.locate import Location, check_output_free, locate
from translate.markup import Marked, MarkupError, restore, strip
from translate.ready import Ready
from translate.utils import atomic_write


class OptionError(ValueError):
    """Options that contradict each other or the checkpoint: the command line's usage error."""


def decode_file(checkpoint: str, input_path: str = "-", output_path: str = "-", nbest: int = 1,
                scores: bool = False, chunk: int = 10_000, device: str | None = None,
                precision: str | None = None, engine: str | None = None, prompt: str = "",
                progress: bool = False, alignments: str | None = None,
                reading: Reading = Reading(), markup: bool = False, **options) -> None:
    """`translate decode`: translate the lines of `input_path` (- = stdin) with `checkpoint` into
    `output_path` (- = stdout), `chunk` lines at a time (1: each as soon as it is read).

    `device`, `precision` and `engine` as `Ready.load` takes them (None: its defaults);
    `options` (beam, lenpen, early_exit, max_tokens, batch_size; None: the recipe's) set the
    decoding; `prompt`, if any, goes to stderr once the model is ready to translate. With
    `alignments` (a file, written as the output is), each translation's word alignment, read
    from the attention as `reading` says: one Pharaoh line (`i-j`, source word first, from 0)
    per output line (per hypothesis with `nbest`). With `markup`, inline tags in the input are
    carried to the output words aligned to the words they hold (`translate.markup`); a line
    whose markup cannot be carried is a DataError naming it, before anything is written."""
    model = locate(checkpoint)  # what the path names, decided once for the checks and the load
    check_output(output_path, input_path, model)
    if alignments is not None:
        check_output(alignments, input_path, model, "--alignments")
        if alignments == "-" or os.path.abspath(alignments) == os.path.abspath(output_path) \
                or output_clash(alignments, {"the translations' output":
                                             1 if output_path == "-" else output_path}):
            raise OptionError(f"--alignments {alignments} would be written into the "
                              f"translations: give it a file of its own")
    ready = Ready.load(model, device, precision, engine)
    cfg = decode_options(ready.recipe.decode, **options)
    if nbest > cfg.beam:
        raise OptionError(f"--nbest ({nbest}) cannot exceed the beam size ({cfg.beam})")
    if prompt:
        print(prompt, file=sys.stderr, flush=True)
    with (open_input(input_path) as source, open_output(output_path) as sink,
          open_output(alignments) if alignments else nullcontext() as links):
        first = 0
        for lines in chunks(source, input_path, chunk):
            marked = [_strip(line, first + i, input_path) for i, line in enumerate(lines)] \
                if markup else None
            found = decode_sentences(ready, [m.text for m in marked] if markup else lines, cfg,
                                     progress=progress, nbest=nbest, with_scores=scores,
                                     alignments=reading if alignments or markup else None)
            if markup:
                found = [[replace(h, text=restore(m, h.text, h.alignment)) for h in hyps]
                         for m, hyps in zip(marked, found)]
            sink.write("".join(format_hypotheses(first + i, hyps, nbest, scores)
                               for i, hyps in enumerate(found)))
            sink.flush()
            if links is not None:
                links.write("".join(pharaoh(h.alignment) + "\n" for hyps in found
                                    for h in hyps[:nbest]))
                links.flush()
            first += len(lines)


def _strip(line: str, index: int, input_path: str) -> Marked:
    try:
        return strip(line)
    except MarkupError as e:
        name = "stdin" if input_path == "-" else input_path
        raise DataError(f"{name}, line {index + 1}: {e}") from None


def open_input(path: str):
    """A binary stream of the source lines: the file at `path`, or stdin for "-"."""
    if path == "-":
        return nullcontext(sys.stdin.buffer)
    p = Path(path)
    if not p.exists():
        raise DataError(f"input file not found: {p}")
    if p.is_dir():
        raise DataError(f"input is a folder, not a file: {p}")
    return open(p, "rb")


def check_output(output_path: str, input_path: str, model: Location | None = None,
                 option: str = "-o") -> None:
    """Refuse an output that cannot be written, or whose writing would destroy what is read:
    the input (under any name, or as standard input), any of the model's files
    (`locate.check_output_free`: a run's or an export's, by identity or by a name the run
    writes), or any checkpoint file; and standard output that is the input file."""
    reads = {"the input file": input_path} if input_path != "-" else {"standard input": 0}
    if input_path != "-" and output_clash(input_path, {"standard output": 1}):
        raise DataError(f"standard output is the input file {input_path}: translating into it "
                        f"would destroy (or, appended, re-read) the sentences being read; "
                        f"redirect it to another file, or give -o")
    if output_path == "-":
        return
    out = Path(output_path)
    kind = output_kind(out)
    if kind == "a folder":
        raise DataError(f"output is a folder, not a file: {out}")
    if kind is not None and kind not in ("a FIFO (named pipe)", "a character device"):
        raise DataError(f"the output {out} is {kind}; give a file, a FIFO or a device to write")
    if not out.parent.is_dir():
        raise DataError(f"the output's folder does not exist: {out.parent}")
    clash = output_clash(out, reads)
    if clash:
        raise DataError(f"the output {out} is {clash}: translating into it would destroy "
                        f"what is being read; choose another {option}")
    check_output_free(out, [model] if model is not None else [], option=option)
    if kind is None and out.exists() and _is_checkpoint(out):
        raise DataError(f"the output {out} is a checkpoint; translations would replace it: "
                        f"choose another {option}")


def _is_checkpoint(path: Path) -> bool:
    """Whether the regular file at `path` starts as torch.save's archives do."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"PK\x03\x04"
    except OSError:
        return False


@contextmanager
def open_output(path: str) -> Iterator[TextIO]:
    """A text stream for the translations: stdout for "-" (or a name of it, as /dev/stdout
    is, whatever file the shell sent it to); a FIFO or device as it is; else
    `utils.atomic_write` at the file `path` names (through links), which becomes that file
    only when the block ends without an error."""
    if path == "-" or output_clash(path, {"standard output": 1}):  # -o /dev/stdout
        yield sys.stdout
        return
    if output_kind(path) is not None:  # a FIFO or a character device: never replaced
        with open(path, "w", encoding="utf-8") as sink:
            yield sink
        return
    with atomic_write(os.path.realpath(path), "w") as sink:
        yield sink


def chunks(stream: BinaryIO, name: str, size: int) -> Iterator[list[str]]:
    """Lists of up to `size` decoded lines; the stream is read lazily."""
    lines = []
    for line in iter_lines(stream, "stdin" if name == "-" else name):
        lines.append(line)
        if len(lines) == size:
            yield lines
            lines = []
    if lines:
        yield lines


def read_lines(path: str) -> list[str]:
    """All lines of a file (or stdin for -), with the same checks as `decode`'s input: a
    missing file, a folder or a byte that is not UTF-8 (its line named) is a DataError. The one
    whole-file line reader (`translate evaluate --hyp --ref` reads with it); the data path
    streams its lines (`data.read.iter_lines`)."""
    with open_input(path) as stream:
        return list(iter_lines(stream, "stdin" if path == "-" else path))


def format_hypotheses(index: int, hyps, nbest: int, scores: bool) -> str:
    """One input line's output: the translation (with its score and log-probability when
    `scores`), or with `nbest` > 1 one `index ||| text ||| score logprob` line per hypothesis."""
    if nbest > 1:
        return "".join(f"{index} ||| {h.text} ||| {h.score:.4f} {h.logprob:.4f}\n" for h in hyps)
    h = hyps[0]
    return f"{h.text}\t{h.score:.4f}\t{h.logprob:.4f}\n" if scores else h.text + "\n"
