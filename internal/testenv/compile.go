package testenv

import "testing"

// RequireCompile turns a missing torch.compile into a failure: make test
// sets it for the PyPI environment (test-go-torch2), whose torch has one.
const RequireCompile = "REDUCE_REQUIRE_COMPILE"

// compileProbe imports what torch.compile with Inductor on the CPU needs:
// torch 2.x's Inductor and a C++ compiler for the kernels it generates.
const compileProbe = "import shutil, sys\nimport torch\nimport torch._inductor.compile_fx\n" +
	"sys.exit(0 if shutil.which('g++') or shutil.which('c++') else 'no C++ compiler (g++ or c++) on PATH')"

// PythonCompile returns an interpreter whose torch compiles a step with
// torch.compile's default backend (Inductor) on the CPU: the first of
// $REDUCE_PYTHON (or Python's defaults) that can. With none, t is skipped
// or, under REDUCE_REQUIRE_COMPILE, fails. Debian's torch 1.13 has no
// torch.compile.
func PythonCompile(t testing.TB) string {
	t.Helper()
	return PythonProbed(t, RequireCompile, compileProbe, "torch.compile (Inductor, with a C++ compiler)",
		"use a torch 2.x (scripts/pypi-torch-venv.sh) and set REDUCE_PYTHON")
}
