"""The data path, one module a step, each importing only the steps before it (`setup.cfg`):

1. `read`    find a split (a hub name or a local folder) and stream its rows a chunk at a time;
             `rows` is what a chunk holds and how its rows parse into (source, target) texts
2. `clean`   the rules a training pair must pass: text (not empty, a letter or digit on each
             side) before encoding, lengths (pieces a side, their ratio) after
3. `encode`  text to token ids: a chunk at a time in worker processes, or a split held in
             memory; the flat arrays (`TokenArray`, `EncodedPairs`) that hold them
4. `cache`   the train split encoded once onto disk and memory-mapped by every run after
5. `batch`   pairs of similar length grouped into batches of about `max_tokens` padded tokens
             (training, the dev loss and decoding share the cutting), padded into tensors

Each step takes the config section it needs (`DataConfig`) or plain arguments, never a recipe.
`rows`, `clean` and `encode` import neither torch nor the model code: the encoding worker
processes import them and start in a fraction of a second.
"""


class DataError(ValueError):
    """Data that cannot be used; the message names the file, split or column."""
