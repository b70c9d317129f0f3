"""scripts/install_torch.sh picks the build a machine needs: without a GPU, the CPU wheel index
(falling back to the default index, saying so, when it cannot be reached); with one, the
default index's CUDA build; nothing when torch is there. A stand-in python records the pip
commands, so nothing is downloaded."""

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STUB = """#!/usr/bin/env bash
if [ "$1" = "-c" ]; then exit {has_torch}; fi     # python -c "import torch"
if [ "$1" = "-" ]; then cat >/dev/null; exit {index_fails}; fi  # is the index reachable?
echo "$@" >> {log}
case "$*" in *--index-url*) exit {lacks_spec};; esac
exit 0
"""


def run(tmp_path: Path, has_torch=False, index_fails=False, gpu=False, lacks_spec=False, **env):
    log = tmp_path / "pip.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "python"
    stub.write_text(STUB.format(has_torch=0 if has_torch else 1, log=log,
                                index_fails=1 if index_fails else 0,
                                lacks_spec=1 if lacks_spec else 0))
    stub.chmod(0o755)
    if gpu:
        smi = bin_dir / "nvidia-smi"
        smi.write_text("#!/usr/bin/env bash\necho 'GPU 0: H100'\n")
        smi.chmod(0o755)
    path = f"{bin_dir}:/usr/bin:/bin"  # no nvidia-smi of the machine's
    result = subprocess.run(["bash", str(REPO / "scripts/install_torch.sh")], text=True,
                            capture_output=True, env={"PATH": path, "PYTHON": str(stub), **env},
                            timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout, log.read_text().splitlines() if log.exists() else []


def test_a_cpu_machine_takes_the_cpu_wheel_index(tmp_path):
    out, pip = run(tmp_path)
    assert pip == ["-m pip install --quiet --index-url https://download.pytorch.org/whl/cpu "
                   "torch==2.13.0"]
    assert "installing torch==2.13.0 from https://download.pytorch.org/whl/cpu" in out


def test_an_unreachable_index_falls_back_to_the_default_one_saying_so(tmp_path):
    out, pip = run(tmp_path, index_fails=True)
    assert pip == ["-m pip install --quiet torch==2.13.0"]
    assert "https://download.pytorch.org/whl/cpu cannot be reached (or lacks torch==2.13.0): " \
           "installing torch==2.13.0 from the default index instead" in out


def test_an_index_without_the_version_falls_back_too(tmp_path):
    out, pip = run(tmp_path, lacks_spec=True, TORCH_SPEC="torch==9.9.9")
    assert pip == ["-m pip install --quiet --index-url https://download.pytorch.org/whl/cpu "
                   "torch==9.9.9", "-m pip install --quiet torch==9.9.9"]
    assert "cannot be reached (or lacks torch==9.9.9)" in out


def test_a_gpu_machine_takes_the_default_indexs_cuda_build(tmp_path):
    out, pip = run(tmp_path, gpu=True)
    assert pip == ["-m pip install --quiet torch"] and "the CUDA build" in out


def test_an_installed_torch_is_kept_and_settings_are_honoured(tmp_path):
    assert run(tmp_path, has_torch=True) == ("", [])
    out, pip = run(tmp_path, TORCH_SPEC="torch==2.12.0", TORCH_INDEX_URL="https://mirror/x")
    assert pip == ["-m pip install --quiet --index-url https://mirror/x torch==2.12.0"]
