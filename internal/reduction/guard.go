package reduction

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"reduce/internal/regress"
	"reduce/internal/signature"
	"reduce/replay"
)

// What guards a run against the world changing under it: another reduce
// writing the same --out, the recorded file written over in place while
// its replays read it, and a harness that breaks on every replay.

// lockName is the file in --out whose flock a run holds while it lives.
const lockName = ".reduce.lock"

// maxInfraRun is how many replays in a row may break in the harness (a
// worker that cannot start, a file it cannot read) before the run stops:
// a search cannot go on from answers that say nothing of the candidates.
const maxInfraRun = 5

// lockOut creates --out where needed and takes its lock, so that a second
// run on it stops at once (exit 2, naming the pid that holds it) rather
// than rewrite the first's journal. release gives the lock back and
// removes the file. Every --out problem is bad usage, ErrUsage, a lock
// file that is a symbolic link too (never followed: regress.OpenNoFollow). A
// filesystem without locks (NFS mounted nolock, some Lustre) runs unlocked,
// with a note that says so.
func lockOut(out string) (release func(), note string, err error) {
	fix := "give a directory reduce can create and write"
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, "", errorf(ErrUsage, "--out %s: %v: %s", out, unwrapPath(err), fix)
	}
	path := filepath.Join(out, lockName)
	for range 10 {
		f, err := regress.OpenNoFollow(path, os.O_RDWR|os.O_CREATE, 0o644)
		if errors.Is(err, regress.ErrLink) {
			return nil, "", errorf(ErrUsage, "%v", err)
		}
		if err != nil {
			return nil, "", errorf(ErrUsage, "--out %s: %v: %s", out, unwrapPath(err), fix)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != nil && !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			os.Remove(f.Name())
			return func() {}, fmt.Sprintf("--out %s: no lock (%v): another reduce on it would not be stopped", out, err), nil
		}
		if err != nil {
			pid, _ := io.ReadAll(io.LimitReader(f, 32))
			f.Close()
			holder := "another reduce"
			if p := strings.TrimSpace(string(pid)); p != "" {
				holder = "reduce (pid " + p + ")"
			}
			return nil, "", errorf(ErrUsage, "--out %s is in use by %s: wait for it to end, or give another --out", out, holder)
		}
		// A lock taken on a file the holder removed as it ended is no lock:
		// take the one at the path again.
		if same(f, path) {
			if err := f.Truncate(0); err == nil {
				_, err = f.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0)
			}
			if err != nil {
				f.Close()
				return nil, "", errorf(ErrUsage, "--out %s: %v: %s", out, unwrapPath(err), fix)
			}
			var once sync.Once
			return func() {
				once.Do(func() {
					os.Remove(path)
					f.Close()
				})
			}, "", nil
		}
		f.Close()
	}
	return nil, "", errorf(ErrUsage, "--out %s: could not take %s, which other runs keep replacing: give another --out", out, path)
}

// guardError is an error of guard's: Run returns it as it is.
type guardError struct{ msg string }

func (e *guardError) Error() string { return e.msg }

func guardErrorf(format string, args ...any) error {
	return &guardError{msg: fmt.Sprintf(format, args...)}
}

// same reports that the open file f is the file at path (not a link to
// it).
func same(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Lstat(path)
	return err == nil && os.SameFile(a, b)
}

// unwrapPath is err without the path a *PathError repeats.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// identity is what says that the recorded file is as it was when the run
// read it: a file written over in place (its inode kept) changes what the
// workers map, and every answer after that is about another batch. A file
// renamed over it changes nothing the replays read (they hold the first).
type identity struct {
	mu   sync.Mutex
	info os.FileInfo
	hash string // the content's, hashFile
}

func identify(path string) (*identity, error) {
	fi, err := os.Stat(path)
	return &identity{info: fi}, err
}

// changed is an error when the file at path is the one read but no longer
// holds what it held. A change of its metadata alone (chmod, a hard link:
// the ctime, with the size and mtime kept) is told from a write by the
// content's hash, taken again then.
func (id *identity) changed(path string) error {
	if id == nil || id.info == nil {
		return nil
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	fi, err := os.Stat(path)
	if err != nil || !os.SameFile(fi, id.info) {
		return nil
	}
	if fi.Size() == id.info.Size() && fi.ModTime().Equal(id.info.ModTime()) && ctime(fi).Equal(ctime(id.info)) {
		return nil
	}
	if fi.Size() == id.info.Size() && id.hash != "" {
		if h, err := hashFile(path); err == nil && h == id.hash {
			id.info = fi // the same bytes: no need to hash them again
			return nil
		}
	}
	return guardErrorf("%s was written over while it was being reduced (%d bytes, modified %s; it had %d bytes, modified %s): the replays read the file, so their answers no longer say anything of the recorded batch; no fixture was written: record the batch to a new file (or restore it, and continue with --resume) and run again",
		path, fi.Size(), fi.ModTime().Format(time.RFC3339Nano), id.info.Size(), id.info.ModTime().Format(time.RFC3339Nano))
}

func ctime(fi os.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
	}
	return time.Time{}
}

// guard checks a replay's answer before it is journaled: the recorded
// file unchanged, and not maxInfraRun replays in a row broken in the
// harness. Its errors stop the run with nothing written and the answer
// not journaled.
func (r *run) guard(v *replay.Verdict) error {
	if err := r.source.changed(r.o.Source); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if v.Signature.Family != signature.FamilyInfra {
		r.infraRun = 0
		return nil
	}
	r.infraRun++
	// With -j N, N replays may break at one moment (a full TMPDIR for a
	// second): what stops the run is more in a row than that.
	if r.infraRun < maxInfraRun+r.o.Jobs-1 {
		return nil
	}
	return guardErrorf("%d replays in a row broke in the harness, the last with: %s; no fixture was written: fix what it says (or see reduce replay %s) and run again",
		r.infraRun, cmp.Or(lastLines(v.Result.Stderr, 3), "(no output)"), r.o.Source)
}
