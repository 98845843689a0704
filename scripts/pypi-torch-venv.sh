#!/usr/bin/env bash
# pypi-torch-venv.sh — the virtual environment with current torch from PyPI
# (CPU) that `make test` runs reduce's Python side in, next to Debian's
# torch 1.13.
#
#   scripts/pypi-torch-venv.sh dir      print the environment's path (builds nothing)
#   scripts/pypi-torch-venv.sh build    build it unless it is there, then check it
#
# What goes in is scripts/pypi-torch.txt, every package pinned and installed
# with --no-deps (that file says why). The environment lives outside the
# clone, in ${XDG_CACHE_HOME:-$HOME/.cache}/reduce/torch-<torch version>-
# py<python version>-<hash of that file>, so every clone and CI run on the
# machine with the same pins reuses it, and a changed pin builds a new one.
#
# That path is a symbolic link, put in place by a rename only after the
# install and its checks passed: an interrupted build leaves no link, and the
# next build removes its directory. The link rather than a renamed directory,
# because pip writes the directory's absolute path into the scripts it
# installs (bin/pytest, bin/pip): the directory must keep the name it was
# built under. A lock (flock) keeps two builds of the same pins apart.
#
# Needs /usr/bin/python3's venv module with ensurepip (Debian's python3-venv;
# installed through apt-get when missing, as root or through sudo) and PyPI.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REQUIREMENTS=$HERE/pypi-torch.txt
BASE_PYTHON=${REDUCE_VENV_BASE_PYTHON:-/usr/bin/python3}
ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/reduce

log() { echo "pypi-torch-venv: $*" >&2; }
die() { log "$*"; exit 1; }

key() {
	local torch py hash
	torch=$(sed -n 's/^torch==//p' "$REQUIREMENTS")
	[ -n "$torch" ] || die "$REQUIREMENTS pins no torch==VERSION"
	py=$("$BASE_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
	hash=$(sha256sum "$REQUIREMENTS" | cut -c1-12)
	echo "torch-$torch-py$py-$hash"
}

# The pinned names, normalized as pip prints them in `pip list --format=freeze`
# after lower-casing and with - for _, one name==version a line, sorted.
normalize() { tr 'A-Z_' 'a-z-' | sort; }
pinned() { sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$REQUIREMENTS" | normalize; }

need_venv_module() {
	"$BASE_PYTHON" -c 'import ensurepip, venv' 2>/dev/null && return
	command -v apt-get >/dev/null || die "$BASE_PYTHON has no ensurepip (Debian's python3-venv) and there is no apt-get to install it"
	log "installing python3-venv ($BASE_PYTHON cannot import ensurepip)"
	local sudo=
	[ "$(id -u)" = 0 ] || sudo=sudo
	$sudo apt-get update -q >&2
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends python3-venv >&2
}

# check runs the environment's python once: everything imports, the CPU
# computes, and what is installed is exactly the pinned set (nothing that a
# resolver pulled in, such as the CUDA packages left out on purpose).
check() {
	local python=$1/bin/python installed
	"$python" - <<-'EOF' >&2
		import logging
		# torchmetrics imports torch.utils.flop_counter, which warns that triton, left out on
		# purpose, is missing.
		logging.getLogger("torch.utils.flop_counter").setLevel(logging.ERROR)
		import hypothesis, lightning.pytorch, numpy, pytest, pytorch_lightning, safetensors, zstandard
		import os
		os.environ["HF_HUB_OFFLINE"] = "1"  # nothing is downloaded
		from transformers import Trainer, TrainingArguments, BertConfig, BertForSequenceClassification
		import torch
		import torch.nn.functional as F
		x = torch.randn(4, 3, requires_grad=True)
		F.cross_entropy(x, torch.tensor([0, 1, 2, 0])).backward()
		assert x.grad.shape == (4, 3)
		assert not torch.cuda.is_available()
		print("pypi-torch-venv: torch", torch.__version__, "numpy", numpy.__version__,
		      "pytorch_lightning", pytorch_lightning.__version__,
		      "transformers", __import__("transformers").__version__)
	EOF
	installed=$("$python" -m pip list --format=freeze --disable-pip-version-check 2>/dev/null | grep -v '^pip==' | normalize)
	if [ "$installed" != "$(pinned)" ]; then
		diff <(pinned) <(echo "$installed") >&2 || true
		die "$1 does not hold exactly the packages of $REQUIREMENTS (< pinned, > installed)"
	fi
}

build() {
	local key link lock dir tmp start
	key=$(key)
	link=$ROOT/$key
	mkdir -p "$ROOT"
	lock=$ROOT/$key.lock
	exec 9>"$lock"
	flock 9
	if [ -L "$link" ] && [ -d "$link/" ]; then
		check "$link"
		return
	fi
	# Left by an interrupted build of these pins: no link names them.
	rm -rf "$link" "$ROOT/$key".build-*
	need_venv_module
	dir=$(mktemp -d "$ROOT/$key.build-XXXXXX")
	chmod 755 "$dir" # mktemp made it private
	start=$SECONDS
	log "building $link (from $REQUIREMENTS)"
	"$BASE_PYTHON" -m venv "$dir"
	# No pip cache: the environment is the cache, and a second copy of the
	# wheels would double the disk it takes.
	"$dir/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir \
		--no-deps --only-binary=:all: -r "$REQUIREMENTS" >&2
	check "$dir"
	tmp=$ROOT/$key.link-$$
	ln -sfn "$(basename "$dir")" "$tmp"
	mv -T "$tmp" "$link"
	log "built $link in $((SECONDS - start)) s, $(du -sh "$dir/" | cut -f1)"
}

case ${1:-} in
dir) echo "$ROOT/$(key)" ;;
build) build ;;
*) die "usage: $0 dir|build" ;;
esac
