package replay

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"

	"reduce/fixtures"
)

// A step compiled with torch.compile (the batch's meta names the backend,
// fixtures.MetaCompiled) compiles again in every replay, as the user's run
// did. What a replay would compile afresh is kept warm instead:
//
//   - Inductor's caches (its FX graph cache, AOTAutograd's cache and the
//     kernels' code) live in one directory, TORCHINDUCTOR_CACHE_DIR: the
//     one the user's run used unless the user set one (Inductor's default,
//     <tempdir>/torchinductor_<user>, see compileCacheDir), so that every
//     replay, the fork server's children and the cold workers alike, finds
//     what the training run and the earlier replays compiled. Without it a
//     replay's TMPDIR is its run directory and every replay compiled from
//     scratch. Set for every batch (one without the meta may compile
//     still), as is the next.
//   - TORCHINDUCTOR_COMPILE_THREADS=1 unless set: what is left to compile
//     is compiled in the replay's process, without a pool of compile
//     workers started (and stopped) for every replay.
//   - REDUCE_COMPILED tells the fork server to import Inductor's modules
//     once, before it forks (reduce_replay.py).
//
// With Options.NoCompile the replays run the step eager instead:
// TORCHDYNAMO_DISABLE=1, read by torch._dynamo's config when it is
// imported (torch 2.x; in torch 2.15 it and torch._dynamo.config.disable
// and torch.compiler.set_stance("force_eager") all leave the compiled
// module's frames uncompiled, checked by hand), which the fork server
// imports after its environment is set.
const (
	CompiledEnv     = "REDUCE_COMPILED"
	cacheDirEnv     = "TORCHINDUCTOR_CACHE_DIR"
	compileThreadsE = "TORCHINDUCTOR_COMPILE_THREADS"
	dynamoDisable   = "TORCHDYNAMO_DISABLE"
)

// compileEnv is the environment a batch's replays get for torch.compile:
// the eager switch with noCompile, else the warm caches' (the variables
// the user set are left as they are), and the zygote's import of Inductor
// for a batch whose meta says its step was compiled.
func compileEnv(b *fixtures.Batch, noCompile bool) []string {
	if noCompile {
		return []string{dynamoDisable + "=1"}
	}
	// The caches are shared whether or not the meta says the step was
	// compiled: a batch kept before the first compiled step (keep="disk")
	// or recorded by an older recorder has no such meta, and a step that
	// does not compile never reads them.
	var env []string
	if b != nil && b.Meta[fixtures.MetaCompiled] != "" {
		env = append(env, CompiledEnv+"="+b.Meta[fixtures.MetaCompiled])
	}
	if os.Getenv(cacheDirEnv) == "" {
		env = append(env, cacheDirEnv+"="+compileCacheDir())
	}
	if os.Getenv(compileThreadsE) == "" {
		env = append(env, compileThreadsE+"=1")
	}
	return env
}

// unsafeUserChars are those Inductor replaces in the user's name
// (torch/_inductor/runtime/cache_dir_utils.py, default_cache_dir).
var unsafeUserChars = regexp.MustCompile(`[\\/:*?"<>|]`)

// compileCacheDir is Inductor's default cache directory as the user's own
// run computes it (torch/_inductor/runtime/cache_dir_utils.py:
// tempfile.gettempdir() joined with "torchinductor_" and the user's name,
// getpass.getuser: LOGNAME, USER, LNAME, USERNAME, then the password
// database), so that the replays share the training run's cache.
func compileCacheDir() string {
	name := ""
	for _, k := range []string{"LOGNAME", "USER", "LNAME", "USERNAME"} {
		if name = os.Getenv(k); name != "" {
			break
		}
	}
	if name == "" {
		if u, err := user.Current(); err == nil {
			name = u.Username
		} else {
			name = fmt.Sprintf("uid_%d", os.Getuid())
		}
	}
	tmp := "/tmp"
	for _, k := range []string{"TMPDIR", "TEMP", "TMP"} { // tempfile.gettempdir's order
		if d := os.Getenv(k); d != "" {
			tmp = d
			break
		}
	}
	return filepath.Join(tmp, "torchinductor_"+unsafeUserChars.ReplaceAllString(name, "_"))
}
