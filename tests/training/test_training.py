import copy
import json
import math

import torch
from torch import nn

from translate.loading import load_checkpoint
from translate.config import DecodeConfig
from translate.inference import translate_sentences
from translate.ready import Ready
from translate.training import inverse_sqrt_lr, update_ema


def test_inverse_sqrt_schedule():
    assert inverse_sqrt_lr(50, 1.0, 100) == 0.5
    assert inverse_sqrt_lr(100, 1.0, 100) == 1.0
    assert math.isclose(inverse_sqrt_lr(400, 1.0, 100), 0.5)


def test_tiny_model_learns_real_data_and_decodes(trained_run):
    run = trained_run.run_dir
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert train[0]["loss"] > 6.0  # about ln(1000) at the start
    assert train[-1]["loss"] < 0.6 * train[0]["loss"]
    valid = [r for r in records if r["kind"] == "valid"]
    assert [r["step"] for r in valid] == [100, 200, 300]
    assert valid[-1]["dev_loss"] < valid[0]["dev_loss"]
    test = [r for r in records if r["kind"] == "test"]
    assert test[0]["split"] == "test_2016_flickr" and test[0]["bleu"] > 1.0
    assert "tok:13a" in test[0]["bleu_signature"]
    hyps = (run / "test_2016_flickr.hyp.de").read_text(encoding="utf-8").splitlines()
    assert len(hyps) == 100 and sum(bool(h) for h in hyps) > 90
    assert {"recipe.yaml", "spm.model", "best.pt", "train.log"} <= {p.name for p in run.iterdir()}


def test_checkpoint_holds_everything_to_decode(trained_run):
    data = torch.load(trained_run.best_checkpoint, weights_only=True)
    assert {"model", "train_model", "recipe", "tokenizer", "step"} <= set(data)
    assert data["weights_only"] is True and "optimizer" not in data  # last.pt holds that
    last = torch.load(trained_run.run_dir / "last.pt", weights_only=True)
    assert {"model", "optimizer", "rng", "trainer"} <= set(last) and "scheduler" not in last
    assert last["step"] >= data["step"]
    assert data["tokenizer"]["special_ids"] == {"pad": 0, "unk": 1, "bos": 2, "eos": 3}
    loaded = load_checkpoint(trained_run.best_checkpoint)
    assert loaded.step == data["step"] and loaded.tokenizer.tgt_vocab_size == 1000
    out = translate_sentences(Ready(loaded.model, loaded.tokenizer),
                              ["A man is riding a bike.", "", "Two dogs play in the snow."],
                              DecodeConfig(beam=1))
    assert len(out) == 3 and out[1] == "" and out[0] and out[2]


def test_ema_ramps_up_then_tracks_the_weights():
    model = nn.Linear(2, 2)
    ema = copy.deepcopy(model)
    with torch.no_grad():
        model.weight.fill_(1.0)
        ema.weight.fill_(0.0)
    update_ema(ema, model, decay=0.999, step=0)  # ramp: d = 1/10
    torch.testing.assert_close(ema.weight, torch.full((2, 2), 0.9))
    update_ema(ema, model, decay=0.5, step=1000)  # capped: d = 0.5
    torch.testing.assert_close(ema.weight, torch.full((2, 2), 0.95))


def test_ema_run_saves_average_and_training_weights(trained_run):
    data = torch.load(trained_run.best_checkpoint, weights_only=True)
    assert data["recipe"]["train"]["ema_decay"] == 0.999
    raw, avg = data["train_model"], data["model"]
    assert raw.keys() == avg.keys()
    assert not torch.equal(raw["output.weight"], avg["output.weight"])
