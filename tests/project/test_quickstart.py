"""scripts/quickstart.py: what to expect from the chosen budget (the run's own promise, from a
recorded curve), and after training a few test translations beside their references and what to try next."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("quickstart", REPO / "scripts/quickstart.py")
quickstart = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(quickstart)


def test_the_quickstart_sizes_its_model_and_each_size_has_its_curve():
    """quickstart.sh trains the default recipe with train.size auto, whose ladder holds more than
    one recorded size, each matching its own packaged curve, so the run says what its minutes
    buy (tests/training/test_sizes.py and test_promise.py test the choice and the promise)."""
    from translate.config import load_recipe
    from translate.training.promise import find_curve
    from translate.training.sizes import ladder, sized

    assert "times a few steps of each size" in quickstart.expect(10)
    script = (REPO / "scripts/quickstart.sh").read_text()
    assert "recipes/multi30k/transformer.yaml" in script and "train.size=auto" in script
    recipe = load_recipe(REPO / "recipes/multi30k/transformer.yaml",
                         ["train.size=auto", "train.max_minutes=10", "train.eval_every_minutes=2"])
    rungs = ladder(recipe)
    assert len(rungs) >= 2 and rungs[-1].size == "base"
    for rung in rungs:
        curve, why = find_curve(sized(recipe, rung))
        assert curve == rung, why
    assert find_curve(load_recipe(REPO / "recipes/multi30k/transformer.yaml"))[0] == rungs[-1]


def test_after_training_it_shows_translations_beside_references(trained_run, small_data,
                                                                  monkeypatch):
    monkeypatch.setenv("TRANSLATE_DATA", str(small_data))
    shown = quickstart.show(trained_run.run_dir)
    assert shown.count("\n  en   ") == 3 and shown.count("\n  ref  ") == 3
    assert f"translate serve {trained_run.run_dir}" in shown and "docs/tour.md" in shown
