"""train.optimizer muon: Muon for the hidden layers' weight matrices, AdamW for every other
parameter, each parameter in exactly one of them; both follow the learning-rate schedule."""

import math
import re

import pytest
import torch

from helpers.training import tiny_trainer
from translate.config import load_recipe
from translate.models import build_model
from translate.training.optim import make_muon, make_optimizer, muon_split

# What Muon must take, by name; everything else is AdamW's.
TRANSFORMER_HIDDEN = (r"(en|de)coder_layers\.\d\.((self|cross)_attn\.(q|k|v|out)_proj|"
                      r"ffn\.fc[12])\.weight")
RNN_HIDDEN = (r"encoder\.weight_(ih|hh)_l0(_reverse)?|cell\.weight_(ih|hh)|"
              r"(init_proj|attention\.query_proj|attention\.key_proj|deep_output)\.weight")
SMALL = {"transformer": ["model.d_model=32", "model.heads=2", "model.ffn_dim=64",
                         "model.encoder_layers=2", "model.decoder_layers=2"],
         "rnn": ["model.arch=rnn", "model.embed_dim=16", "model.encoder_hidden=16",
                 "model.decoder_hidden=24", "model.attn_dim=16"]}


def small_model(arch: str, *overrides: str, joint: bool = True):
    cfg = load_recipe(None, [*SMALL[arch], *overrides])
    return build_model(cfg.model, 50, 50 if joint else 60, joint)


@pytest.mark.parametrize("arch, overrides, joint, hidden", [
    ("transformer", [], True, TRANSFORMER_HIDDEN),  # all three embeddings tied
    ("transformer", ["model.tie_embeddings=false", "model.positions=learned"], False,
     TRANSFORMER_HIDDEN),  # an output layer of its own, learned positions
    ("rnn", [], True, RNN_HIDDEN),
    ("rnn", ["model.tie_embeddings=false", "model.cell=lstm"], False, RNN_HIDDEN),
])
def test_every_parameter_is_in_exactly_one_group_and_the_right_one(arch, overrides, joint,
                                                                   hidden):
    model = small_model(arch, *overrides, joint=joint)
    muon, adamw = muon_split(model)
    named = dict(model.named_parameters())  # a tied tensor once
    assert muon.keys() == {n for n in named if re.fullmatch(hidden, n)}
    assert adamw.keys() == named.keys() - muon.keys()
    assert all(p.ndim == 2 for p in muon.values())
    assert {id(p) for p in model.parameters()} == {id(p) for p in [*muon.values(),
                                                                   *adamw.values()]}
    assert id(model.output.weight) in {id(p) for p in adamw.values()}  # tied or its own
    embeddings = [m.weight for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    assert embeddings and all(id(e) in map(id, adamw.values()) for e in embeddings)
    if not joint:
        assert "output.weight" in adamw and model.output.weight is not embeddings[-1]


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_the_two_optimizers_share_the_parameters_out(arch):
    model = small_model(arch)
    cfg = load_recipe(None, ["train.optimizer=muon"]).train
    adamw, muon = make_optimizer(model, cfg), make_muon(model, cfg)
    ids = [[id(p) for group in o.param_groups for p in group["params"]] for o in (adamw, muon)]
    assert sorted(ids[0] + ids[1]) == sorted(id(p) for p in model.parameters())
    assert ids[1] == [id(p) for p in muon_split(model)[0].values()]
    assert (muon.defaults["lr"], muon.defaults["momentum"], muon.defaults["weight_decay"],
            muon.defaults["adjust_lr_fn"]) == (0.02, 0.95, 0.0, "original")


def muon_update_singular_values(muon: torch.optim.Muon, weight: torch.nn.Parameter,
                                cfg) -> torch.Tensor:
    """One step of `muon` on a gradient of `weight` whose singular values span a factor of
    100: the singular values of the update, divided by the step's rate lr * sqrt(max(1, A / B))
    (torch's "original" adjustment; no weight decay)."""
    assert cfg.muon_adjust_lr == "original" and cfg.muon_weight_decay == 0
    A, B = weight.shape
    g = torch.Generator().manual_seed(0)
    left = torch.linalg.qr(torch.randn(A, B, generator=g))[0]  # (A, B) orthonormal columns
    right = torch.linalg.qr(torch.randn(B, B, generator=g))[0]  # (B, B) orthogonal
    weight.grad = left @ torch.diag(torch.logspace(-2, 0, B)) @ right.T  # (A, B): 0.01 .. 1
    before = weight.detach().clone()
    muon.step()
    rate = cfg.muon_lr * math.sqrt(max(1, A / B))
    return torch.linalg.svdvals((before - weight.detach()) / rate)


def assert_muons_update_is_nearly_orthogonal(muon: torch.optim.Muon, model, cfg) -> None:
    """Muon's defining property: a hidden matrix moves by its orthogonalised gradient, five
    Newton-Schulz steps towards U Vᵀ where the gradient is U S Vᵀ, so every direction moves
    alike. Nearly: the iteration's coefficients trade exactness for speed, and the update's
    singular values come out between 0.68 and 1.20 (measured over seeds and shapes from 32 x 32
    to 256 x 256, for gradients whose own span a factor of 100); the check allows 0.65 to 1.25."""
    singular = muon_update_singular_values(muon, model.encoder_layers[0].ffn.fc1.weight, cfg)
    assert singular.min() > 0.65 and singular.max() < 1.25, f"not orthogonal: {singular}"


def test_muons_update_is_nearly_orthogonal():
    model = small_model("transformer")
    cfg = load_recipe(None, ["train.optimizer=muon"]).train
    assert_muons_update_is_nearly_orthogonal(make_muon(model, cfg), model, cfg)


def test_the_check_fails_on_an_update_not_orthogonalised():
    """Break the property on purpose: with no Newton-Schulz step the update is the gradient
    scaled to unit norm, its singular values as spread as the gradient's, and the check fails."""
    model = small_model("transformer")
    cfg = load_recipe(None, ["train.optimizer=muon"]).train
    muon = make_muon(model, cfg)
    muon.param_groups[0]["ns_steps"] = 0
    with pytest.raises(AssertionError, match="not orthogonal"):
        assert_muons_update_is_nearly_orthogonal(muon, model, cfg)


def test_both_optimizers_follow_the_schedule(recipe_path, small_data, tmp_path):
    trainer = tiny_trainer(recipe_path, small_data, tmp_path / "run", "train.optimizer=muon",
                           "train.eval_every=0", "train.save_every=0", "train.warmup=3")
    updater, cfg = trainer.updater, trainer.cfg
    order = trainer.batcher.epoch(trainer.state.epoch)
    ratios = []
    for _ in range(5):
        adamw_ratio = updater.optimizer.param_groups[0]["lr"] / cfg.lr
        assert updater.muon.param_groups[0]["lr"] / cfg.muon_lr == pytest.approx(adamw_ratio)
        ratios.append(adamw_ratio)
        trainer.next_step(order)
    # steps 1-3 warm up, step 4 decays: inverse_sqrt, the default
    assert ratios == pytest.approx([1 / 3, 1 / 3, 2 / 3, 1.0, (3 / 4) ** 0.5])
    assert len(updater.muon.state) == len(muon_split(trainer.updater.model)[0])  # momentum for each


def test_a_checkpoint_of_the_other_optimizer_is_refused(recipe_path, small_data, tmp_path):
    muon = tiny_trainer(recipe_path, small_data, tmp_path / "muon", "train.optimizer=muon")
    adamw = tiny_trainer(recipe_path, small_data, tmp_path / "adamw")
    def saved(trainer) -> dict:  # as a checkpoint holds it
        return {**trainer.updater.state_dict(), "model": trainer.updater.eval_model.state_dict()}

    with pytest.raises(ValueError, match="train.optimizer adamw, not of muon"):
        muon.updater.load_state_dict(saved(adamw))
    with pytest.raises(ValueError, match="train.optimizer muon, not of adamw"):
        adamw.updater.load_state_dict(saved(muon))
    muon.updater.load_state_dict(saved(muon))
