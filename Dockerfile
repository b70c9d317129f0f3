# The README's main job in a container: train the Multi30k Transformer for 10 minutes on the CPU,
# translate test_2016_flickr and print BLEU (scripts/quickstart.sh).
#
#   docker build -t translate-nmt .
#   docker run --rm -v "$PWD/runs:/translate/runs" translate-nmt                # data from the hub
#   docker run --rm -v /path/to/multi30k:/data -e TRANSLATE_DATA=/data \
#       -v "$PWD/runs:/translate/runs" translate-nmt                          # a local copy
#   docker run --rm -e MINUTES=60 ... translate-nmt                           # the full recipe
#   docker run --rm -it translate-nmt .venv/bin/translate --help              # any other command
FROM python:3.11-slim

WORKDIR /translate
# jemalloc: `translate train` runs under it, where a long CPU run's heap stays small and its
# steps keep their pace (translate/allocator.py).
RUN apt-get update && apt-get install -y --no-install-recommends libjemalloc2 \
    && rm -rf /var/lib/apt/lists/*
COPY . .
# The CPU build of PyTorch: the image runs on any machine and stays small.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN TORCH_INDEX_URL="$TORCH_INDEX_URL" bash scripts/setup.sh && rm -rf /root/.cache/pip

ENV SKIP_SETUP=1 PYTHONUNBUFFERED=1
CMD ["bash", "scripts/quickstart.sh"]
