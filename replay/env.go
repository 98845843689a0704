package replay

import (
	"fmt"
	"os"
	"strings"
)

// Device kinds, as DeviceEnv and Pool.Kind take them. Matching is
// case-insensitive and accepts the aliases "nvidia" (CUDA) and "hip", "amd"
// (ROCm).
const (
	DeviceCPU  = "cpu"
	DeviceCUDA = "cuda"
	DeviceROCm = "rocm"
)

// normKind maps a device kind or one of its aliases to DeviceCPU,
// DeviceCUDA or DeviceROCm; it returns "" for a kind it does not know.
func normKind(kind string) string {
	switch strings.ToLower(strings.TrimSpace(kind)) {
	case "", "cpu":
		return DeviceCPU
	case "cuda", "nvidia":
		return DeviceCUDA
	case "rocm", "hip", "amd":
		return DeviceROCm
	}
	return ""
}

// DeviceEnv returns the environment that makes kernel launches synchronous
// on a device of the given kind, so that an asynchronous failure (a device
// assert, an illegal address) is reported at the launch that caused it, not
// at some later call, and its signature is stable across candidates:
//
//   - CUDA: CUDA_LAUNCH_BLOCKING=1.
//   - ROCm: AMD_SERIALIZE_KERNEL=3 (serialize before and after each kernel)
//     and HIP_LAUNCH_BLOCKING=1, which older ROCm releases read instead.
//   - CPU, or a kind DeviceEnv does not know: nothing.
//
// With blocking false (the user turned it off, say because the failure only
// shows with asynchronous launches) it returns nothing for any kind; an
// inherited CUDA_LAUNCH_BLOCKING is then left as the user set it.
func DeviceEnv(kind string, blocking bool) []string {
	if !blocking {
		return nil
	}
	switch normKind(kind) {
	case DeviceCUDA:
		return []string{"CUDA_LAUNCH_BLOCKING=1"}
	case DeviceROCm:
		return []string{"AMD_SERIALIZE_KERNEL=3", "HIP_LAUNCH_BLOCKING=1"}
	}
	return nil
}

// PythonEnv returns the environment every Python worker gets:
//
//   - PYTHONUNBUFFERED=1: stdout and stderr are written through at once.
//     A worker that dies by a signal (SIGSEGV in a kernel, SIGABRT from
//     c10, SIGKILL after a timeout) never flushes its buffers; without this
//     its last lines, which say where it was, would be lost.
//   - PYTHONFAULTHANDLER=1: on SIGSEGV, SIGFPE, SIGABRT, SIGBUS and SIGILL
//     Python dumps the traceback of every thread to stderr before dying by
//     the same signal, so a native crash still names the Python frame that
//     called into it. The exit status is unchanged.
func PythonEnv() []string {
	return []string{"PYTHONUNBUFFERED=1", "PYTHONFAULTHANDLER=1"}
}

// VisibleDevicesEnv returns the environment that restricts a worker to the
// device list devs (as CUDA_VISIBLE_DEVICES takes it: "1", "0,1",
// "GPU-<uuid>"): CUDA_VISIBLE_DEVICES for every kind, and for ROCm
// HIP_VISIBLE_DEVICES as well (HIP reads both; PyTorch's ROCm build
// honours either). It returns nothing when devs is empty.
func VisibleDevicesEnv(kind, devs string) []string {
	if devs == "" {
		return nil
	}
	env := []string{"CUDA_VISIBLE_DEVICES=" + devs}
	if normKind(kind) == DeviceROCm {
		env = append(env, "HIP_VISIBLE_DEVICES="+devs)
	}
	return env
}

// ParseGPUs parses a --gpus value, "0,1" or "GPU-8f3a...,GPU-77c1...",
// into the device list Pool.GPUs takes. Blanks around entries are dropped;
// an empty value gives nil; an empty entry ("0,,1") or one with a blank or
// '=' in it is an error.
func ParseGPUs(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var gpus []string
	for i, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" || strings.ContainsAny(f, " \t\n=") {
			return nil, fmt.Errorf("replay: --gpus %q: entry %d is %q, want a device index or UUID", s, i+1, f)
		}
		gpus = append(gpus, f)
	}
	return gpus, nil
}

// deniedEnv are variables of the reducer's environment a replay never
// inherits, because they change what a worker prints or make it wait for a
// terminal that is not there:
//
//   - PYTHONINSPECT: Python would enter the interactive prompt after the
//     worker's script and hang until the timeout.
//   - PYTHONSTARTUP: only for interactive sessions; dropped with the above.
//   - FORCE_COLOR, PYTHON_COLORS, CLICOLOR_FORCE: colour the traceback with
//     ANSI escapes (Python 3.13+, pytest, rich), which would change the
//     stderr a signature is parsed from.
//
// A Command that needs one of them sets it in Command.Env.
var deniedEnv = map[string]bool{
	"PYTHONINSPECT":  true,
	"PYTHONSTARTUP":  true,
	"FORCE_COLOR":    true,
	"PYTHON_COLORS":  true,
	"CLICOLOR_FORCE": true,
}

// FilterEnv returns env (KEY=VALUE entries, as os.Environ gives them)
// without the entries a replay never inherits: malformed ones (no '=', an
// empty key) and the variables listed above (PYTHONINSPECT, PYTHONSTARTUP,
// FORCE_COLOR, PYTHON_COLORS, CLICOLOR_FORCE). It does not modify env.
func FilterEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || deniedEnv[k] {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// MergeEnv returns base with the entries of each of add set over it, later
// ones winning: a key keeps the position of its first appearance and the
// value of its last, so the child sees each variable once. Malformed
// entries of add (no '=', an empty key) are dropped. It does not modify
// its arguments.
func MergeEnv(base []string, add ...[]string) []string {
	n := len(base)
	for _, a := range add {
		n += len(a)
	}
	out := make([]string, 0, n)
	at := make(map[string]int, n)
	set := func(kv string) {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return
		}
		if i, seen := at[k]; seen {
			out[i] = kv
			return
		}
		at[k] = len(out)
		out = append(out, kv)
	}
	for _, kv := range base {
		set(kv)
	}
	for _, a := range add {
		for _, kv := range a {
			set(kv)
		}
	}
	return out
}

// environ is the base environment of a run: r.Environ, or the reducer's own
// when that is nil, filtered.
func (r *Runner) environ() []string {
	if r.Environ != nil {
		return FilterEnv(r.Environ)
	}
	return FilterEnv(os.Environ())
}
