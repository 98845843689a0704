package testenv

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

// recorder is a testing.TB that records how a test would end.
type recorder struct {
	testing.TB
	failed, skipped bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Fatalf(string, ...any) { r.failed = true; runtime.Goexit() }
func (r *recorder) Skip(...any)           { r.skipped = true; runtime.Goexit() }
func (r *recorder) Skipf(string, ...any)  { r.skipped = true; runtime.Goexit() }
func (r *recorder) Fatal(...any)          { r.failed = true; runtime.Goexit() }

// end runs f on a recorder, on a goroutine of its own (Fatal and Skip end
// it as they end a test).
func end(f func(testing.TB)) *recorder {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

// TestRequire: a missing dependency skips, and fails under its
// REDUCE_REQUIRE_ variable with any non-empty value, for the Slurm
// cluster and for torch alike.
func TestRequire(t *testing.T) {
	for _, v := range []string{RequireTorch, RequireSlurm} {
		for value, fails := range map[string]bool{"": false, "1": true, "yes": true, "0": true} {
			t.Setenv(v, value)
			r := end(func(tb testing.TB) { Missing(tb, v, "missing") })
			assert.Equal(t, fails, r.failed, "%s=%q", v, value)
			assert.Equal(t, !fails, r.skipped, "%s=%q", v, value)
		}
	}
	t.Setenv("REDUCE_SLURM", "")
	t.Setenv(RequireSlurm, "1")
	assert.True(t, end(Slurm).failed, "no cluster, REDUCE_REQUIRE_SLURM set: the Slurm tests fail")
	t.Setenv(RequireSlurm, "")
	assert.True(t, end(Slurm).skipped, "no cluster: the Slurm tests skip")
	t.Setenv("REDUCE_PYTHON", "/no/such/python")
	t.Setenv(RequireTorch, "1")
	probes.Lock()
	probes.done = nil
	probes.Unlock()
	assert.True(t, end(func(tb testing.TB) { Python(tb) }).failed, "no torch, REDUCE_REQUIRE_TORCH set: the torch tests fail")
	probes.Lock()
	probes.done = nil
	probes.Unlock()
}

// TestRequireLightning: no Lightning skips, and fails under
// REDUCE_REQUIRE_LIGHTNING; an interpreter named by REDUCE_PYTHON_LIGHTNING
// that cannot import it fails whatever the variable says.
func TestRequireLightning(t *testing.T) {
	reset := func() {
		probes.Lock()
		probes.done = nil
		probes.Unlock()
	}
	defer reset()
	lightning := func(tb testing.TB) { PythonLightning(tb) }
	t.Setenv("REDUCE_PYTHON_LIGHTNING", "")
	t.Setenv("REDUCE_PYTHON", "/no/such/python")
	for value, fails := range map[string]bool{"": false, "1": true} {
		reset()
		t.Setenv(RequireLightning, value)
		r := end(lightning)
		assert.Equal(t, fails, r.failed, "%s=%q", RequireLightning, value)
		assert.Equal(t, !fails, r.skipped, "%s=%q", RequireLightning, value)
	}
	reset()
	t.Setenv(RequireLightning, "")
	t.Setenv("REDUCE_PYTHON_LIGHTNING", "/no/such/python")
	assert.True(t, end(lightning).failed, "REDUCE_PYTHON_LIGHTNING names an interpreter without it: the tests fail")
}
