#!/usr/bin/env bash
# py313-trixie.sh — a Python 3.13 virtual environment with shrinkray (PyPI),
# a peer test-case reducer for the benchmarks, on a Debian 12 (bookworm) host
# whose own Python is 3.11 (shrinkray's releases need Python >= 3.12; pip
# under 3.11 only sees its first two).
#
#   scripts/py313-trixie.sh            build what is missing, check it, print
#                                      the environment's python (last line)
#   scripts/py313-trixie.sh python     print where the python 3.13 itself is
#                                      (built if missing)
#
# Nothing under /usr or /etc changes (except that patchelf, a bookworm
# package, is installed through apt-get when it is missing). Everything lives
# in ${XDG_CACHE_HOME:-$HOME/.cache}/reduce/py313-trixie/:
#
#   apt/      a private apt configuration that sees only Debian 13 (trixie)
#   debs/     trixie's python3.13 and the libraries it loads, as .deb files
#   prefix/   those .debs unpacked (dpkg -x), python3.13 patched to run there
#   venv/     python3.13 -m venv, with shrinkray from PyPI
#
# How trixie's python3.13 runs on bookworm: trixie's glibc is newer than the
# host's, so prefix/usr/bin/python3.13 gets trixie's loader as its ELF
# interpreter and the unpacked library directory as its DT_RPATH (patchelf
# --force-rpath). DT_RPATH rather than DT_RUNPATH, because only RPATH also
# covers the libraries of the extension modules that python dlopens (_ssl
# needs trixie's libssl, which bookworm's does not satisfy). No
# LD_LIBRARY_PATH is set, so the programs an interestingness test starts
# (/usr/bin/python3, a compiler) run on the host's own libraries.
#
# The environment is made --without-pip and gets pip from trixie's pip wheel,
# because Debian's ensurepip looks for its wheel in the absolute
# /usr/share/python-wheels, which is the host's (bookworm's pip, too old for
# 3.13). shrinkray's requirements go in less llama-cpp-python and
# huggingface-hub, then shrinkray itself with --no-deps: those two serve only
# its LLM passes, and llama-cpp-python builds from source for minutes.
# Without them shrinkray warns and reduces without the LLM passes; pass
# --no-llm to keep it quiet.
# REDUCE_SHRINKRAY_VERSION=X pins shrinkray==X (default: the latest release,
# at the time the environment is first built).
#
# Each part is checked before it counts as built, and a part whose check
# fails is built again from scratch; a lock (flock) keeps two builds apart.
set -eEuo pipefail

ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/reduce/py313-trixie
APT=$ROOT/apt
DEBS=$ROOT/debs
PREFIX=$ROOT/prefix
VENV=$ROOT/venv
PY=$PREFIX/usr/bin/python3.13
LIBDIR=$PREFIX/usr/lib/x86_64-linux-gnu
SUITE_URI=${REDUCE_TRIXIE_URI:-http://deb.debian.org/debian}
PIN=${REDUCE_SHRINKRAY_VERSION:-}

# What apt resolves for these, less what python does not load (configuration,
# data, tools) and what the host's own files serve (certificates, tzdata).
TOP_PACKAGES="python3.13 python3.13-venv"
SKIP_PACKAGES="debconf tzdata netbase readline-common openssl ca-certificates media-types gcc-14-base openssl-provider-legacy"
# shrinkray's requirements left out (see above).
SKIP_REQUIREMENTS="llama-cpp-python huggingface-hub"
# Reads pip's installation report (JSON) on stdin; prints shrinkray==VERSION,
# then one requirement a line, less extras and the names given as arguments.
REQUIREMENTS_FILTER='
import json, re, sys
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
skip = {norm(n) for n in sys.argv[1:]}
meta = json.load(sys.stdin)["install"][0]["metadata"]
print("%s==%s" % (meta["name"], meta["version"]))
for req in meta.get("requires_dist") or []:
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req).group(1)
    if not re.search(r"\bextra\s*==", req) and norm(name) not in skip:
        print(req)
'

STEP=starting
log() { echo "py313-trixie: $*" >&2; }
die() { log "FAILED: $*"; exit 1; }
# The ERR trap fires in each subshell on the way out: only the script's own
# shell reports.
trap 'rc=$?; [ "$BASHPID" = "$$" ] || exit $rc; die "$STEP (exit $rc)"' ERR

[ "$(uname -m)" = x86_64 ] || die "only x86_64 is handled (this is $(uname -m))"

apt_private() {
	apt-get \
		-o Dir::Etc::SourceList="$APT/trixie.sources" \
		-o Dir::Etc::SourceParts=/dev/null \
		-o Dir::Etc::Preferences=/dev/null \
		-o Dir::Etc::PreferencesParts=/dev/null \
		-o Dir::State::Lists="$APT/lists" \
		-o Dir::State::status=/dev/null \
		-o Dir::Cache="$APT/cache" \
		-o APT::Architecture=amd64 \
		-o APT::Architectures=amd64 \
		-o APT::Install-Recommends=false \
		-o APT::Sandbox::User="$(id -un)" \
		-q "$@"
}

# check_prefix: python3.13 starts on trixie's libraries and nothing but them,
# the modules that pip and shrinkray need import, it can start itself again
# (pip and venv do), and a program it starts runs on the host's libraries.
check_prefix() {
	[ -x "$PY" ] || return 1
	"$PY" - "$PREFIX" <<'PY'
import sys, os, subprocess
prefix = os.path.realpath(sys.argv[1]) + "/"
import bz2, ctypes, ctypes.util, decimal, hashlib, json, lzma, pwd, pyexpat
import readline, socket, sqlite3, ssl, uuid, venv, zlib, zoneinfo
ssl.create_default_context()
ctypes.CDLL(None)
pwd.getpwuid(os.getuid())
socket.getaddrinfo("localhost", None)
outside = sorted({l.split()[-1] for l in open("/proc/self/maps")
                  if ".so" in l and not os.path.realpath(l.split()[-1]).startswith(prefix)})
if outside:
    sys.exit("loaded from outside the prefix: %s" % outside)
child = subprocess.run([sys.executable, "-c", "import ssl, sqlite3, ctypes, lzma; print(ssl.OPENSSL_VERSION)"],
                       capture_output=True, text=True)
if child.returncode:
    sys.exit("sys.executable does not start again: %s" % child.stderr)
host = subprocess.run(["cat", "/proc/self/maps"], capture_output=True, text=True)
if host.returncode or prefix in host.stdout:
    sys.exit("a host program started from python3.13 does not run on the host's libraries")
PY
}

build_prefix() {
	STEP="patchelf (needed to point python3.13 at trixie's loader)"
	if ! command -v patchelf >/dev/null; then
		command -v apt-get >/dev/null || die "no patchelf and no apt-get to install it"
		local sudo=
		[ "$(id -u)" = 0 ] || sudo=sudo
		log "installing patchelf (bookworm's) through apt-get"
		$sudo apt-get update -q >&2
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends patchelf >&2
	fi

	STEP="apt-get update of the private trixie configuration ($APT)"
	mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial"
	cat >"$APT/trixie.sources" <<-EOF
		Types: deb
		URIs: $SUITE_URI
		Suites: trixie
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
	EOF
	[ -e /usr/share/keyrings/debian-archive-keyring.gpg ] || die "no /usr/share/keyrings/debian-archive-keyring.gpg to check trixie's Release with"
	log "reading trixie's package index"
	apt_private update --error-on=any >&2

	STEP="resolving python3.13's packages in trixie"
	local packages
	packages=$(apt_private -s install $TOP_PACKAGES | awk '$1 == "Inst" {print $2}' |
		grep -vxF -f <(tr ' ' '\n' <<<"$SKIP_PACKAGES"))
	[ -n "$packages" ] || die "$STEP: apt resolved nothing"

	STEP="downloading trixie's .debs into $DEBS"
	rm -rf "$DEBS"
	mkdir -p "$DEBS"
	log "downloading: $(echo $packages)"
	(cd "$DEBS" && apt_private download $packages >&2)

	STEP="unpacking the .debs into $PREFIX"
	rm -rf "$PREFIX"
	mkdir -p "$PREFIX"
	local deb
	for deb in "$DEBS"/*.deb; do dpkg -x "$deb" "$PREFIX"; done
	[ -x "$PY" ] || die "$STEP: no $PY after unpacking"
	[ -e "$LIBDIR/ld-linux-x86-64.so.2" ] || die "$STEP: no trixie loader at $LIBDIR/ld-linux-x86-64.so.2"

	STEP="patching $PY (patchelf)"
	patchelf --set-interpreter "$LIBDIR/ld-linux-x86-64.so.2" --set-rpath "$LIBDIR" --force-rpath "$PY"

	STEP="checking $PY"
	check_prefix || die "$STEP: it does not run as it should (see above)"
	touch "$PREFIX/.complete"
	log "python 3.13 ready: $PY ($(du -sh "$DEBS" | cut -f1) of .debs, $(du -sh "$PREFIX" | cut -f1) unpacked)"
}

# check_venv: the environment's python is this prefix's, and shrinkray (the
# pinned one, where one is pinned) starts.
check_venv() {
	[ -x "$VENV/bin/python" ] && [ -x "$VENV/bin/shrinkray" ] || return 1
	[ "$(readlink -f "$VENV/bin/python")" = "$(readlink -f "$PY")" ] || return 1
	local version
	version=$("$VENV/bin/shrinkray" --version 2>/dev/null) || return 1
	[ -z "$PIN" ] || [[ "$version" == *" $PIN" ]] || return 1
	"$VENV/bin/shrinkray" --help 2>/dev/null | grep -q -- --no-llm || return 1
}

build_venv() {
	STEP="making the environment $VENV ($PY -m venv)"
	rm -rf "$VENV"
	"$PY" -m venv --without-pip "$VENV"

	STEP="installing pip into $VENV from trixie's pip wheel"
	local wheel
	wheel=$(ls "$PREFIX"/usr/share/python-wheels/pip-*.whl | tail -1)
	"$VENV/bin/python" "$wheel/pip" install -q --no-index "$wheel" >&2

	STEP="resolving shrinkray${PIN:+==$PIN} on PyPI (pip install --dry-run --report)"
	log "installing shrinkray${PIN:+==$PIN} from PyPI"
	local report resolved
	report=$("$VENV/bin/python" -m pip install -q --disable-pip-version-check --dry-run --no-deps \
		--ignore-installed --report - "shrinkray${PIN:+==$PIN}")
	resolved=$("$VENV/bin/python" -c "$REQUIREMENTS_FILTER" $SKIP_REQUIREMENTS <<<"$report")
	local -a lines
	mapfile -t lines <<<"$resolved"
	[ "${#lines[@]}" -ge 2 ] || die "$STEP: no release or no requirements in pip's report"

	# The requirements first, shrinkray itself after them with --no-deps, so
	# that pip has no left-out requirement to warn about.
	STEP="installing shrinkray's requirements (PyPI)"
	"$VENV/bin/python" -m pip install -q --disable-pip-version-check "${lines[@]:1}" >&2
	STEP="installing ${lines[0]} (PyPI)"
	"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps "${lines[0]}" >&2

	STEP="checking $VENV"
	check_venv || die "$STEP: shrinkray does not start (try $VENV/bin/shrinkray --help)"
	log "shrinkray ready: $("$VENV/bin/shrinkray" --version) in $VENV ($(du -sh "$VENV" | cut -f1))"
}

mkdir -p "$ROOT"
STEP="taking the lock $ROOT.lock"
exec 9>"$ROOT.lock"
flock 9

if [ ! -e "$PREFIX/.complete" ] || ! check_prefix 2>/dev/null; then
	[ ! -e "$PREFIX/.complete" ] || log "$PY no longer passes its check: building it again"
	build_prefix
fi
if [ "${1:-}" = python ]; then
	echo "$PY"
	exit 0
fi
if ! check_venv; then
	build_venv
fi
echo "$VENV/bin/python"
