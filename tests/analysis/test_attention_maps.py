"""Attention maps of a given translation (teacher forcing): forcing the greedy output gives the
greedy maps exactly; another target gives its own maps, equal to the greedy ones in the rows
that read only the prefix the two share (the decoder never sees ahead) and different in the
first that reads past it; in both models."""

import copy

import pytest
import torch

from helpers.models import untrained_model
from translate.alignment import record_attention
from translate.analysis.attention import attention_maps, output_limit, target_ids
from translate.loading import load_checkpoint
from translate.fast import accelerate
from translate.models.attention import DECODER_SELF, ENCODER_SELF
from translate.tokens import BOS
from translate.models.rnn import ADDITIVE

TEXT = "A man rides a bike down a hill ."


@pytest.fixture(scope="module", params=["trained_run", "trained_rnn_run"])
def loaded(request):
    return load_checkpoint(request.getfixturevalue(request.param).best_checkpoint)


def maps_of(loaded, target=None):
    return attention_maps(loaded.model, loaded.tokenizer, TEXT, loaded.recipe.decode,
                          target=target)


def test_forcing_the_greedy_output_gives_the_greedy_maps(loaded):
    greedy = maps_of(loaded)
    ids = [loaded.tokenizer.tgt.piece_to_id(p) for p in greedy.tgt_in_pieces[1:]]
    forced = maps_of(loaded, ids)
    assert (forced.forced, greedy.forced) == (True, False)
    assert forced.translation == greedy.translation
    assert forced.tgt_in_pieces == greedy.tgt_in_pieces
    assert forced.out_pieces == greedy.out_pieces and greedy.out_pieces[-1] == "</s>"
    assert forced.weights.keys() == greedy.weights.keys()
    for name, w in greedy.weights.items():
        assert torch.equal(forced.weights[name], w), name
    if loaded.tokenizer.encode_tgt([greedy.translation])[0][:-1] == ids:  # text segments back
        as_text = maps_of(loaded, greedy.translation)
        assert all(torch.equal(as_text.weights[n], w) for n, w in greedy.weights.items())


def test_another_target_gives_its_own_maps_equal_up_to_where_it_differs(loaded):
    greedy = maps_of(loaded)
    assert len(greedy.out_pieces) >= 5, greedy.out_pieces  # rows 0-4 to compare
    tgt = loaded.tokenizer.tgt
    prefix = [tgt.piece_to_id(p) for p in greedy.tgt_in_pieces[1:3]]  # the first two pieces
    other = prefix + tgt.encode("Katze Katze Hund")
    assert other[2] != tgt.piece_to_id(greedy.tgt_in_pieces[3])
    maps = maps_of(loaded, other)
    T, S = len(other) + 1, len(greedy.src_pieces)
    assert maps.tgt_in_pieces == ["<s>"] + [tgt.id_to_piece(i) for i in other]
    assert maps.out_pieces == [tgt.id_to_piece(i) for i in other] + ["</s>"]
    assert maps.translation == loaded.tokenizer.decode_tgt([other])[0]
    for name, w in maps.weights.items():
        role, before = maps.roles[name][0], greedy.weights[name]
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:2]), atol=1e-4, rtol=0)
        if role == ENCODER_SELF:  # the source's own attention: no target in it
            assert torch.equal(w, before)
            continue
        # query t reads inputs 0..t (the RNN's: 0..t-1, its state before reading input t); the
        # first new input is input 3, so rows before `new` equal the greedy ones and it differs
        new = 4 if role == ADDITIVE else 3
        if role == DECODER_SELF:
            assert w.shape[1:] == (T, T) and not w[:, :3, 3:].any()  # the future: masked
            w, before = w[:, :, :4], before[:, :, :4]
        else:  # cross-attention, the RNN's alignment
            assert w.shape[1:] == (T, S)
        torch.testing.assert_close(w[:, :new], before[:, :new], atol=1e-5, rtol=0)
        assert not torch.allclose(w[:, new], before[:, new], atol=1e-4), name


def test_a_target_is_checked_before_the_model_runs(trained_run):
    loaded = load_checkpoint(trained_run.best_checkpoint)
    tokenizer, cfg = loaded.tokenizer, loaded.recipe.decode
    limit = output_limit(9, cfg, loaded.model.cfg.max_positions)
    assert limit == min(int(cfg.max_len_a * 9 + cfg.max_len_b), loaded.model.cfg.max_positions - 1)
    pieces = tokenizer.encode_tgt(["Ein Hund ."])[0][:-1]  # EOS dropped
    assert target_ids(tokenizer, "Ein Hund .", limit) == pieces
    with pytest.raises(ValueError, match=rf"the target has {limit + 1} pieces, over the limit "
                                         rf"of {limit} for this source"):
        target_ids(tokenizer, [5] * (limit + 1), limit)
    with pytest.raises(ValueError, match="the target translation is empty"):
        target_ids(tokenizer, "  ", limit)
    for bad in (0, 2, 3, tokenizer.tgt_vocab_size, -1):
        with pytest.raises(ValueError, match=f"target id {bad} is not an output piece"):
            target_ids(tokenizer, [5, bad], limit)
    assert target_ids(tokenizer, [], limit) == []  # an empty translation: <s> reads, </s> out


def test_with_rope_and_qk_norm_the_maps_are_the_weights_the_model_attends_with(small_data):
    """Recording runs the written-out attention on the normalised, rotated queries and keys:
    the logits it gives are the fused kernel's, so the weights it returns are the ones used;
    the fast engine, which records through its own explicit path, draws the same maps."""
    cfg, tokenizer, model = untrained_model(small_data, 2, ("model.positions=rope",
                                                            "model.qk_norm=true"))
    model.eval()
    ids = tokenizer.encode_tgt(["Ein Mann fährt mit dem Fahrrad ."])[0][:-1]
    src = torch.tensor(tokenizer.encode_src([TEXT]))
    tgt_in = torch.tensor([[BOS] + ids])
    with torch.no_grad():
        fused = model(src, tgt_in)
        with record_attention(model) as recorded:
            written_out = model(src, tgt_in)
    torch.testing.assert_close(written_out, fused, atol=1e-5, rtol=1e-5)
    assert all(len(calls) == 1 for calls in recorded.values()) and len(recorded) == 2 * 3
    maps = attention_maps(model, tokenizer, TEXT, cfg.decode, target=ids)
    fast = attention_maps(accelerate(copy.deepcopy(model)), tokenizer, TEXT, cfg.decode,
                          target=ids)
    T = len(ids) + 1
    for name, w in maps.weights.items():
        torch.testing.assert_close(w, recorded[name][0][0])
        torch.testing.assert_close(fast.weights[name], w, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:2]), atol=1e-5, rtol=0)
        if maps.roles[name][0] == DECODER_SELF:
            assert w.shape[1:] == (T, T) and not w.triu(diagonal=1).any()
