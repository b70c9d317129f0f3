"""The attention figures of `translate attention` and `compare`: one colour scale, 0 to 1, for
every panel; the causal mask's cells grey, not dark; a size that fits a screen."""

import numpy as np

from translate.analysis.attention import attention_figure, attention_maps, heatmap
from translate.analysis.plots import heatmap_grid
from translate.loading import load_checkpoint
from translate.models.attention import DECODER_SELF


def test_every_panel_shares_the_0_to_1_scale_and_masked_cells_are_grey(trained_run, tmp_path):
    loaded = load_checkpoint(trained_run.best_checkpoint)
    maps = attention_maps(loaded.model, loaded.tokenizer, "A man rides a bike down a hill .",
                          loaded.recipe.decode)
    rows = {}
    for module, (role, _) in maps.roles.items():
        rows.setdefault(role, []).append(heatmap(maps, module))
    fig = heatmap_grid(list(rows.values()), "title", max_columns=4)
    images = [image for ax in fig.axes for image in ax.get_images()]
    assert len(images) == len(maps.weights)
    assert {image.get_clim() for image in images} == {(0.0, 1.0)}
    assert sum(ax.get_label() == "<colorbar>" for ax in fig.axes) == 1  # one, for every panel
    for image, panel in zip(images, [h for row in rows.values() for h in row]):
        mask = np.ma.getmaskarray(image.get_array())
        if DECODER_SELF in panel.title or "causal" in panel.title:
            T = mask.shape[0]
            assert mask.sum() == T * (T - 1) // 2 and not mask[np.tril_indices(T)].any()
        else:
            assert not mask.any()
    width, height = fig.get_size_inches() * fig.dpi
    assert width <= 1800 and height <= 1400, (width, height)
    out = attention_figure(maps, tmp_path / "maps.png", "A man rides a bike down a hill .")
    assert out.stat().st_size > 10_000
