"""The export snippets of the docs run as printed: each fenced python block after a
`<!-- snippet: FORMAT -->` line in README.md or docs/*.md is run against a fresh export of the
tests' tiny model (its folder substituted for `exports/RUN-...`) and must print our
translations."""

import ast
import re
from dataclasses import replace
from pathlib import Path

import pytest

from translate.loading import load_checkpoint
from translate.export import export
from translate.inference import decode_sentences, translate_sentences
from translate.ready import Ready

REPO = Path(__file__).resolve().parents[2]
SNIPPET = re.compile(r"<!-- snippet: (\w+) -->\n```python\n(.*?)```", re.S)
FOLDER = {"hf": "exports/RUN-hf", "ctranslate2": "exports/RUN-ct2"}


def snippets() -> list[tuple[str, str, str]]:
    """(page, format, code) of every marked snippet."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return [(page.relative_to(REPO).as_posix(), fmt, code) for page in pages
            for fmt, code in SNIPPET.findall(page.read_text(encoding="utf-8"))]


def test_the_usage_page_marks_both_peer_snippets():
    assert {fmt for page, fmt, _ in snippets() if page == "docs/usage.md"} == set(FOLDER)


@pytest.mark.parametrize("page, fmt, code", [pytest.param(*s, id=f"{s[0]}:{s[1]}")
                                                for s in snippets()])
def test_a_snippet_prints_our_translations(page, fmt, code, trained_run, tmp_path, capsys):
    pytest.importorskip({"hf": "transformers"}.get(fmt, fmt))
    assert FOLDER[fmt] in code, f"{page}: the {fmt} snippet loads no {FOLDER[fmt]}"
    out = export(trained_run.run_dir, fmt, tmp_path / fmt).out
    exec(compile(code.replace(FOLDER[fmt], str(out)), f"{page} ({fmt})", "exec"), {})
    printed = ast.literal_eval(capsys.readouterr().out.strip().splitlines()[-1])
    sentences = ast.literal_eval(re.search(r"\[\"A man.*?\]", code, re.S).group(0))
    loaded = load_checkpoint(trained_run.run_dir)
    ready = Ready(loaded.model, loaded.tokenizer)
    if fmt == "hf":  # generate with the saved settings: the recipe's search
        assert printed == translate_sentences(ready, sentences, loaded.recipe.decode)
    else:  # CTranslate2 ranks by logprob / length: one of the beam's finished hypotheses
        cfg = replace(loaded.recipe.decode, beam=5, early_exit=False)
        found = decode_sentences(ready, sentences, cfg, nbest=5)
        assert all(text in [t.text for t in hyps] for text, hyps in zip(printed, found))
    assert len(printed) == len(sentences) and all(printed)
