"""The `translate` command: train, decode, evaluate, tune-beam, compare, attention, align-score,
curve, serve, export, average. Each command parses, then calls one function."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from translate.analysis.plots import CURVE_AXES
from translate.cli_errors import USER_ERRORS, Commands, fail, fail_together
from translate.cli_options import (NumberList, beam_option, device_option, early_exit_option,
                                   engine_option, precision_option, serve_limit_options)
from translate.config import RESUME_KEYS
from translate.model_folder import DTYPES
from translate.training.distributed import RankFailed
from translate.utils import install_hint


def _env_data() -> str | None:
    """TRANSLATE_DATA, read here alone: the dataset a command reads when --data gives none."""
    return os.environ.get("TRANSLATE_DATA") or None


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="translate-nmt")
@click.option("-v", "--verbose", is_flag=True,
              help="Log debug messages; show the traceback of an unexpected failure.")
def main(verbose: bool) -> None:
    """translate: encoder-decoder machine translation (Transformer, attention RNN)."""
    from translate.utils import log_to_console

    log_to_console(verbose)
    if sys.stdout is None:  # started with standard output closed (`>&-`)
        raise click.ClickException("standard output is closed: what the command prints would be "
                                   "lost; redirect it to a file, or to /dev/null to drop it")


@main.command()
@click.argument("recipe", required=False, type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a recipe value, e.g. --set model.encoder_layers=4 (repeatable). "
              f"With --resume only these train keys: {', '.join(RESUME_KEYS)}.")
@click.option("--run-dir", type=click.Path(file_okay=False), default=None,
              help="Output folder (default runs/<recipe name>-<time>).")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False), default=None,
              metavar="RUN_DIR", help="Continue the run in RUN_DIR from its newest readable "
              "checkpoint, with its own recipe.yaml (no RECIPE argument).")
@click.option("--data", "data_path", default=None, metavar="PATH_OR_HUB_NAME",
              help="Dataset to use instead of the recipe's (same as TRANSLATE_DATA); with "
              "--resume, the same data in another place.")
@click.option("--overwrite", is_flag=True,
              help="Start over in a --run-dir that holds a run (its run.json names it), "
              "deleting the files that run wrote and nothing else (without it, such a folder "
              "is refused).")
@click.option("--adopt", is_flag=True,
              help="With --resume: resume a RUN_DIR that has no run.json (lost, or from before "
              "run ids), taking the run its newest checkpoint names as the folder's and writing "
              "run.json anew (without it, such a folder is refused).")
@click.option("--seeds", type=NumberList(int, 0), default=None, metavar="N,N,...",
              help="Train the recipe once per seed (train.seed=N), one run after another, into "
              "RUN_DIR-seedN each, then print every score's mean ± sd over the seeds.")
@device_option
@click.option("--no-progress", is_flag=True,
              help="No progress bars (there are none unless stderr is a terminal).")
def train(recipe, overrides, run_dir, resume_dir, data_path, overwrite, adopt, seeds, device,
          no_progress):
    """Train a model from a RECIPE (YAML), then score it on the recipe's test splits.

    What the run reports goes to stderr and into RUN_DIR/train.log.

    SIGINT (Ctrl-C) or SIGTERM saves RUN_DIR/last.pt and stops (exit code 128 + signal);
    `translate train --resume RUN_DIR` goes on from there, as does a run killed outright, from
    its newest checkpoint (last.pt every train.save_every steps, step_N.pt at validation).
    """
    from translate.training import Interrupted, train as run_training
    from translate.training.build import training_device
    from translate.training.distributed import join, together

    if seeds is not None:
        _train_seeds(recipe, overrides, run_dir, resume_dir, data_path, overwrite, seeds, device,
                     progress=not no_progress and sys.stderr.isatty())
        return
    try:
        # Under torchrun the processes join first, so that one that cannot read the recipe or
        # the run folder fails them all, with one message.
        with together(join(training_device(device))):
            cfg, run_dir = _train_recipe(recipe, overrides, run_dir, resume_dir, data_path,
                                         overwrite, adopt)
        run_training(cfg, run_dir, device, progress=not no_progress and sys.stderr.isatty(),
                     resume=bool(resume_dir), overwrite=overwrite,
                     dataset=None if data_path else _env_data(), adopt=adopt)
    except RankFailed as e:
        fail_together(e)
    except Interrupted as e:  # rank 0, which saved the checkpoint, has logged it
        sys.exit(128 + e.signum)
    except USER_ERRORS as e:
        fail(e)


def _train_seeds(recipe, overrides, run_dir, resume_dir, data_path, overwrite, seeds, device,
                 progress):
    """`translate train --seeds`: train the recipe once per seed, then print the spread."""
    from translate.analysis.seeds import seed_spread, spread_text
    from translate.training import Interrupted
    from translate.training.seeds import train_seeds

    if resume_dir:
        raise click.UsageError("--seeds starts new runs, --resume goes on with one: resume each "
                               "seed's folder on its own (--resume RUN_DIR-seedN)")
    if any(o.split("=", 1)[0].strip() == "train.seed" for o in overrides):
        raise click.UsageError("--seeds sets train.seed for each run: drop --set train.seed")
    try:
        cfg, run_dir = _train_recipe(recipe, overrides, run_dir, None, data_path, overwrite)
        results = train_seeds(cfg, run_dir, seeds, device, progress, overwrite,
                              None if data_path else _env_data())
        spread = seed_spread([r.run_dir for r in results])
    except Interrupted as e:
        sys.exit(128 + e.signum)
    except USER_ERRORS as e:
        fail(e)
    click.echo(spread_text(spread, [f"seed {s}" for s in seeds]))


def _train_recipe(recipe: str | None, overrides: tuple, run_dir: str | None,
                  resume_dir: str | None, data_path: str | None, overwrite: bool = False,
                  adopt: bool = False):
    """The recipe and run folder `translate train`'s arguments name."""
    from translate.config import load_recipe
    from translate.training.checkpoints import load_run_recipe

    if resume_dir:
        if recipe or run_dir or overwrite:
            raise click.UsageError("--resume RUN_DIR takes no RECIPE, --run-dir or --overwrite: "
                                   "the run folder holds its recipe")
        return load_run_recipe(Path(resume_dir), overrides, data_path, adopt), Path(resume_dir)
    if adopt:
        raise click.UsageError("--adopt goes with --resume RUN_DIR")
    if not recipe:
        raise click.UsageError("give a RECIPE, or --resume RUN_DIR")
    data = [f"data.dataset={data_path}"] if data_path else []
    run_dir = run_dir or f"runs/{Path(recipe).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    return load_recipe(recipe, (*overrides, *data)), Path(run_dir)


@main.command()
@click.argument("checkpoint", type=click.Path())
@click.option("-i", "--input", "input_path", default="-",
              help="Source sentences, one a line (- = stdin).")
@click.option("-o", "--output", "output_path", default="-", help="Translations (- = stdout).")
@beam_option
@click.option("--nbest", type=click.IntRange(min=1), default=1, show_default=True,
              help="Hypotheses per sentence (<= beam), written as 'i ||| text ||| score logprob'.")
@click.option("--lenpen", type=float, default=None,
              help="Length penalty alpha, ((5 + len) / 6) ** alpha (default: the recipe's).")
@early_exit_option
@click.option("--scores", is_flag=True,
              help="Write 'text<TAB>score<TAB>logprob': score = logprob / length penalty.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=None,
              help="Source tokens per batch.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Sentences per batch (also capped by --max-tokens).")
@click.option("--chunk", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Lines read, decoded and written at a time, so any input size fits in memory.")
@click.option("--interactive", is_flag=True, help="Translate each line as soon as it is typed "
              "(the default when stdin is a terminal).")
@click.option("--alignments", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Also write each translation's word alignment to FILE: 'i-j' links (source "
              "word i, output word j, from 0), a line per output line.")
@click.option("--align-layer", type=int, default=None, metavar="L",
              help="Read alignments from cross-attention layer L (from 0; -1 the last; "
              "default: the one chosen on gold/multi30k/dev).")
@click.option("--align-head", type=click.IntRange(min=0), default=None, metavar="H",
              help="Read alignments from head H alone (default: the layer's heads averaged).")
@click.option("--markup", is_flag=True,
              help="Keep inline tags (<b>...</b>, <x/>) of the input: each is carried to the "
              "output words aligned to the words it holds.")
@device_option
@precision_option
@engine_option
def decode(checkpoint, input_path, output_path, beam, nbest, lenpen, early_exit, scores,
           max_tokens, batch_size, chunk, interactive, alignments, align_layer, align_head,
           markup, device, precision, engine):
    """Translate raw sentences with a CHECKPOINT (a .pt file or a run folder).

    At a terminal (no -i, stdin not redirected) it is interactive: each line is translated as
    soon as it is typed.
    """
    from translate.alignment import Reading
    from translate.decode_io import OptionError, decode_file

    for option, value in (("--align-layer", align_layer), ("--align-head", align_head)):
        if value is not None and not (alignments or markup):
            raise click.UsageError(f"{option} says where alignments are read: give it with "
                                   f"--alignments FILE or --markup, which read them")
    reading = Reading(head=align_head) if align_layer is None else Reading(align_layer, align_head)

    at_terminal = input_path == "-" and sys.stdin.isatty()
    prompt = "type a sentence and press Enter (Ctrl-D to quit)" if at_terminal else ""
    try:
        decode_file(checkpoint, input_path, output_path, nbest=nbest, scores=scores,
                    chunk=1 if interactive or at_terminal else chunk, device=device,
                    precision=precision, engine=engine, prompt=prompt,
                    progress=output_path != "-" and sys.stderr.isatty(), beam=beam,
                    lenpen=lenpen, early_exit=early_exit, max_tokens=max_tokens,
                    batch_size=batch_size, alignments=alignments, reading=reading,
                    markup=markup)
    except OptionError as e:
        raise click.UsageError(str(e)) from None
    except USER_ERRORS as e:
        fail(e)


@main.command()
@click.argument("checkpoint", required=False, type=click.Path())
@click.option("--split", "splits", multiple=True, help="Split to score (repeatable; default: the "
              "recipe's test splits).")
@click.option("--data", "data_path", default=None, help="Dataset instead of the recipe's.")
@click.option("--hyp", type=click.Path(dir_okay=False), help="Hypothesis file (with --ref).")
@click.option("--ref", type=click.Path(dir_okay=False), help="Reference file (with --hyp).")
@click.option("--lang", default=None, help="Target language for legacy tokenization (default de).")
@beam_option
@click.option("--lenpen", type=float, default=None, help="Length penalty alpha for beam search.")
@early_exit_option
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@device_option
@precision_option
@engine_option
def evaluate(checkpoint, splits, data_path, hyp, ref, lang, beam, lenpen, early_exit, as_json,
             device, precision, engine):
    """Score a CHECKPOINT on named splits, or score --hyp against --ref."""
    from translate.evaluation import score_checkpoint, score_files, scores_report

    try:
        if hyp or ref:
            if not (hyp and ref) or checkpoint:
                raise click.UsageError("give --hyp and --ref together, without a checkpoint")
            results = score_files(hyp, ref, lang)
        elif checkpoint:
            results = score_checkpoint(checkpoint, splits, data_path or _env_data(), device,
                                       beam, lenpen, precision, engine,
                                       progress=sys.stderr.isatty(), early_exit=early_exit)
        else:
            raise click.UsageError("give a CHECKPOINT, or --hyp and --ref")
    except USER_ERRORS as e:
        fail(e)
    for block in scores_report(results, as_json):
        click.echo(block)


@main.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@click.option("--split", default="test_2016_flickr", show_default=True,
              help="Split every run decodes and is scored on.")
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False),
              help="Report folder: report.md, results.json, figures, hypotheses.")
@click.option("--data", "data_path", default=None, metavar="PATH_OR_HUB_NAME",
              help="Dataset instead of the first run's recipe's (same as TRANSLATE_DATA).")
@device_option
@click.option("--samples", type=click.IntRange(min=0), default=5, show_default=True,
              help="Sample translations shown side by side.")
@click.option("--beam", type=click.IntRange(min=1), default=5, show_default=True,
              help="Every system's beam size; 1 = greedy.")
@click.option("--gold", type=click.Path(file_okay=False), default=None, metavar="FOLDER",
              help="Word alignment gold set (FOLDER/dev.* and FOLDER/test.*) to score each "
              "system's attention on (default: gold/multi30k for English to German).")
@engine_option
def compare(runs, split, output, data_path, device, samples, beam, gold, engine):
    """Compare RUNS on one split and write a Markdown report; the first run is the baseline.

    A run is a run folder, whose best.pt decodes, or a checkpoint inside one (an average of the
    last checkpoints, say) with the folder's metrics log. Each decodes the split now (beam 5
    unless --beam says otherwise). The report has a table per system, sacreBLEU's paired
    bootstrap test, BLEU by source length, learning curves, attention maps, each system's
    attention scored as word alignments (AER) and sample translations.
    """
    from translate.analysis.compare import compare as run_compare
    from translate.analysis.report import findings

    try:
        results = run_compare(runs, split, output, data_path or _env_data(), device, samples,
                              progress=sys.stderr.isatty(), engine=engine, beam=beam,
                              gold=gold)
    except USER_ERRORS as e:
        fail(e)
    click.echo("\n".join(findings(results)))
    click.echo(f"\nreport: {Path(output) / 'report.md'}")


@main.command("tune-beam")
@click.argument("checkpoint", type=click.Path())
@click.option("--split", default="dev", show_default=True,
              help="The dev split to choose on (a test split is refused).")
@click.option("--data", "data_path", default=None, metavar="PATH_OR_HUB_NAME",
              help="Dataset instead of the recipe's.")
@click.option("--beams", type=NumberList(int, 1), default="1,2,4,5,8", show_default=True,
              help="Beam sizes to try.")
@click.option("--lenpens", type=NumberList(float, 0), default="0,0.3,0.6,1,1.5",
              show_default=True, help="Length penalties (GNMT alpha) to try.")
@click.option("-o", "--output", type=click.Path(file_okay=False), default=None,
              help="Folder for sweep.json, sweep.md and sweep.png.")
@early_exit_option
@device_option
@precision_option
@engine_option
def tune_beam(checkpoint, split, data_path, beams, lenpens, output, early_exit, device,
              precision, engine):
    """Choose the beam size and length penalty for a CHECKPOINT on a dev split: decode it with
    every pair of --beams and --lenpens, print the BLEU table and the best setting."""
    from translate.analysis.beam_sweep import summary, sweep_beams, write_sweep

    try:
        sweep = sweep_beams(checkpoint, split, beams, lenpens, data_path or _env_data(), device,
                            precision, engine, early_exit,
                            lambda point: click.echo(point.line(), err=True))
        written = write_sweep(sweep, output) if output else []
    except USER_ERRORS as e:
        fail(e)
    click.echo(summary(sweep))
    for path in written:
        click.echo(f"wrote {path}")


@main.command()
@click.argument("checkpoint", type=click.Path())
@click.option("--text", required=True, help="The source sentence to translate.")
@click.option("-o", "--output", default="attention.png", show_default=True,
              type=click.Path(dir_okay=False), help="PNG file to write.")
@device_option
def attention(checkpoint, text, output, device):
    """Draw the attention maps of a CHECKPOINT's (file or run folder) translation of --text.

    A Transformer gets a grid (encoder self-attention, decoder causal self-attention and
    cross-attention; one column per layer, heads averaged); an RNN its alignment matrix.
    """
    from translate.analysis.attention import draw_attention

    try:
        maps, path = draw_attention(checkpoint, text, output, device)
    except USER_ERRORS as e:
        fail(e)
    click.echo(f"translation: {maps.translation}")
    click.echo(f"figure: {path}")


@main.command("align-score")
@click.argument("checkpoint", type=click.Path())
@click.argument("gold", metavar="GOLD_PREFIX")
@click.option("--format", "fmt", type=click.Choice(["pharaoh", "talp"]), default="pharaoh",
              show_default=True, help="How GOLD_PREFIX.links counts words: pharaoh from 0, talp "
              "from 1 (both: i-j sure, ipj possible).")
@click.option("--choose-on", default=None, metavar="DEV_PREFIX",
              help="Score only the reading of least AER on this gold set (and the best with "
              "heads averaged): choose on a dev part, report on a test part.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Also write every reading's scores to this JSON file.")
@device_option
def align_score(checkpoint, gold, fmt, choose_on, json_path, device):
    """Score how well a CHECKPOINT's attention aligns words against a gold set: GOLD_PREFIX.<src>,
    GOLD_PREFIX.<tgt> (one sentence a line, in the recipe's languages) and GOLD_PREFIX.links.

    Prints AER (lower is better, with a 95% interval), precision and recall of every reading
    (each cross-attention layer and head, heads averaged, shifted or not) and of a diagonal
    baseline. The project's set: gold/multi30k/dev to choose, gold/multi30k/test to report
    (`translate align-score RUN gold/multi30k/test --choose-on gold/multi30k/dev`).
    """
    from translate.analysis.align_score import align_score as score, score_table, write_scores
    from translate.locate import check_output_free, locate

    try:
        if json_path:
            golds = [Path(p) for p in (gold, choose_on) if p]
            reads = {f"the gold file {f}": f for p in golds for f in p.parent.glob(f"{p.name}.*")}
            check_output_free(json_path, [locate(checkpoint)], reads, "--json")
        _, scored = score(checkpoint, gold, fmt, device, choose_on=choose_on)
        written = write_scores(scored, json_path) if json_path else None
    except USER_ERRORS as e:
        fail(e)
    click.echo(score_table(scored))
    if written:
        click.echo(f"wrote {written}")


@main.command()
@click.argument("checkpoint", type=click.Path())
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="Port to listen on; 0 picks a free one (the startup line names it).")
@device_option
@precision_option
@engine_option
@serve_limit_options
def serve(checkpoint, host, port, device, precision, engine, **limits):
    """Serve a CHECKPOINT (a .pt file or a run folder) over HTTP, with a page at /.

    POST /translate {"texts": [...], "beam": 5, "nbest": 1}; POST /attention {"text": ...,
    "target": ...} (target: optional, a translation to draw instead of the greedy one);
    GET /health. Requests from many clients are decoded together (--batch-wait-ms, --max-batch).
    """
    try:
        from translate.serve import ServeConfig, serve as run_server
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in ("starlette", "uvicorn"):
            raise
        fail(ModuleNotFoundError(f"translate serve needs Starlette and uvicorn: "
                                 f"{install_hint('serve')}; no module named {e.name!r}"))
    limits = {k: v for k, v in limits.items() if v is not None}  # None: the default
    try:
        run_server(checkpoint, ServeConfig(**limits), host, port, device, precision, engine)
    except KeyboardInterrupt:  # uvicorn stopped gracefully, then raised the signal again
        sys.exit(130)
    except USER_ERRORS as e:
        fail(e)


@main.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", default="curve.png", show_default=True,
              type=click.Path(dir_okay=False), help="PNG file to write.")
@click.option("--monitor", default="test_2016_flickr", show_default=True,
              help="Also draw this monitored split's BLEU where the runs logged it.")
@click.option("--x", "x", type=click.Choice(list(CURVE_AXES)), default="minutes",
              show_default=True, help="The x axis: training wall-clock, or optimizer steps "
              "(which compare runs made on machines of different speed).")
@click.option("--reach", type=NumberList(float, 0, 100), default=None, metavar="BLEU,...",
              help="Dev BLEU thresholds, e.g. 30,35: print when each run first reached each "
              "(minutes, step, training minutes) and draw them as dotted lines.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the --reach figures to this JSON file.")
def curve(run_dirs, output, monitor, x, reach, json_path):
    """Plot dev BLEU against training wall-clock (or steps) for one or more RUN_DIRS."""
    from translate.analysis.reach import curve as write_curve
    from translate.locate import check_output_free, locate

    try:
        if json_path:
            check_output_free(json_path, [locate(run_dir) for run_dir in run_dirs], option="--json")
        click.echo("\n".join(write_curve(run_dirs, output, monitor, x, reach or (), json_path)))
    except USER_ERRORS as e:
        fail(e)


@main.command("export")
@click.argument("checkpoint", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["inference", "ctranslate2", "hf"]),
              default="inference", show_default=True,
              help="inference: model.safetensors + spm.model + config.json, which decode, "
              "evaluate and Translator.load read; ctranslate2: a CTranslate2 model; hf: a "
              "transformers Pegasus model (the last two: Transformer only).")
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False),
              help="The new folder to write.")
@click.option("--dtype", type=click.Choice(list(DTYPES)), default=None,
              help="inference and hf: the weights' precision (default fp32; bf16/fp16 halve it).")
@click.option("--quantization", default=None, metavar="TYPE",
              help="ctranslate2: int8, int8_float16, int16, float16, bfloat16... (default "
              "float32).")
def export_command(checkpoint, fmt, output, dtype, quantization):
    """Write a CHECKPOINT's (a .pt or a run folder's best.pt) model for users to run: its
    weights (the EMA or averaged ones) without the training state."""
    from translate.export import export

    try:
        click.echo(export(checkpoint, fmt, output, dtype, quantization).summary())
    except USER_ERRORS as e:
        fail(e)


@main.command()
@click.argument("run_dir", type=click.Path())
@click.option("--last", type=click.IntRange(min=2), default=5, show_default=True,
              help="How many of the newest step_N.pt checkpoints to average.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Checkpoint to write (default RUN_DIR/average_last<N>.pt, or _raw.pt).")
@click.option("--raw", is_flag=True,
              help="Average the optimizer's own weights, not the EMA ones the run validates "
              "(where it keeps an EMA).")
@click.option("--force", is_flag=True,
              help="Replace the output file if it exists (never a run's best.pt, last.pt or "
              "step_N.pt).")
def average(run_dir, last, output, raw, force):
    """Average the weights of RUN_DIR's last step checkpoints into one checkpoint that decode,
    evaluate and export read. Train with --set train.keep_last=N to keep N of them."""
    from translate.averaging import average_checkpoints

    try:
        result = average_checkpoints(run_dir, last, output, raw, force)
    except USER_ERRORS as e:
        fail(e)
    click.echo(f"averaged {', '.join(p.name for p in result.inputs)} into {result.path}")


if __name__ == "__main__":
    main()
