"""What the tests import: helper functions and constants, each module a concern. Fixtures and
pytest's hooks live in tests/conftest.py, which imports from here; `pythonpath = tests` in
setup.cfg makes `from helpers.training import tiny_trainer` work from every test folder.

    files.py     where the Multi30k sample and the full copy are; read_jsonl
    models.py    untrained_model, a tiny Transformer for tests of shapes and files; with_weights
    training.py  the tiny recipes' overrides, train_tiny, tiny_trainer and single steps
    cli.py       a command run in-process, and what a refusal must look like
    limits.py    how long a test waits for another process, by the machine's pace
"""
