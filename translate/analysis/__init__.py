"""Analysis of trained systems: comparison reports, attention maps, decoding choices, figures.

    compare.py     decode a split with several runs, significance, BLEU by length, report.md
    attention.py   one sentence's attention weights, recorded and drawn
    align_score.py attention read as word alignments, scored against a gold set (AER)
    gold.py        gold alignment files read strictly, AER, the diagonal baseline
    beam_sweep.py  beam size and length penalty chosen on a dev split
    plots.py       learning curves, bar charts and heatmaps (matplotlib)
    reach.py       time to quality: when a run first reached a dev BLEU
    report.py      the Markdown report and its findings, from results.json's dict
    seeds.py       several seeds of one recipe: each score's mean, spread and range
"""
