package replay

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"reduce/fixtures"
	"reduce/internal/signature"
	"reduce/internal/testenv"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The slurm launcher. The tests that need a cluster run against a real one
// (scripts/slurm-local.sh start, then REDUCE_SLURM=1 and its SLURM_CONF):
// they skip without one and fail instead under REDUCE_REQUIRE_SLURM
// (testenv.Slurm; make test sets both once the cluster is up). The rest
// (the wrapper, the reading of Slurm's texts) need none.

func requireSlurm(t testing.TB) { t.Helper(); testenv.Slurm(t) }

// squeueNames lists the names of the jobs squeue shows, all users.
func squeueNames(t testing.TB) []string {
	t.Helper()
	out, err := exec.Command("squeue", "--noheader", "--format=%j").Output()
	require.NoError(t, err)
	return strings.Fields(string(out))
}

// ours are the names of l's jobs squeue shows.
func ours(t testing.TB, l *slurm) []string {
	t.Helper()
	left, err := l.queued()
	require.NoError(t, err)
	return left
}

// boundOf is what New bound be to: its source and its pool.
func boundOf(t testing.TB, be Backend) *bound {
	t.Helper()
	switch b := be.(type) {
	case *goBackend:
		return &b.bound
	case *torchBackend:
		return &b.bound
	case *execBackend:
		return &b.bound
	}
	t.Fatalf("backend %T is none of New's", be)
	return nil
}

func launcherOf(t testing.TB, be Backend) *slurm {
	t.Helper()
	l := boundOf(t, be).pool.slurm
	require.NotNil(t, l, "backend %T has no launcher", be)
	return l
}

func slurmOptions(o Options) Options {
	o.Launcher = LauncherSlurm
	if o.Timeout == 0 {
		o.Timeout = 60 * time.Second
	}
	return o
}

func TestParseSlurmLog(t *testing.T) {
	for _, tc := range []struct {
		name    string
		log     string
		started bool
		infra   string
		limit   bool
	}{
		{"clean", "reduce-slurm: job=17 node=gpu-03\n", true, "", false},
		{"task exit is the task's", "reduce-slurm: job=17 node=gpu-03\nsrun: error: gpu-03: task 0: Exited with exit code 1\n", true, "", false},
		{"cancelled from outside", "reduce-slurm: job=10 node=vm\nslurmstepd-vm: error: *** STEP 10.0 ON vm CANCELLED AT 2026-12-02T19:16:14 ***\nsrun: error: vm: task 0: Terminated\n", true, SlurmCancelled, false},
		{"cancelled, verbose srun", "srun: job 11 queued and waiting for resources\nsrun: job 11 has been allocated resources\nreduce-slurm: job=11 node=vm\nsrun: Job step aborted: Waiting up to 4 seconds for job step to finish.\nslurmstepd-vm: error: *** STEP 11.0 ON vm CANCELLED AT 2026-12-02T19:16:15 ***\n", true, SlurmCancelled, false},
		{"node failure", "reduce-slurm: job=12 node=vm\nsrun: error: Node failure on vm\nslurmstepd-vm: error: *** STEP 12.0 ON vm CANCELLED AT 2026-12-02T19:16:25 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n", true, SlurmNodeFail, false},
		{"preempted", "reduce-slurm: job=13 node=vm\nslurmstepd: error: *** JOB 13 ON vm CANCELLED AT 2026-12-02T19:16:25 DUE TO PREEMPTION ***\n", true, SlurmPreempted, false},
		{"time limit", "reduce-slurm: job=14 node=vm\nslurmstepd: error: *** STEP 14.0 ON vm CANCELLED AT 2026-12-02T19:16:25 DUE TO TIME LIMIT ***\n", true, "", true},
		{"queue timeout", "srun: error: Unable to allocate resources: Requested nodes are busy\n", false, SlurmQueueTimeout, false},
		{"no allocation", "srun: error: Unable to allocate resources: Unable to contact slurm controller (connect failure)\n", false, SlurmNotStarted, false},
		{"wrapper", "reduce-slurm: job=15 node=vm\nreduce-slurm: error: cannot make a per-run directory in /tmp\n", true, SlurmWrapper, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := parseSlurmLog([]byte(tc.log))
			assert.Equal(t, tc.started, o.started)
			assert.Equal(t, tc.infra, o.infra)
			assert.Equal(t, tc.limit, o.timeLimit)
			if tc.started {
				assert.NotEmpty(t, o.jobID)
				assert.NotEmpty(t, o.node)
			}
		})
	}
}

func TestSplitSlurmLog(t *testing.T) {
	in := "reduce-slurm: job=1 node=vm\nTraceback (most recent call last):\n  File \"x.py\", line 1\nIndexError: Target 4 is out of bounds.\nsrun: error: vm: task 0: Exited with exit code 1\n"
	own, log := splitSlurmLog([]byte(in))
	assert.Equal(t, "Traceback (most recent call last):\n  File \"x.py\", line 1\nIndexError: Target 4 is out of bounds.\n", string(own))
	assert.Equal(t, "reduce-slurm: job=1 node=vm\nsrun: error: vm: task 0: Exited with exit code 1\n", string(log))
	own, log = splitSlurmLog(nil)
	assert.Nil(t, own)
	assert.Nil(t, log)
}

// The wrapper, run here by sh as a Slurm node would run it: the files come
// in order on stdin, {rundir} is the per-run directory, which is gone after.
func TestSlurmWrapper(t *testing.T) {
	s := &slurm{srun: "srun"}
	tmp := t.TempDir()
	run := func(t *testing.T, c Command) (stdout, stderr string, code int) {
		t.Helper()
		w, err := s.command(c, "reduce-test-1")
		require.NoError(t, err)
		i := 0
		for w.Args[i] != "sh" {
			i++
		}
		cmd := exec.Command("sh", w.Args[i+1:]...)
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "SLURM_JOB_ID=42", "SLURMD_NODENAME=n1")
		cmd.Stdin = bytes.NewReader(w.Stdin)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err = cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return o.String(), e.String(), code
	}
	t.Run("files", func(t *testing.T) {
		out, errs, code := run(t, Command{Path: "sh", Args: []string{"-c", `cat "$1"; printf '|'; cat "$2"; printf '|%s|%s' "$(basename "$PWD")" "$REDUCE_RUN_DIR"; exit 3`, "sh", "{rundir}/b.bin", RunDirArg + "/a.py"},
			Dir: RunDirArg, Files: map[string][]byte{"b.bin": []byte("candidate\x00\xff"), "a.py": []byte("module\n")}})
		assert.Equal(t, 3, code)
		assert.Equal(t, "reduce-slurm: job=42 node=n1\n", errs)
		parts := strings.Split(out, "|")
		require.Len(t, parts, 4, out)
		assert.Equal(t, "candidate\x00\xff", parts[0])
		assert.Equal(t, "module\n", parts[1])
		assert.True(t, strings.HasPrefix(parts[2], "reduce-run-"), parts[2])
		assert.Equal(t, filepath.Join(tmp, parts[2]), parts[3])
		left, _ := filepath.Glob(filepath.Join(tmp, "reduce-run-*"))
		assert.Empty(t, left, "per-run directory left behind")
	})
	assert.NotContains(t, slurmWrapper, RunDirArg, "the Runner would expand it in the script")
	assert.NotContains(t, slurmWrapper, runDirQuotedArg, "the Runner would expand it in the script")
	t.Run("stdin", func(t *testing.T) {
		out, _, code := run(t, Command{Path: "sh", Args: []string{"-c", `wc -c`}, Stdin: bytes.Repeat([]byte("x"), 100000)})
		assert.Equal(t, 0, code)
		assert.Equal(t, "100000", strings.TrimSpace(out))
	})
	t.Run("signal", func(t *testing.T) {
		_, _, code := run(t, Command{Path: "sh", Args: []string{"-c", `kill -SEGV $$`}})
		assert.Equal(t, 128+11, code)
		assert.Equal(t, signature.FamilyCrashSignal, signature.Parse(nil, signature.ExitInfo{Code: code}).Family)
	})
	t.Run("quoting", func(t *testing.T) {
		out, _, _ := run(t, Command{Path: "printf", Args: []string{"[%s]", "a b", "", "x{rundir}y{rundir}", "*", "$HOME"}, TempDir: true})
		assert.Regexp(t, `^\[a b\]\[\]\[x/.*/reduce-run-[^/]+y/.*/reduce-run-[^/]+\]\[\*\]\[\$HOME\]$`, out)
	})
}

func TestSlurmOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Launcher: "k8s"}, "want local or slurm"},
		{Options{SlurmArgs: "--partition=gpu"}, "--slurm-args is for --launcher slurm"},
		{Options{SharedDir: "/tmp"}, "--shared-dir is for --launcher slurm"},
		{Options{QueueTimeout: time.Second}, "--queue-timeout is for --launcher slurm"},
	} {
		tc.o.Batch = exampleBatch(t, "four_class_targets")
		_, err := New(tc.o)
		if assert.Error(t, err) {
			assert.Contains(t, err.Error(), tc.want)
		}
	}
}

func TestSlurmOptionErrorsCluster(t *testing.T) {
	requireSlurm(t)
	for _, tc := range []struct {
		args, want string
	}{
		{"--job-name=x", "--job-name is not allowed"},
		{"-I 5", "use --queue-timeout"},
		{"--partition=no-such-partition", "srun --test-only"},
	} {
		_, err := New(slurmOptions(Options{Batch: exampleBatch(t, "four_class_targets"), Kind: KindExec, Replay: "true {batch}", SlurmArgs: tc.args}))
		if assert.Error(t, err, tc.args) {
			assert.Contains(t, err.Error(), tc.want)
		}
	}
}

// Every backend through the cluster gives the verdict it gives locally, and
// each replay was a job of its own.
func TestSlurmBackends(t *testing.T) {
	requireSlurm(t)
	batch := exampleBatch(t, "four_class_targets")
	check := func(t *testing.T, local, remote Options) {
		lb := exampleBackend(t, local, "four_class_targets")
		rb := exampleBackend(t, slurmOptions(remote), "four_class_targets")
		want := replayOK(t, lb, whole)
		seen := map[string]bool{}
		for range 2 {
			v := replayOK(t, rb, whole)
			assert.Equal(t, want.Signature, v.Signature, "slurm stderr:\n%s\nlog:\n%s", v.Result.Stderr, v.Result.Launch.Log)
			assert.Equal(t, LauncherSlurm, v.Launcher)
			assert.Regexp(t, `^[0-9]+$`, v.JobID)
			assert.NotEmpty(t, v.Node)
			assert.Zero(t, v.Requeued)
			assert.False(t, seen[v.JobID], "job %s ran two replays", v.JobID)
			seen[v.JobID] = true
		}
		info := Provenance(rb)
		assert.Equal(t, LauncherSlurm, info.Launcher)
		assert.Equal(t, 2, info.Jobs)
		assert.NotEmpty(t, info.Nodes)
		assert.Equal(t, LauncherLocal, want.Launcher)
		assert.Equal(t, LauncherLocal, Provenance(lb).Launcher)
		l := launcherOf(t, rb)
		require.NoError(t, rb.Close())
		assert.Empty(t, ours(t, l))
	}
	t.Run("go", func(t *testing.T) {
		check(t, goOptions(t, "cuda"), goOptions(t, "cuda"))
	})
	t.Run("exec", func(t *testing.T) {
		o := Options{Kind: KindExec, Replay: `sh -c 'test "$(head -c 8 {batch} | wc -c)" -eq 8 && cd "$REDUCE_RUN_DIR" && echo "IndexError: Target 4 is out of bounds." >&2 && exit 1'`}
		check(t, o, o)
	})
	t.Run("exec-shared-dir", func(t *testing.T) {
		o := Options{Kind: KindExec, Replay: `sh -c 'test -s {batch} && echo "IndexError: Target 4 is out of bounds." >&2 && exit 1'`}
		r := o
		r.SharedDir = t.TempDir()
		check(t, o, r)
	})
	t.Run("torch", func(t *testing.T) {
		python := torchPython(t)
		o := Options{Kind: KindTorch, Python: python, NoZygote: true, Timeout: 2 * time.Minute}
		check(t, o, o)
	})
	// With --shared-dir the go and torch workers build views of a source
	// copied once into the shared directory: the same verdicts as local
	// views. Without it the candidates are built here: the source is the
	// batch in memory, no file.
	views := func(t *testing.T, o Options) {
		shared := t.TempDir()
		path := filepath.Join(t.TempDir(), "batch.bin")
		require.NoError(t, fixtures.Write(path, batch, fixtures.WithCompression(fixtures.CompressionNone)))
		o.File = path
		lb := newBackend(t, o, batch)
		r := o
		r.SharedDir = shared
		rb := newBackend(t, slurmOptions(r), batch)
		src := boundOf(t, rb).src
		require.True(t, strings.HasPrefix(src.Path, shared), "the source %s is copied into the shared directory", src.Path)
		for _, rows := range [][]int64{{2, 0}, {0, 1}} {
			want := replayOK(t, lb, keep(rows))
			got := replayOK(t, rb, keep(rows))
			assert.Equal(t, want.Signature, got.Signature, "%v: slurm stderr:\n%s\nlog:\n%s", rows, got.Result.Stderr, got.Result.Launch.Log)
			assert.Equal(t, LauncherSlurm, got.Launcher)
		}
		nb := newBackend(t, slurmOptions(o), batch)
		assert.Empty(t, boundOf(t, nb).src.Path, "no source file on Slurm without --shared-dir")
	}
	t.Run("go-views-shared-dir", func(t *testing.T) { views(t, goOptions(t, "cuda")) })
	t.Run("torch-views-shared-dir", func(t *testing.T) {
		views(t, Options{Kind: KindTorch, Python: torchPython(t), NoZygote: true, Timeout: 2 * time.Minute})
	})
}

// Run from inside a job (an sbatch script, an salloc shell), each replay is
// still a job of its own, not a step of the enclosing job.
func TestSlurmInsideJob(t *testing.T) {
	requireSlurm(t)
	t.Setenv("SLURM_JOB_ID", "999999")
	t.Setenv("SLURM_JOBID", "999999")
	t.Setenv("SLURM_EXPORT_ENV", "NONE")
	be := exampleBackend(t, slurmOptions(goOptions(t, "cpu")), "four_class_targets")
	v := replayOK(t, be, whole)
	assert.Equal(t, signature.FamilyHostCheck, v.Signature.Family, "%s\n%s", v.Result.Stderr, v.Result.Launch.Log)
	assert.NotEqual(t, "999999", v.JobID)
	assert.Regexp(t, `^[0-9]+$`, v.JobID)
}

// A replay that hangs past the timeout is cancelled in Slurm, not just its
// local srun: the step gets SIGINT (Python's traceback says where it hung),
// then the job is cancelled, and it is out of the queue when Replay
// returns.
func TestSlurmTimeout(t *testing.T) {
	requireSlurm(t)
	// Python, not a shell: Slurm's proctrack/linuxproc (the local cluster's)
	// loses track of a process whose parent exited, and a leftover sleep
	// would hold the step's output open until it ends.
	be := exampleBackend(t, slurmOptions(Options{Kind: KindExec, Timeout: 1500 * time.Millisecond, Grace: time.Second,
		Replay: `/usr/bin/python3 -c 'import sys, time; print("started", file=sys.stderr); time.sleep(60)' {batch}`}), "four_class_targets")
	l := launcherOf(t, be)
	start := time.Now()
	v := replayOK(t, be, whole)
	took := time.Since(start)
	assert.Equal(t, signature.FamilyTimeout, v.Signature.Family, "%s\n%s", v.Result.Stderr, v.Result.Launch.Log)
	assert.Contains(t, string(v.Result.Stderr), "KeyboardInterrupt", "the step was not interrupted first")
	assert.Less(t, took, 20*time.Second)
	assert.Empty(t, ours(t, l), "the job is still in the queue")
	assert.Equal(t, 1, Provenance(be).Canceled)
}

// fillNode takes the whole node with a job of another name for d, and
// returns when it runs.
func fillNode(t *testing.T, d time.Duration) {
	t.Helper()
	name := "reduce-test-fill-" + strconv.Itoa(os.Getpid())
	fill := exec.Command("srun", "--quiet", "--exclusive", "--job-name="+name, "sleep", strconv.Itoa(int(d.Seconds())))
	require.NoError(t, fill.Start())
	t.Cleanup(func() {
		exec.Command("scancel", "--name="+name).Run()
		fill.Wait()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := exec.Command("squeue", "--noheader", "--name="+name, "--format=%T").Output()
		if strings.TrimSpace(string(out)) == "RUNNING" {
			return
		}
		require.True(t, time.Now().Before(deadline), "the filler job never ran")
		time.Sleep(50 * time.Millisecond)
	}
}

// The timeout runs from the job's start: a replay that waits in the queue
// longer than its timeout, then runs within it, is not a timeout.
func TestSlurmTimeoutAfterQueue(t *testing.T) {
	requireSlurm(t)
	fillNode(t, 3*time.Second)
	be := exampleBackend(t, slurmOptions(Options{Kind: KindExec, Timeout: 1500 * time.Millisecond, Replay: `sh -c 'exec sleep 0.3' {batch}`}), "four_class_targets")
	start := time.Now()
	v := replayOK(t, be, whole)
	assert.Equal(t, signature.FamilyPass, v.Signature.Family, "%s", v.Result.Launch.Log)
	assert.Greater(t, time.Since(start), 1500*time.Millisecond, "the job did not wait in the queue")
}

// A step cancelled from outside (scancel, an admin) is no verdict on the
// candidate: it is submitted again, and with no retries left it is infra.
func TestSlurmCancelledFromOutside(t *testing.T) {
	requireSlurm(t)
	mark := filepath.Join(t.TempDir(), "first")
	// The first attempt hangs until cancelled; the second passes.
	replay := `sh -c 'if mkdir ` + mark + ` 2>/dev/null; then sleep 60; fi; exit 0' {batch}`
	cancelFirst := func(t *testing.T, l *slurm) {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := os.Stat(mark); err == nil {
				if left := ours(t, l); len(left) > 0 {
					require.NoError(t, exec.Command("scancel", "--name="+left[0]).Run())
					return
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Error("the first job never ran")
	}
	t.Run("retried", func(t *testing.T) {
		os.Remove(mark)
		be := exampleBackend(t, slurmOptions(Options{Kind: KindExec, Replay: replay}), "four_class_targets")
		l := launcherOf(t, be)
		go cancelFirst(t, l)
		v := replayOK(t, be, whole)
		assert.Equal(t, signature.FamilyPass, v.Signature.Family, "%s", v.Result.Launch.Log)
		assert.Equal(t, 1, v.Requeued)
		assert.Len(t, v.Result.Launch.Jobs, 2)
		info := Provenance(be)
		assert.Equal(t, 1, info.Retried)
		assert.Equal(t, 2, info.Jobs)
		assert.Equal(t, map[string]int{SlurmCancelled: 1}, info.Unresolved)
		// The retry ended by itself: it may still be completing until
		// Close, which waits for it.
		require.NoError(t, be.Close())
		assert.Empty(t, ours(t, l))
	})
	t.Run("no-retries", func(t *testing.T) {
		os.Remove(mark)
		be := exampleBackend(t, slurmOptions(Options{Kind: KindExec, Replay: replay, Retries: -1}), "four_class_targets")
		go cancelFirst(t, launcherOf(t, be))
		v := replayOK(t, be, whole)
		assert.Equal(t, signature.Signature{Family: signature.FamilyInfra, Expression: "slurm: " + SlurmCancelled}, v.Signature)
		assert.False(t, signature.Failing(v.Signature), "a lost job is never a reproduction")
	})
}

// A job that cannot start within the queue timeout is lost, retried, then
// infra. The node is taken by an exclusive job of another name meanwhile.
func TestSlurmQueueTimeout(t *testing.T) {
	requireSlurm(t)
	fillNode(t, 60*time.Second)
	be := exampleBackend(t, slurmOptions(Options{Kind: KindExec, Replay: "true {batch}", QueueTimeout: time.Second, Retries: 1}), "four_class_targets")
	v := replayOK(t, be, whole)
	assert.Equal(t, signature.Signature{Family: signature.FamilyInfra, Expression: "slurm: " + SlurmQueueTimeout}, v.Signature, "%s", v.Result.Launch.Log)
	assert.Equal(t, 1, v.Requeued)
	assert.Empty(t, v.JobID)
	info := Provenance(be)
	assert.Equal(t, map[string]int{SlurmQueueTimeout: 2}, info.Unresolved)
	assert.Empty(t, ours(t, launcherOf(t, be)))
}

// A node that fails under a running replay (set down here with scontrol,
// as slurmctld does when slurmd stops answering) loses its job: infra,
// never a verdict on the candidate.
func TestSlurmNodeFailure(t *testing.T) {
	requireSlurm(t)
	be := exampleBackend(t, slurmOptions(Options{Kind: KindExec, Replay: `sh -c 'exec sleep 60' {batch}`, Retries: -1}), "four_class_targets")
	l := launcherOf(t, be)
	var node string
	t.Cleanup(func() {
		if node == "" {
			return
		}
		exec.Command("scontrol", "update", "NodeName="+node, "State=RESUME").Run()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			out, _ := exec.Command("sinfo", "--noheader", "--nodes="+node, "--format=%T").Output()
			if strings.TrimSpace(string(out)) == "idle" {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("node %s did not come back", node)
	})
	go func() {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if left := ours(t, l); len(left) > 0 {
				out, _ := exec.Command("squeue", "--noheader", "--name="+left[0], "--format=%T %N").Output()
				if state, n, _ := strings.Cut(strings.TrimSpace(string(out)), " "); state == "RUNNING" && n != "" {
					node = n
					if out, err := exec.Command("scontrol", "update", "NodeName="+n, "State=DOWN", "Reason=reduce-test").CombinedOutput(); err != nil {
						t.Errorf("scontrol: %v: %s", err, out)
					}
					return
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Error("the job never ran")
	}()
	v := replayOK(t, be, whole)
	assert.Equal(t, signature.Signature{Family: signature.FamilyInfra, Expression: "slurm: " + SlurmNodeFail}, v.Signature, "%s", v.Result.Launch.Log)
	assert.Empty(t, ours(t, l))
}

// Cancelling the context (Ctrl-C) cancels every job in flight, and Close
// returns with none of them in the queue.
func TestSlurmCanceled(t *testing.T) {
	requireSlurm(t)
	be := exampleBackend(t, slurmOptions(Options{Kind: KindExec, Jobs: 2, Replay: `sh -c 'sleep 60' {batch}`}), "four_class_targets")
	l := launcherOf(t, be)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make([]error, 2)
	verdicts := make([]Verdict, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			verdicts[i], errs[i] = be.Replay(ctx, whole)
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(ours(t, l)) < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	require.Len(t, ours(t, l), 2, "two steps in flight with -j 2")
	time.Sleep(300 * time.Millisecond)
	cancel()
	wg.Wait()
	for i := range 2 {
		assert.ErrorIs(t, errs[i], context.Canceled)
		assert.Equal(t, signature.FamilyInfra, verdicts[i].Signature.Family)
	}
	assert.Empty(t, ours(t, l))
	require.NoError(t, be.Close())
	assert.NotContains(t, strings.Join(squeueNames(t), " "), l.prefix)
}

// Close with replays in flight cancels them.
func TestSlurmClose(t *testing.T) {
	requireSlurm(t)
	be := exampleBackend(t, slurmOptions(Options{Kind: KindExec, Replay: `sh -c 'sleep 60' {batch}`}), "four_class_targets")
	l := launcherOf(t, be)
	done := make(chan error, 1)
	go func() {
		_, err := be.Replay(context.Background(), whole)
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for len(ours(t, l)) < 1 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, be.Close())
	assert.Error(t, <-done)
	assert.Empty(t, ours(t, l))
}
