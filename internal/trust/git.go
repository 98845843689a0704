package trust

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// gitTimeout bounds each git command: a repository on a dead network mount
// makes the file not committed, never a hang.
const gitTimeout = 20 * time.Second

// git runs git read-only in dir: no optional locks, no prompt, no
// filesystem monitor (a repository's config may name one, and it would
// run), with the C locale.
func git(dir string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), gitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "core.fsmonitor=false", "-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0", "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		if msg == "" {
			msg = err.Error()
		}
		return nil, errors.New(msg)
	}
	return out, nil
}

// Committed reports whether the file at path is committed, with its bytes
// (digest, its Digest: a fixture's record with its status aside), at HEAD
// of the git repository whose work tree holds root: the repository reduce (or pytest) runs in, never one found
// from the file's own directory (a directory from elsewhere may carry a
// .git of its own that "commits" anything). A file stored with Git LFS is
// committed when HEAD's pointer names its SHA-256. It returns the
// repository's top directory, and why not where it is not.
func Committed(root, path, digest string) (repo string, ok bool, why string) {
	if _, err := exec.LookPath("git"); err != nil {
		return "", false, "not committed in a git repository (git is not installed)"
	}
	out, err := git(root, "rev-parse", "--show-toplevel")
	if err != nil { // in none, or one git refuses (another user's: safe.directory)
		return "", false, fmt.Sprintf("not committed in a git repository of %s (git: %v)", root, err)
	}
	top := strings.TrimRight(string(out), "\n")
	abs, err := filepath.Abs(path)
	if err != nil {
		return top, false, "not committed in " + top
	}
	realTop, err1 := filepath.EvalSymlinks(top)
	realPath, err2 := filepath.EvalSymlinks(abs)
	if err1 != nil || err2 != nil {
		return top, false, "not committed in " + top
	}
	rel, err := filepath.Rel(realTop, realPath)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return top, false, fmt.Sprintf("not committed in %s (the file lies outside it)", top)
	}
	out, err = git(realTop, "ls-tree", "-z", "-l", "--full-tree", "HEAD", "--", filepath.ToSlash(rel))
	if err != nil {
		return top, false, fmt.Sprintf("not committed in %s (git: %s)", top, err)
	}
	mode, kind, object, size, found := parseTreeEntry(out)
	if !found || kind != "blob" || (mode != "100644" && mode != "100755") {
		return top, false, fmt.Sprintf("not committed in %s", top)
	}
	sum, err := blobID(realPath, len(object))
	if err != nil {
		return top, false, fmt.Sprintf("not committed in %s (%v)", top, err)
	}
	if sum == object {
		return top, true, ""
	}
	if filepath.Base(path) == RecordFile && size <= maxRecord { // its status aside (Digest)
		if blob, err := git(realTop, "cat-file", "blob", object); err == nil {
			h := sha256.Sum256(openStatus(blob))
			if "sha256:"+hex.EncodeToString(h[:]) == digest {
				return top, true, ""
			}
		}
	}
	if size <= 1024 { // a Git LFS pointer names the content's SHA-256
		if ptr, err := git(realTop, "cat-file", "blob", object); err == nil && lfsOID(ptr) == strings.TrimPrefix(digest, "sha256:") {
			return top, true, ""
		}
	}
	return top, false, fmt.Sprintf("not committed in %s with these bytes (changed since HEAD)", top)
}

// parseTreeEntry reads the one entry of `git ls-tree -z -l`: "<mode> SP
// <type> SP <object> SP+ <size> TAB <path> NUL".
func parseTreeEntry(out []byte) (mode, kind, object string, size int64, ok bool) {
	line, _, _ := bytes.Cut(out, []byte{0})
	meta, _, found := bytes.Cut(line, []byte{'\t'})
	if !found {
		return "", "", "", 0, false
	}
	f := strings.Fields(string(meta))
	if len(f) != 4 {
		return "", "", "", 0, false
	}
	size, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil {
		size = -1
	}
	return f[0], f[1], f[2], size, true
}

// blobID is git's object id of the file's bytes as a blob: SHA-1 for a
// repository of 40-digit ids, SHA-256 for one of 64.
func blobID(path string, digits int) (string, error) {
	var h hash.Hash
	switch digits {
	case 40:
		h = sha1.New()
	case 64:
		h = sha256.New()
	default:
		return "", fmt.Errorf("an object id of %d digits", digits)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	fmt.Fprintf(h, "blob %d\x00", st.Size())
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// lfsOID is the sha256 a Git LFS pointer names, or "".
func lfsOID(ptr []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(ptr))
	first := true
	for sc.Scan() {
		line := sc.Text()
		if first && !strings.HasPrefix(line, "version https://git-lfs.github.com/spec/") {
			return ""
		}
		first = false
		if oid, ok := strings.CutPrefix(line, "oid sha256:"); ok && len(oid) == 64 {
			return oid
		}
	}
	return ""
}
