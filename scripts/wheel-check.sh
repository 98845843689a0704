#!/usr/bin/env bash
# The wheel as a user installs it: built (make wheel), installed into a fresh
# virtual environment that has only the given interpreter's torch and pytest
# (a .pth naming their folder), then `reduce --version`, `import
# reduce_batch`, a crash recorded, reduced, and the fixture's life run by
# `pytest regress/` with no conftest.py in regress/: xfail, fix, XPASS(strict)
# (a failure), `reduce fixed`, pass, bug back, fail; another project's
# fixture.json and tests are left alone.
#
#     scripts/wheel-check.sh PYTHON   (an interpreter with torch and pytest)
set -euo pipefail
python=${1:?usage: scripts/wheel-check.sh PYTHON}
cd "$(dirname "$0")/.."
version=$(sed -n 's/^const Version = "\(.*\)"/\1/p' replay/embed.go)
wheel=$(ls dist/reduce_batch-"$version"-py3-none-*"$(uname -m)".whl | head -1)  # this machine's, this version's
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "wheel-check ($python): $*" >&2; exit 1; }

site=$("$python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
"$python" -m venv --without-pip "$work/venv" 2>/dev/null || /usr/bin/python3 -m venv --without-pip "$work/venv"
venv_site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$site" > "$venv_site/torch_and_pytest.pth"
pip_python=$python
"$pip_python" -m pip --version >/dev/null 2>&1 || pip_python=${PIP_PYTHON:-/usr/bin/python3}
"$pip_python" -m pip --python "$work/venv/bin/python" install -q --no-index --no-deps --no-compile "$wheel" \
	|| fail "pip install $wheel"
export PATH="$work/venv/bin:$PATH" REDUCE_TRUST_DIR="$work/trust"
unset REDUCE_BINARY  # the plugin judges with the wheel's reduce, as a user's has it
[ "$(command -v reduce)" = "$work/venv/bin/reduce" ] || fail "reduce is not on PATH from the venv"
reduce --version | grep -q "$version" || fail "reduce --version"
python3 -c 'import reduce_batch, reduce_batch.plugin' || fail "import reduce_batch"

mkdir -p "$work/proj" && cd "$work/proj"
cat > train.py <<'PY'
import torch
import torch.nn.functional as F

import reduce_batch


def train_step(batch):
    return F.cross_entropy(batch["x"], batch["y"])


if __name__ == "__main__":
    torch.manual_seed(0)
    x, y = torch.randn(16, 4), torch.randint(0, 4, (16,))
    y[11] = 7  # the bug: a label past the classes
    batch = {"x": x, "y": y}
    with reduce_batch.record_on_failure("crash.bin", batch, step=train_step):
        train_step(batch)
PY
python3 train.py 2>/dev/null && fail "train.py did not fail"
[ -f crash.bin ] || fail "no crash.bin recorded"
reduce --batch crash.bin --out regress -q >/dev/null || fail "reduce --batch crash.bin"
[ ! -e regress/conftest.py ] && [ ! -e regress/.reduce ] || fail "reduce wrote Python into --out with the package installed"
fixture=$(dirname "$(ls regress/*/fixture.json | head -1)")
run() { python3 -m pytest -q -p no:cacheprovider -rA regress/ 2>&1 || true; }
run | grep -q "XFAIL" || fail "open fixture: no xfail: $(run)"
sed -i 's/return F.cross_entropy(batch\["x"\], batch\["y"\])/return F.cross_entropy(batch["x"], batch["y"].clamp(max=3))/' train.py
run | grep -q "XPASS(strict)" || fail "fixed, still open: no XPASS(strict): $(run)"
reduce fixed "$fixture" >/dev/null || fail "reduce fixed"
run | grep -qE "[0-9]+ passed" && ! run | grep -qE "failed|error" || fail "fixed: not passing: $(run)"
sed -i 's/batch\["y"\].clamp(max=3)/batch["y"]/' train.py
run | grep -qE "[0-9]+ failed" || fail "bug back: no failure: $(run)"
# The plugin is installed for every pytest run of the environment: another project's fixture.json,
# and the tests beside it, are left to pytest.
mkdir -p other/data
echo '{"name": "a fixture of another tool"}' > other/data/fixture.json
printf 'def test_beside_it():\n    assert True\n' > other/data/test_beside.py
printf 'def test_other():\n    assert True\n' > other/test_other.py
out=$(python3 -m pytest -q -p no:cacheprovider other/ 2>&1) || fail "another project's tests: $out"
echo "$out" | grep -q "2 passed" || fail "another project's tests: not both collected: $out"
echo "wheel-check ($python): installed, recorded, reduced, xfail -> XPASS(strict) -> fixed -> pass -> bug back -> fail"
