"""The words a recipe takes for the runtime's choices, written once where the recipe is defined.

The modules that act on them import them from here: `translate.engine` (the engines),
`translate.hardware` (the precisions), `translate.models` (the activations, norms and query
norms); tests/config/test_names.py checks that each runtime's table has exactly these names.
The recipe never imports a runtime module.

Tests: tests/test_config.py, tests/project/test_layers.py.
"""

# train.engine and --engine: `auto` picks one for the device (translate.engine.resolve_engine).
ENGINES = ("fast", "plain", "gpu", "textbook")
ENGINE_NAMES = ("auto", *ENGINES)

# The autocast precisions a model runs in; fp16 on CUDA only, with a grad scaler in training.
RUN_PRECISIONS = ("fp32", "bf16", "fp16")
# What a recipe's train.precision takes: `auto` picks one of RUN_PRECISIONS for the device.
TRAINING_PRECISIONS = ("auto", *RUN_PRECISIONS)
# What decoding takes (--precision, precision=): int8 quantizes the linear layers dynamically and
# runs them on the CPU in fp32 (translate.fast.quantize).
PRECISIONS = (*TRAINING_PRECISIONS, "int8")

# The Transformer's feed-forward activations (translate.models.transformer.ACTIVATIONS); a gated
# one multiplies the activation of one projection of the input by a second projection.
ACTIVATIONS = ("relu", "gelu", "relu2", "swiglu")
GATED = ("swiglu",)
# Its norms (translate.models.transformer.NORMS), and what qk_norm normalises a query over.
NORMS = ("layernorm", "rmsnorm")
QUERY_NORMS = ("head", "width")
