package replay

import (
	"path/filepath"
	"strings"
	"testing"

	"reduce/fixtures"
)

// compiledReplayEnv is the environment a replay of the example batch, with meta
// compiled (none when ""), sees under o: an exec replay that prints it.
func compiledReplayEnv(t *testing.T, o Options, compiled string) map[string]string {
	t.Helper()
	b := exampleBatch(t, "four_class_targets")
	if compiled != "" {
		b.Meta = map[string]string{fixtures.MetaCompiled: compiled}
	}
	o.Kind, o.File = KindExec, examplePath("four_class_targets")
	o.Replay = "sh -c " + shellQuote("env >&2; exit 3") + " sh {batch}"
	v := replayOK(t, newBackend(t, o, b), whole)
	if v.Result.ExitCode != 3 {
		t.Fatalf("exit %d, stderr %q", v.Result.ExitCode, v.Result.Stderr)
	}
	env := map[string]string{}
	for _, l := range strings.Split(string(v.Result.Stderr), "\n") {
		if k, val, ok := strings.Cut(l, "="); ok {
			env[k] = val
		}
	}
	return env
}

// TestCompileEnvOfReplays: what a replay of a compiled step gets for
// torch.compile, end to end through an exec replay: the training run's
// Inductor cache (tempfile.gettempdir's TMPDIR first, the user's name
// with Inductor's unsafe characters replaced), one compile thread and
// REDUCE_COMPILED naming the backend; the user's own cache dir and thread
// count left as they are; and with NoCompile, the eager switch alone.
func TestCompileEnvOfReplays(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("TEMP", "/nonexistent/temp")
	t.Setenv("TMP", "/nonexistent/tmp")
	t.Setenv("LOGNAME", `dom\ann:x`)
	t.Setenv(cacheDirEnv, "")
	t.Setenv(compileThreadsE, "")
	t.Setenv(dynamoDisable, "")

	env := compiledReplayEnv(t, Options{}, "inductor")
	want := map[string]string{
		CompiledEnv:     "inductor",
		cacheDirEnv:     filepath.Join(tmp, "torchinductor_dom_ann_x"),
		compileThreadsE: "1",
		dynamoDisable:   "",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("compiled step: %s=%q, want %q", k, env[k], v)
		}
	}

	// No meta: the caches still, no REDUCE_COMPILED.
	env = compiledReplayEnv(t, Options{}, "")
	if env[CompiledEnv] != "" || env[cacheDirEnv] != want[cacheDirEnv] || env[compileThreadsE] != "1" {
		t.Errorf("no meta: %s=%q %s=%q %s=%q", CompiledEnv, env[CompiledEnv], cacheDirEnv, env[cacheDirEnv], compileThreadsE, env[compileThreadsE])
	}

	// The user's own settings are theirs.
	t.Setenv(cacheDirEnv, "/data/inductor-cache")
	t.Setenv(compileThreadsE, "8")
	env = compiledReplayEnv(t, Options{}, "inductor")
	if env[cacheDirEnv] != "/data/inductor-cache" || env[compileThreadsE] != "8" {
		t.Errorf("user's settings: %s=%q %s=%q", cacheDirEnv, env[cacheDirEnv], compileThreadsE, env[compileThreadsE])
	}

	// --no-compile: dynamo disabled, nothing of the compile's.
	t.Setenv(cacheDirEnv, "")
	t.Setenv(compileThreadsE, "")
	env = compiledReplayEnv(t, Options{NoCompile: true}, "inductor")
	if env[dynamoDisable] != "1" || env[CompiledEnv] != "" || env[cacheDirEnv] != "" || env[compileThreadsE] != "" {
		t.Errorf("no compile: %s=%q %s=%q %s=%q %s=%q", dynamoDisable, env[dynamoDisable], CompiledEnv, env[CompiledEnv],
			cacheDirEnv, env[cacheDirEnv], compileThreadsE, env[compileThreadsE])
	}
}
